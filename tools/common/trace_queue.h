/* trace_queue.h - an engine's queue as its requests' own phases tell it: how
 * many waited at once (queue phase open: admitted, not yet in a step), and
 * what the steps that passed them over carried: the step's token budget
 * filled, or a slot or KV blocks held them. */
#ifndef KPI_TRACE_QUEUE_H
#define KPI_TRACE_QUEUE_H

#include <stdint.h>
#include "tools/common/trace.h"

struct trace_queue {
	int requests;               /* arrived in the window with a known queue phase */
	int peak;                   /* the most of them in their queue phase at once, on one target */
	int64_t peak_ns;            /* when */
	int waited;                 /* passed over by at least one step of their engine */
	int64_t waited_prompt_tokens;
	/* the engine steps that began while one of those waited (passed it over) */
	int64_t steps;
	int64_t full_steps;         /* ... that carried step_tokens_max tokens: the step's budget filled */
	int64_t step_tokens_max;    /* the most tokens (prefill + decode) a step carried while they waited */
	int64_t prefill_tokens;     /* summed over the passing-over steps */
	int64_t decode_seqs;
};

/* Fills q for the requests that arrived in [from_ns, to_ns) and the steps
 * of their engines. Returns 0, or -1 with a message in err. */
int trace_queue_wait(struct trace *t, int64_t from_ns, int64_t to_ns, struct trace_queue *q, char *err,
		     size_t errlen);

/* Raises each of nb buckets' queue_depth_max over [from_ns, to_ns) to the
 * most requests in their queue phase at once on one target within it (the
 * samples' depth is one instant a second: a burst served between two of
 * them leaves no trace there). Returns 0, or -1 with a message in err. */
int trace_queue_series(struct trace *t, int64_t from_ns, int64_t to_ns, int nb, struct trace_point *out, char *err,
		       size_t errlen);

#endif
