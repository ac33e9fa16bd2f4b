/* trace_reuse.h - prefix-cache reuse over a window of the trace: the requests
 * a llama.cpp server's engine ran (source http+libllama, schema version 7) and
 * how many of their prompt tokens its KV cache already held. */
#ifndef KPI_TRACE_REUSE_H
#define KPI_TRACE_REUSE_H

#include <stdint.h>
#include "tools/common/trace.h"

struct trace_reuse {
	int requests;               /* arrived in the window with the engine's prompt count */
	int reused;                 /* ... of which reused at least one cached token */
	int64_t prompt_tokens;      /* their prompts as the engine computed them */
	int64_t cached_tokens;      /* of those, held by the cache */
	double hit_ratio;           /* cached / prompt; -1 when requests is 0 */
};

/* Fills r for the requests that arrived in [from_ns, to_ns). A trace older
 * than version 7, or without such requests, gives requests 0. Returns 0, or
 * -1 when the store fails. */
int trace_prefix_reuse(struct trace *t, int64_t from_ns, int64_t to_ns, struct trace_reuse *r);

#endif
