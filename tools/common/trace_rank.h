/* trace_rank.h - which groups of requests (hosts, models, pods) carry the
 * change of a trace's p99 TTFT between a baseline and an incident window:
 * the requests of each window within a percentile of its p99 (the p99 band)
 * carry the change; each group's part of that band's mean, incident less
 * baseline, is its contribution, and the parts add up to the band's change.
 * kpi-report asks it of the fleet's copy (trace_fleet.h) and of one host's
 * trace (trace_pods.h). */
#ifndef KPI_TRACE_RANK_H
#define KPI_TRACE_RANK_H

#include <stdint.h>

typedef struct sqlite3 sqlite3;

#define TRACE_RANK_GROUPS 16
struct trace_rank_group {
	char name[128];
	int n_base, n_inc;              /* requests with a TTFT in each window */
	double p99_base, p99_inc;       /* the group's own p99 TTFT, ns (0: none) */
	double delta;                   /* its contribution to the band's change, ns */
	double share;                   /* of the change in its direction, 0..1 */
	/* the group's own TTFT phases in the band (net-in, queue or server
	 * wait, prefill, the rest): their contributions, and the largest */
	double phase_delta[4];
	int top_phase;
};

/* The requests of db (a trace of schema version 10 or later; "pod" needs
 * 13) grouped by "host", "model" or "pod" (NAMESPACE/NAME, "(none)" outside
 * any pod), windows [from, to) of t_arrive_ns, largest share first: the
 * count (<= max), -1 on a read error or another by. */
int trace_rank(sqlite3 *db, const char *by, int64_t base_from, int64_t base_to, int64_t inc_from, int64_t inc_to,
	       struct trace_rank_group *out, int max);

#endif
