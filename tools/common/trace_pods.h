/* trace_pods.h - a window's requests by the pod that served them (schema
 * version 13: the agent names pods from the cgroup and the runtime's state,
 * with no API server), for kpitop's pod view; and the pods ranked by their
 * share of a p99 TTFT change, for kpi-report over one host's trace. */
#ifndef KPI_TRACE_PODS_H
#define KPI_TRACE_PODS_H

#include <stdint.h>
#include "tools/common/trace.h"
#include "tools/common/trace_rank.h"

struct trace_pods;

struct trace_pod {
	char name[128];                 /* NAMESPACE/NAME; "(host)" outside any pod */
	char container[64];             /* the container that served its first request ("" none) */
	int requests;                   /* arrived in the window */
	int errors;                     /* finished with 5xx or finish_reason error */
	int rejected;                   /* answered 429 */
	int64_t ttft_p50, ttft_p99;     /* ns over its requests with a TTFT; -1 none */
	int64_t tpot_p99;               /* ns; -1 none */
};

/* A reader of trace t's pods on a connection of its own; NULL, err saying
 * why, when the trace has no pod columns (written before schema version 13). */
struct trace_pods *trace_pods_open(struct trace *t, char *err, size_t errlen);
void trace_pods_close(struct trace_pods *p);
/* The pods of the requests that arrived in [from_ns, to_ns), the busiest
 * first (then by name): how many (<= max; the rest not read), or -1. */
int trace_pods_window(struct trace_pods *p, int64_t from_ns, int64_t to_ns, struct trace_pod *out, int max);

/* The pods ranked by their share of the p99 TTFT change from the baseline
 * [base_from, base_to) to the incident [inc_from, inc_to) (trace_rank.h;
 * "(none)": the requests of processes outside any pod): how many, or -1. */
int trace_pods_rank(struct trace_pods *p, int64_t base_from, int64_t base_to, int64_t inc_from, int64_t inc_to,
		    struct trace_rank_group *out, int max);

#endif
