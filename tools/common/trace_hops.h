/* trace_hops.h - where each top-level request's time went, hop by hop
 * (schema/008_hops.sql): for kpi-report's integration finding, its e2e split
 * into the hops its calls reached and what its own process kept; for
 * kpitop's hops view, every hop of one request's trace. */
#ifndef KPI_TRACE_HOPS_H
#define KPI_TRACE_HOPS_H

#include <stdint.h>
#include "tools/common/trace.h"

#define TRACE_HOPS_NAMES 12     /* distinct hop names a reader keeps; more go to the last */
#define TRACE_HOPS_NAME_LEN 96

struct trace_hops;

/* A reader of t's hops views on a connection of its own; NULL with the
 * reason in err when the trace has none (written before schema version 8). */
struct trace_hops *trace_hops_open(struct trace *t, char *err, size_t errlen);
void trace_hops_close(struct trace_hops *h);

/* One top-level request with more than one hop: its e2e, and part_ns[k] the
 * time of the hop named k (trace_hops_name): the inbound hops its calls
 * reached ("kpi-infer", "python3 /v1/check") and the rest, its own process's
 * ("python3 (itself)"); they add up to e2e_ns. */
struct trace_hops_req {
	int64_t e2e_ns;
	int64_t part_ns[TRACE_HOPS_NAMES];
};
/* The ones that arrived in [from, to): their count (rows valid until the next
 * call), or -1 on a failed query.  Names are kept across calls, so that two
 * windows' parts line up. */
int trace_hops_window(struct trace_hops *h, int64_t from_ns, int64_t to_ns,
		      const struct trace_hops_req **rows);
int trace_hops_n_names(const struct trace_hops *h);
const char *trace_hops_name(const struct trace_hops *h, int k);
/* k is the model hop's name in the last window that had one (-1: none seen). */
int trace_hops_model(const struct trace_hops *h);

/* One hop of a trace, as the view hops has it (unknown times and phases -1). */
struct trace_hop {
	int depth, pid;
	char comm[16], direction[4], link_rule[8], path[48], peer[48];
	int64_t t_arrive_ns, t_done_ns, e2e_ns;
	int64_t phase[PH_N], server_wait_ns;
};
/* The hops of the trace that holds the inbound request of pid that arrived
 * at t_arrive_ns, in order of arrival: how many (<= max; 0 when it is in
 * none), or -1 on a failed query. */
int trace_hops_of(struct trace_hops *h, int pid, int64_t t_arrive_ns, struct trace_hop *out, int max);

#endif
