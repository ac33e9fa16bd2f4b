/* trace_path.h - where the trace store lives unless told otherwise: one
 * definition for the writer (kpi-agent --db) and the readers (kpitop, kpi-report). */
#ifndef KPI_TRACE_PATH_H
#define KPI_TRACE_PATH_H

#define KPI_TRACE_DEFAULT_DB "/var/lib/kpiscope/trace.db"

#endif
