/* store.h - the SQLite trace store: schema migrations from the embedded
 * schema/NNN_*.sql, views.sql and views_split.sql, and a writer that batches records into one transaction per
 * flush. */
#ifndef KPI_STORE_H
#define KPI_STORE_H

#include "agent/record.h"
#include "schema/trace_path.h"

#define KPI_AGENT_VERSION "0.1.0"

#define TRACE_STORE_DEFAULT_PATH KPI_TRACE_DEFAULT_DB
/* While writes fail (disk full, DB unwritable) each queue keeps at most this
 * many rows in memory; later ones are shed and counted (meta shed_*_total). */
#define TRACE_STORE_DEFAULT_BACKLOG 100000

struct trace_store;

/* Opens (creating directory 0750 and file 0640 when missing) and migrates the
 * DB at path.  On failure returns NULL with a message in err. */
struct trace_store *trace_store_open(const char *path, bool token_detail, char *err, size_t errlen);
/* The sink that queues records for the next flush. */
struct kpi_sink trace_store_sink(struct trace_store *st);
/* One transaction: queued rows, the inflight table rewritten from live
 * (NULL: emptied) and meta. Returns 0, or -1 with the error in err (the rows
 * stay queued). */
int trace_store_flush(struct trace_store *st, const struct kpi_inflight_view *live,
		      uint64_t now_mono, uint64_t drops, char *err, size_t errlen);
size_t trace_store_pending(const struct trace_store *st);
void trace_store_set_max_backlog(struct trace_store *st, size_t rows);
/* Requests, and steps + samples, shed because the backlog was full. */
void trace_store_shed(const struct trace_store *st, uint64_t *requests, uint64_t *rows);
/* Retention (agent/retain.h): rows older than keep_ns leave, and the oldest
 * while the rows take more than max_bytes; 0 turns either off. The defaults
 * are RETAIN_DEFAULT_*. Rounds run after each flush. */
void trace_store_set_retention(struct trace_store *st, int64_t keep_ns, int64_t max_bytes);
/* Rows retention removed so far. */
uint64_t trace_store_retained(const struct trace_store *st);
/* Of them, rows kpi-ship had not shipped (its cursor in the trace): the loss unshipped_rows. */
uint64_t trace_store_unshipped(const struct trace_store *st);
/* Final flush is the caller's job; this records the run's end and closes. */
void trace_store_close(struct trace_store *st);
/* The schema version this binary writes (highest NNN_*.sql). */
int trace_store_schema_version(void);
int64_t trace_store_run_id(const struct trace_store *st);

#endif
