/* metrics.h - the daemon's own Prometheus /metrics: vLLM-compatible names and
 * buckets, kept by the I/O thread (no locks) from the engine's timestamps. */
#ifndef KPI_METRICS_H
#define KPI_METRICS_H

#include <stdint.h>

#include "abi/kpi_kv_wire.h"
#include "daemon/engine.h"
#include "daemon/server/sbuf.h"

#define METRICS_MAX_BUCKETS 24

struct histogram {
	const char *name, *help;
	const double *bounds;   /* upper bounds, ascending; +Inf implied */
	int nbounds;
	uint64_t counts[METRICS_MAX_BUCKETS + 1]; /* per bucket, not cumulative */
	uint64_t count;
	double sum;
};

enum metrics_hist {
	MH_TTFT, MH_ITL, MH_TPOT, MH_E2E, MH_QUEUE, MH_PREFILL, MH_DECODE, MH_INFERENCE,
	MH_PROMPT_TOKENS, MH_GENERATION_TOKENS,
	MH_KV_TRANSFER,       /* decode worker: a KV transfer's first stream byte -> last */
	MH__COUNT
};

struct metrics {
	struct histogram h[MH__COUNT];
	uint64_t success[KPI_FINISH__COUNT]; /* by enum kpi_finish_reason */
	uint64_t http_status[600];   /* responses by status code */
	uint64_t rejected_total;
	uint64_t connections_total;
	int connections_open;
	/* KV transfers (docs/disaggregation.md) */
	uint64_t kv_transfers, kv_received_bytes;     /* decode worker, complete ones */
	uint64_t kv_received_in_place;                /* of which straight into the engine's blocks */
	uint64_t kv_errors[KPI_KV_ERR__COUNT];         /* decode worker, failed ones by cause */
	uint64_t kv_sends, kv_sent_bytes;              /* prefill worker */
	int kv_fetching;                               /* decode worker, now */
	bool kv_decode, kv_prefill;                    /* which of them to render */
};

void metrics_init(struct metrics *m);
void metrics_observe(struct metrics *m, enum metrics_hist h, double v);
/* Prometheus text format 0.0.4. */
void metrics_render(const struct metrics *m, const struct engine_stats *st,
		    const char *model_name, struct sbuf *out);

#endif
