/* trace_reuse.c - prefix-cache reuse of a window's requests, from the
 * requests' engine_prompt_tokens and cached_prompt_tokens (schema/007_llama.sql). */
#include <stdlib.h>
#include <string.h>
#include "tools/common/trace_reuse.h"

int trace_prefix_reuse(struct trace *t, int64_t from_ns, int64_t to_ns, struct trace_reuse *r)
{
	const int64_t *ts, *v;
	int n;

	memset(r, 0, sizeof(*r));
	r->hit_ratio = -1;
	if (!trace_has_prompt_reuse(t))
		return 0;
	if ((n = trace_column(t, "engine_prompt_tokens", from_ns, to_ns, &ts, &v)) < 0)
		return -1;
	for (int i = 0; i < n; i++)
		r->prompt_tokens += v[i];
	r->requests = n;
	if ((n = trace_column(t, "cached_prompt_tokens", from_ns, to_ns, &ts, &v)) < 0)
		return -1;
	for (int i = 0; i < n; i++) {
		r->cached_tokens += v[i];
		r->reused += v[i] > 0;
	}
	if (r->requests && r->prompt_tokens > 0)
		r->hit_ratio = (double)r->cached_tokens / (double)r->prompt_tokens;
	return 0;
}
