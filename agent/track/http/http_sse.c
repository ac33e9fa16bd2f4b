/* http_sse.c - server-sent events: split at blank lines across writes and
 * chunks, classified from their first bytes by the JSON key scan. */
#include <string.h>
#include "http_sse.h"

/* What one event's data says about its kind. */
struct evclass {
	http_key_fn *usage;
	void *ctx;
	bool content;                   /* a non-empty content-like string */
	bool empty;                     /* an empty one */
	bool role;                      /* a "role" key: a chat stream's role-only first chunk */
	int rtype;                      /* Responses API type: 1 *.delta, 2 other, 0 none */
};

static int response_type(const char *s, size_t n)
{
	if (n < 9 || memcmp(s, "response.", 9))
		return 0;
	return n > 15 && !memcmp(s + n - 6, ".delta", 6) ? 1 : 2;
}

static void event_key(void *ctx, int key, const struct http_jval *v)
{
	struct evclass *c = ctx;
	if (key == HTTP_K_TYPE) {
		if (!c->rtype && v->type == HTTP_J_STR && v->complete)
			c->rtype = response_type(v->s, v->len);
	} else if (key >= HTTP_K_CONTENT) {
		/* `"content":"` with the rest not captured counts (docs/agent.md) */
		if (v->type == HTTP_J_STR && (v->len || !v->complete))
			c->content = true;
		else if (v->type == HTTP_J_STR)
			c->empty = true;
	} else if (key == HTTP_K_ROLE) {
		c->role = true;
	} else {
		c->usage(c->ctx, key, v);
	}
}

static bool field(const char *l, size_t n, const char *name)
{
	size_t k = strlen(name);
	return n >= k && !memcmp(l, name, k);
}

bool http_sse_scan(const struct http_sse *e, unsigned mask, http_key_fn *fn, void *ctx, char *name,
		   size_t name_len)
{
	const char *p = e->buf, *end = e->buf + e->len;
	bool done = false;

	name[0] = 0;
	while (p < end) {
		const char *nl = p;
		while (nl < end && *nl != '\n' && *nl != '\0')
			nl++;
		size_t n = (size_t)(nl - p);
		bool whole = nl < end && *nl == '\n';
		if (field(p, n, "event:") && whole) {
			size_t s = n > 6 && p[6] == ' ' ? 7 : 6, k = n - s < name_len - 1 ? n - s : name_len - 1;
			memcpy(name, p + s, k);
			name[k] = 0;
		} else if (field(p, n, "data:")) {
			size_t s = n > 5 && p[5] == ' ' ? 6 : 5;
			if (n - s == 6 && !memcmp(p + s, "[DONE]", 6))
				done = true;
			else
				http_json_scan(p + s, n - s, mask, fn, ctx);
		} else if (n && p[0] != ':' && !field(p, n, "id:") && !field(p, n, "retry:") &&
			   !field(p, n, "event:")) {
			http_json_scan(p, n, mask, fn, ctx); /* a line's tail after a cut */
		}
		p = nl + 1;
	}
	return !done;
}

enum http_ev_kind http_sse_classify(const struct http_sse *e, http_key_fn *usage, void *ctx)
{
	struct evclass c = { .usage = usage, .ctx = ctx };
	char name[40];
	bool done = !http_sse_scan(e, HTTP_EVENT_KEYS, event_key, &c, name, sizeof(name));
	int named = response_type(name, strlen(name));
	int rtype = named ? named : c.rtype;
	if (done)
		return HTTP_EV_OTHER;
	if (rtype)
		return rtype == 1 ? HTTP_EV_CONTENT : HTTP_EV_OTHER;
	if (c.content)
		return HTTP_EV_CONTENT;
	if (e->cut)
		return HTTP_EV_UNKNOWN;
	return c.empty && !c.role ? HTTP_EV_EMPTY : HTTP_EV_OTHER;
}

void http_sse_reset(struct http_sse *e)
{
	memset(e->buf, 0, e->len);
	e->len = 0;
	e->in_line = e->cut = false;
}

static void put(struct http_sse *e, const char *p, size_t n)
{
	size_t c = n < HTTP_SSE_KEEP - e->len ? n : HTTP_SSE_KEEP - e->len;
	memcpy(e->buf + e->len, p, c);
	e->len += (uint16_t)c;
	e->cut |= c < n;
}

void http_sse_cut(struct http_sse *e)
{
	put(e, "", 1);
	e->cut = e->in_line = true;
}

void http_sse_feed(struct http_sse *e, const char *p, size_t len,
		   void (*on_event)(void *ctx, const struct http_sse *e), void *ctx)
{
	while (len) {
		const char *lf = memchr(p, '\n', len);
		size_t seg = lf ? (size_t)(lf - p) : len;
		for (size_t i = 0; i < seg;) {          /* the line's bytes, CRs dropped */
			const char *cr = memchr(p + i, '\r', seg - i);
			size_t run = cr ? (size_t)(cr - p) - i : seg - i;
			if (run) {
				e->in_line = true;
				put(e, p + i, run);
			}
			i += run + (cr != NULL);
		}
		if (!lf)
			return;
		if (e->in_line) {
			put(e, "\n", 1);
			e->in_line = false;
		} else if (e->len || e->cut) {
			on_event(ctx, e);
			http_sse_reset(e);
		}
		p += seg + 1;
		len -= seg + 1;
	}
}
