/* trace_disagg.h - disaggregated requests over a window of the trace (schema
 * version 10, docs/disaggregation.md): their phases across the router, prefill
 * and decode workers, the KV transfer's bytes and rate, why the decode side
 * made them wait for a slot, and what made up their TTFT around its p99. */
#ifndef KPI_TRACE_DISAGG_H
#define KPI_TRACE_DISAGG_H

#include <stdint.h>
#include "tools/common/trace.h"

/* A disaggregated request's phases, in order; the first TD_TTFT_N of them
 * come before its first token reaches the client. */
enum trace_disagg_phase {
	TD_NET_IN, TD_ROUTER, TD_QUEUE, TD_PREFILL, TD_KV, TD_DECODE_QUEUE, TD_DECODE, TD_NET_OUT, TD_N
};
#define TD_TTFT_N 6
extern const char *const trace_disagg_phase_name[TD_N];  /* "net-in", "router", "prefill queue", ... */

/* Why a decode worker's request waited for a running slot (requests.slot_wait). */
enum trace_slot_wait { TD_SLOT_SLOTS, TD_SLOT_BLOCKS, TD_SLOT_QUEUE, TD_SLOT_NONE, TD_SLOT_N };
extern const char *const trace_slot_wait_name[TD_SLOT_N];  /* "slots", "blocks", "queue", "none" */

struct trace_disagg_window {
	int requests;                   /* the client-facing rows (the router's; the decode
					 * worker's where no router was traced) that arrived */
	int transfers;                  /* ... that moved KV from a prefill worker */
	int failed;                     /* ... whose transfer failed (kv_status not ok) */
	struct trace_dist ph[TD_N];     /* per phase, over the requests that have it (ns) */
	struct trace_dist ttft;
	int64_t kv_bytes;               /* KV moved, all transfers */
	double kv_bytes_mean;           /* per transfer */
	/* the transfers' rate, bytes/s: all bytes over all stream time, and the
	 * median request's; -1 without one */
	double rate, rate_p50;
	int slot[TD_SLOT_N];            /* requests by why they waited for a slot */
	int slot_ahead_max;             /* the most that waited ahead of one */
	/* the requests ranked within +-1 percentile of the p99 TTFT (at least the
	 * slowest 5): the mean of each phase before the first token, and
	 * [TD_TTFT_N] what of their TTFT those do not cover (the first write);
	 * band50 the same of those within +-5 percentiles of the median (at
	 * least the 5 nearest), the typical request, which a few stalled ones
	 * (a busy machine) do not move */
	int band_n, band50_n;
	double band[TD_TTFT_N + 1], band50[TD_TTFT_N + 1];
};

struct trace_disagg;

/* A reader on a connection of its own; NULL with the reason in err when the
 * trace has no disaggregation columns (written before schema version 10). */
struct trace_disagg *trace_disagg_open(struct trace *t, char *err, size_t errlen);
void trace_disagg_close(struct trace_disagg *d);
/* Fills w for the requests that arrived in [from_ns, to_ns) (requests 0:
 * none). Returns 0, or -1 when the store fails. */
int trace_disagg_window(struct trace_disagg *d, int64_t from_ns, int64_t to_ns,
			struct trace_disagg_window *w);

#endif
