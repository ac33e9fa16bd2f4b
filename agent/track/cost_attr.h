/* cost_attr.h - splits each sample interval's time and energy across the batch
 * steps in it, and each step's share across its requests by weighted tokens;
 * a target traced from its HTTP exchange (no steps) has each request's time
 * in flight stand for a step of its own (docs/cost.md). Pure bookkeeping, no BPF or SQLite: tests feed it records;
 * what it settles are the rows cost_store.h writes. */
#ifndef KPI_COST_ATTR_H
#define KPI_COST_ATTR_H

#include <stdbool.h>
#include <stdint.h>
#include "abi/kpi_step_seq.h"
#include "agent/sinks/cost_store.h"   /* the rows it settles: struct cost_interval, cost_req */

/* A token's weight in its step's split: a prompt token prefilled, a token
 * decoded. Stated in the trace's meta (cost_prefill_weight, cost_decode_weight). */
#define COST_PREFILL_WEIGHT 1
#define COST_DECODE_WEIGHT 1

struct cost_attr;

struct cost_attr_stats {
	uint64_t intervals, steps, unlisted_steps;   /* steps settled, of which with no list */
	uint64_t requests;                          /* requests handed out */
	uint64_t attributed_ns, idle_ns, unattributed_ns;
	uint64_t orphan_ns, orphan_uj;              /* shares of requests that got no row */
	uint64_t unwritten;                         /* requests / intervals the store never took */
	/* in-flight spans, those that start after their arrival (from an
	 * inferred start on the engine), those that came after their time was
	 * split (no share) */
	uint64_t http_requests, http_inferred, http_late;
};

struct cost_attr *cost_attr_new(uint32_t prefill_weight, uint32_t decode_weight);
void cost_attr_free(struct cost_attr *a);

/* A chunk of a step's sequence list (kpi:step__seqs, right after step__begin,
 * at t_probe): until its step__end the step is open. */
void cost_attr_step_seqs(struct cost_attr *a, uint32_t pid, uint64_t step, uint32_t n_total,
			 uint32_t first, const struct kpi_step_seq *e, uint32_t n, uint64_t t_probe);
/* A step's record (step__begin, step__end). */
void cost_attr_step(struct cost_attr *a, uint32_t pid, uint64_t step, uint64_t t_start, uint64_t t_end);
/* A request's row went to the store; it ended at t_done. */
void cost_attr_request(struct cost_attr *a, uint32_t pid, uint64_t seq_id, uint64_t t_done);

/* A request of a target with no steps has no seq_id: it is keyed here by its
 * arrival with the high bit set (no seq_id of kpi-infer's is that large), the
 * next free key when another has that arrival (HTTP/2 streams opened in one
 * read), and its row found by (pid, t_arrive_ns, stream): cost_req.http. */
#define COST_HTTP_KEY(t_arrive) ((uint64_t)(t_arrive) | 1ull << 63)
#define COST_KEY_IS_HTTP(k) ((k) >> 63 != 0)
/* Such a request's row went to the store (stream: its HTTP/2 stream, 0 for
 * HTTP/1.1): its time in flight from t_start, [t_start, t_done), is a step
 * whose one sequence is the request, so the busy time of an interval is the
 * union of the spans in flight, each instant shared equally by the requests
 * in flight then and left to a step that runs in it (docs/cost.md, "Targets
 * traced from their HTTP exchange"). t_start is its arrival, or where the
 * inferred split puts its start on the engine (after its queue wait); one
 * outside [t_arrive, t_done] is taken for the arrival. */
void cost_attr_http_request(struct cost_attr *a, uint32_t pid, uint64_t t_arrive, uint64_t t_start,
			    int64_t stream, uint64_t t_done);
/* Whether such requests are in flight, or have ended without their row
 * (held by the split): the intervals wait for them, as for an open step,
 * up to COST_KEEP_NS after their end. */
void cost_attr_hold(struct cost_attr *a, bool in_flight);
/* A sample at t: the first starts the clock, each later one closes the
 * interval since the one before with the energy counted in it (< 0: none). */
void cost_attr_interval(struct cost_attr *a, uint64_t t, int64_t energy_uj);
/* Settles the closed intervals, oldest first, but for the newest (a step may
 * have begun just before it and not told yet) and those a step still open at
 * their end holds back (up to COST_KEEP_NS); final settles everything, steps
 * still open counted up to the last sample. */
void cost_attr_settle(struct cost_attr *a, uint64_t now, bool final);
/* Offers settled intervals and finished requests; a callback returns true
 * when written, false to be offered again at the next drain. */
void cost_attr_drain(struct cost_attr *a, uint64_t now,
		     bool (*interval_fn)(void *ctx, const struct cost_interval *i),
		     bool (*req_fn)(void *ctx, const struct cost_req *r), void *ctx);
/* The target exited: its open steps close at now, its requests without a
 * row are dropped (counted as orphans). */
void cost_attr_forget_pid(struct cost_attr *a, uint32_t pid, uint64_t now);
void cost_attr_stats(const struct cost_attr *a, struct cost_attr_stats *out);

/* total split in proportion to w[0..n) (any size), exact: the out[] add up
 * to total, each within 1 of its share. kpi_gpu_split_by_tokens' arithmetic. */
void cost_split(uint64_t total, const uint64_t *w, int n, uint64_t *out);

#endif
