/* http_track.c - the HTTP/1.1 framing behind http_track.h: message heads and
 * bodies per direction, gaps and lost framing, exchanges queued in request
 * order and matched to responses in order. Chunked bodies are decoded by
 * http_chunked.c, JSON bodies scanned by http_json.c, events by http_sse.c. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "http_chunked.h"
#include "http_text.h"
#include "http_track.h"
#include "http_xnode.h"

/* ---- limits and state ---------------------------------------------------- */

#define LINE_KEEP  160  /* bytes of a head line kept: what we need is at its start */

enum dstate {
	D_START,        /* between messages */
	D_HEAD,         /* start line and headers */
	D_BODY,         /* Content-Length bytes left, or until the close */
	D_CHUNKED,      /* a chunked body (http_chunked.h) */
	D_UNSYNCED,     /* framing lost: looking for a message start */
	D_DEAD,         /* upgraded to another protocol: ignored */
};

/* What a message head says, while it is parsed. */
struct head {
	int64_t content_length;         /* -1 none */
	int status;                     /* responses */
	bool first;                     /* start line seen */
	bool chunked, sse, expect, close;
};

struct dir {
	uint8_t state;
	bool close_delim;               /* D_BODY runs until the close */
	bool line_cut;                  /* the line was longer than LINE_KEEP */
	uint16_t line_len;
	uint64_t left;                  /* bytes left in the body */
	uint64_t msg_ts;                /* ts of the message's first byte */
	struct head h;
	struct http_xnode *x;                /* the exchange of this message; NULL: not tracked */
	struct http_chunked ch;         /* D_CHUNKED */
	struct http_json_carry carry;   /* a body's key scan across pieces */
	char line[LINE_KEEP];
};

struct http_track {
	struct http_track_cfg cfg;
	struct http_track_stats st;
	uint64_t last_ts;
	struct http_xnode *head, *tail;      /* exchanges in request order */
	unsigned queued;
	unsigned owed;                  /* responses still due to exchanges handed over (expired) */
	struct dir in, out;
	struct http_sse ev;
};

#define STAT(t, f, n) do { (t)->st.f += (n); \
	if ((t)->cfg.totals) (t)->cfg.totals->f += (n); } while (0)

static void dir_unsync(struct http_track *t, struct dir *d, uint64_t ts, bool malformed);

/* ---- server-sent events --------------------------------------------------- */

/* The event a write completed takes that write's time. */
struct sse_ctx {
	struct http_track *t;
	struct http_xnode *n;
	uint64_t ts;
};

static void sse_event(void *ctx, const struct http_sse *e)
{
	struct sse_ctx *c = ctx;
	enum http_ev_kind k = http_xnode_event(c->n, e, c->ts);
	if ((k == HTTP_EV_CONTENT || k == HTTP_EV_EMPTY) && c->t->cfg.on_token)
		c->t->cfg.on_token(c->t->cfg.ctx, &c->n->x, c->ts);
	if (k == HTTP_EV_UNKNOWN)
		STAT(c->t, unknown_events, 1);
}

/* ---- exchanges ------------------------------------------------------------- */

/* Hands the oldest exchange over with reason end at ts and forgets it (a
 * response always belongs to the oldest: the others wait behind it). */
static void deliver(struct http_track *t, enum http_end end, uint64_t ts)
{
	struct http_xnode *n = t->head;
	if (!(t->head = n->next))
		t->tail = NULL;
	t->queued--;
	if (t->in.x == n)
		t->in.x = NULL;
	if (t->out.x == n)
		t->out.x = NULL;
	http_xnode_end(n, end, ts);
	STAT(t, exchanges, 1);
	if (t->cfg.on_exchange)
		t->cfg.on_exchange(t->cfg.ctx, &n->x);
	http_xnode_free(n);
}

static void line_clear(struct dir *d)
{
	memset(d->line, 0, d->line_len);
	d->line_len = 0;
	d->line_cut = false;
}

static void dir_reset(struct dir *d, enum dstate state)
{
	line_clear(d);
	http_json_carry_clear(&d->carry);
	d->close_delim = false;
	d->state = state;
	d->x = NULL;
}

/* More pipelined requests than HTTP_TRACK_MAX_QUEUE: not a server we can follow. */
static void give_up(struct http_track *t, uint64_t ts)
{
	STAT(t, unsynced, 1);
	STAT(t, malformed, 1);
	while (t->head)
		deliver(t, HTTP_END_UNSYNCED, ts);
	dir_reset(&t->in, D_UNSYNCED);
	dir_reset(&t->out, D_UNSYNCED);
	http_sse_reset(&t->ev);
	t->owed = 0;
}

/* ---- message heads ---------------------------------------------------------- */

/* Takes bytes up to and including a LF into d->line (LINE_KEEP at most);
 * *done when the line ended (then NUL-terminated, its CR dropped). */
static size_t line_take(struct dir *d, const uint8_t *p, size_t n, bool *done)
{
	const uint8_t *lf = memchr(p, '\n', n);
	size_t take = lf ? (size_t)(lf - p) + 1 : n, body = lf ? take - 1 : take;
	size_t room = LINE_KEEP - 1u - d->line_len, c = body < room ? body : room;
	memcpy(d->line + d->line_len, p, c);
	d->line_len += (uint16_t)c;
	d->line_cut |= c < body;
	*done = lf != NULL;
	if (*done && d->line_len && d->line[d->line_len - 1] == '\r')
		d->line[--d->line_len] = 0;
	d->line[d->line_len] = 0;
	return take;
}

/* "METHOD /path HTTP/1.x" (the version may lie past a cut line). */
static bool request_line(const struct dir *d, char *method, char *path)
{
	const char *l = d->line;
	size_t n = d->line_len, m = 0, ps, pe;
	while (m < n && l[m] >= 'A' && l[m] <= 'Z')
		m++;
	if (!m || m >= HTTP_TRACK_METHOD_LEN || m >= n || l[m] != ' ')
		return false;
	for (ps = m + 1, pe = ps; pe < n && l[pe] != ' '; pe++)
		;
	const char *v = l + pe + 1;
	if (pe == n ? !d->line_cut :
	    n - pe - 1 != 8 || memcmp(v, "HTTP/1.", 7) || (v[7] != '0' && v[7] != '1'))
		return false;
	if (ps == pe || (l[ps] != '/' && l[ps] != '*'))    /* origin form, or OPTIONS * */
		return false;
	memcpy(method, l, m);
	method[m] = 0;
	size_t o = 0;
	for (size_t i = ps; i < pe && o + 1 < HTTP_TRACK_PATH_LEN; i++) {
		if (l[i] == '?' || l[i] == '#' || l[i] <= 0x20 || l[i] >= 0x7f)
			break;
		path[o++] = l[i];
	}
	path[o] = 0;
	return true;
}

/* "HTTP/1.x NNN[ reason]": the status, or -1. */
static int status_line(const char *l, size_t n)
{
	if (n < 12 || memcmp(l, "HTTP/1.", 7) || (l[7] != '0' && l[7] != '1') || l[8] != ' ' ||
	    (n > 12 && l[12] != ' '))
		return -1;
	int64_t code = http_dec(l + 9, 3);
	return code >= 100 && code <= 599 ? (int)code : -1;
}

/* The request line: a new exchange at the end of the queue. */
static bool start_request(struct http_track *t, struct dir *d, uint64_t ts)
{
	char method[HTTP_TRACK_METHOD_LEN], path[HTTP_TRACK_PATH_LEN];
	if (!request_line(d, method, path))
		return false;
	if (t->queued >= HTTP_TRACK_MAX_QUEUE) {
		give_up(t, ts);
		return true;
	}
	struct http_xnode *n = http_xnode_new(t->cfg.digest_key, d->msg_ts, method, path);
	if (!n) {
		STAT(t, no_memory, 1);
		return true;
	}
	if (t->tail)
		t->tail->next = n;
	else
		t->head = n;
	t->tail = n;
	t->queued++;
	d->x = n;
	return true;
}

/* The status line: a final response goes to the oldest exchange, unless a
 * response is still owed to one handed over, or none waits (an orphan). */
static bool start_response(struct http_track *t, struct dir *d)
{
	int status = status_line(d->line, d->line_len);
	if (status < 0)
		return false;
	struct http_xnode *n = t->owed ? NULL : t->head;
	d->h.status = status;
	if (n && d->msg_ts < n->x.t_arrive) {  /* begun before its request, in feed order */
		STAT(t, clamped, 1);
		d->msg_ts = n->x.t_arrive;
	}
	if (status < 200 && status != 101) {
		if (n && !n->x.t_continue)
			n->x.t_continue = d->msg_ts;
		return true;
	}
	if (!n) {
		t->owed -= t->owed > 0;
		STAT(t, orphan_responses, 1);
		return true;
	}
	d->x = n;
	n->x.status = status;
	n->x.t_resp_start = d->msg_ts;
	return true;
}

static void header_line(struct http_track *t, struct dir *d)
{
	const char *l = d->line, *colon = memchr(l, ':', d->line_len);
	if (!colon || l[0] == ' ' || l[0] == '\t')
		return;
	size_t nn = (size_t)(colon - l), vn = d->line_len - nn - 1;
	const char *v = colon + 1;
	while (vn && (*v == ' ' || *v == '\t'))
		v++, vn--;
	while (vn && (v[vn - 1] == ' ' || v[vn - 1] == '\t'))
		vn--;
#define IS(name) (nn == sizeof(name) - 1 && !strncasecmp(l, name, nn))
	if (IS("content-length"))
		d->h.content_length = http_dec(v, vn);
	else if (IS("transfer-encoding"))
		d->h.chunked = http_has_ci(v, vn, "chunked");
	else if (IS("content-type"))
		d->h.sse = vn >= 17 && !strncasecmp(v, "text/event-stream", 17);
	else if (IS("connection"))
		d->h.close = http_has_ci(v, vn, "close");
	else if (IS("expect"))
		d->h.expect = http_has_ci(v, vn, "100-continue");
	else if (d->x)
		http_xnode_header(d->x, d == &t->in, l, nn, v, vn);
#undef IS
}

/* ---- framing ------------------------------------------------------------------ */

static void body_data(struct http_track *t, struct dir *d, const uint8_t *p, size_t n,
		      uint64_t ts)
{
	if (!d->x)
		return;
	if (d == &t->in) {
		http_xnode_req_body(d->x, &d->carry, p, n);
	} else if (d->h.sse)
		http_sse_feed(&t->ev, (const char *)p, n, sse_event, &(struct sse_ctx){ t, d->x, ts });
	else
		http_json_scan_body(&d->carry, (const char *)p, n, HTTP_USAGE_KEYS, http_xnode_usage_key, &d->x->x);
}

static void body_gap(struct http_track *t, struct dir *d)
{
	http_json_carry_clear(&d->carry);
	if (!d->x)
		return;
	d->x->x.flags |= HTTP_X_BODY_GAP;
	if (d == &t->in)
		http_digest_gap(&d->x->digest);
	if (d == &t->out && d->h.sse)
		http_sse_cut(&t->ev);
}

/* The message ended by its framing at ts. */
static void msg_done(struct http_track *t, struct dir *d, uint64_t ts)
{
	struct http_xnode *n = d->x;
	dir_reset(d, D_START);
	if (d == &t->out)
		http_sse_reset(&t->ev); /* an event without its blank line is no event */
	if (!n)
		return;
	if (d == &t->in)
		n->x.t_req_read = ts;
	else
		deliver(t, HTTP_END_COMPLETE, ts);
}

/* The blank line after the headers: decide the body's framing. */
static void head_end(struct http_track *t, struct dir *d, uint64_t ts)
{
	const struct head *h = &d->h;
	struct http_xnode *n = d->x;
	bool in = d == &t->in;
	if (!in && h->status < 200 && h->status != 101) {
		dir_reset(d, D_START);          /* interim: the final response follows */
		return;
	}
	if (in && n && t->cfg.on_request) {
		http_xnode_pick_id(n);
		n->x.tag = t->cfg.on_request(t->cfg.ctx, &n->x);
	}
	if (n)
		n->x.flags |= (h->close ? HTTP_X_CLOSE : 0) | (in && h->expect ? HTTP_X_CONTINUE : 0) |
			      (!in && h->sse ? HTTP_X_SSE : 0) | (!in && h->chunked ? HTTP_X_CHUNKED : 0);
	if (!in && (h->status == 101 || (n && h->status < 300 && !strcmp(n->x.method, "CONNECT")))) {
		if (n)
			deliver(t, HTTP_END_COMPLETE, ts);
		dir_reset(&t->in, D_DEAD);      /* another protocol from here on */
		dir_reset(&t->out, D_DEAD);
		return;
	}
	bool none = !in && (h->status == 204 || h->status == 304 ||
			    (n && !strcmp(n->x.method, "HEAD")));
	line_clear(d);
	if (!in)
		http_sse_reset(&t->ev);
	if (none || (!h->chunked && h->content_length == 0) ||
	    (in && !h->chunked && h->content_length < 0)) {
		msg_done(t, d, ts);
	} else if (h->chunked) {
		d->state = D_CHUNKED;
		http_chunked_start(&d->ch);
	} else {
		d->state = D_BODY;
		d->left = h->content_length > 0 ? (uint64_t)h->content_length : 0;
		d->close_delim = h->content_length < 0;
	}
}

static size_t st_start(struct http_track *t, struct dir *d, const uint8_t *p, uint64_t ts)
{
	if (p[0] == '\r' || p[0] == '\n')
		return 1;
	if (d == &t->in ? p[0] < 'A' || p[0] > 'Z' : p[0] != 'H') {
		dir_unsync(t, d, ts, true);
		return 0;
	}
	memset(&d->h, 0, sizeof(d->h));
	d->h.content_length = -1;
	d->msg_ts = ts;
	d->state = D_HEAD;
	return 0;
}

static size_t st_head(struct http_track *t, struct dir *d, const uint8_t *p, size_t n,
		      uint64_t ts)
{
	bool done;
	size_t used = line_take(d, p, n, &done);
	if (!done)
		return used;
	if (!d->h.first) {
		d->h.first = true;
		if (!(d == &t->in ? start_request(t, d, ts) : start_response(t, d))) {
			dir_unsync(t, d, ts, true);
			return used;
		}
		if (d->state != D_HEAD)         /* gave up */
			return used;
	} else if (d->line_len == 0) {
		head_end(t, d, ts);
		return used;
	} else {
		header_line(t, d);
	}
	line_clear(d);
	return used;
}

/* A chunked body: its data to the body's scan, its end, or bad framing. */
static size_t st_chunked(struct http_track *t, struct dir *d, const uint8_t *p, size_t n,
			 uint64_t ts)
{
	enum http_chunked_step step;
	size_t used = http_chunked_feed(&d->ch, p, n, &step);
	if (step == HTTP_CHUNKED_DATA)
		body_data(t, d, p, used, ts);
	else if (step == HTTP_CHUNKED_END)
		msg_done(t, d, ts);
	else if (step == HTTP_CHUNKED_BAD)
		dir_unsync(t, d, ts, true);
	return used;
}

static size_t st_body(struct http_track *t, struct dir *d, const uint8_t *p, size_t n,
		      uint64_t ts)
{
	size_t c = d->close_delim || d->left > n ? n : (size_t)d->left;
	body_data(t, d, p, c, ts);
	if (d->close_delim)
		return c;
	d->left -= c;
	if (!d->left)
		msg_done(t, d, ts);
	return c;
}

/* A plausible message start: a request line on the way in; on the way out a
 * status line, only while a response is due. */
static bool msg_start(const struct http_track *t, const struct dir *d, const uint8_t *p,
		      size_t n)
{
	static const char *const methods[] = { "GET ", "POST ", "PUT ", "DELETE ", "HEAD ",
					       "OPTIONS ", "PATCH " };
	if (d == &t->out)
		return (t->head || t->owed) && n >= 9 && !memcmp(p, "HTTP/1.", 7) &&
		       (p[7] == '0' || p[7] == '1') && p[8] == ' ';
	for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
		size_t k = strlen(methods[i]);
		if (n > k && !memcmp(p, methods[i], k) && p[k] == '/')
			return true;
	}
	return false;
}

/* Unsynced: resume at a message start at the beginning of a piece (a read or
 * write usually begins one) or right after a LF. */
static size_t st_seek(struct http_track *t, struct dir *d, const uint8_t *p, size_t n,
		      bool piece_start)
{
	size_t i = 0;
	if (!piece_start || !msg_start(t, d, p, n)) {
		for (;;) {
			const uint8_t *lf = memchr(p + i, '\n', n - i);
			if (!lf)
				return n;
			i = (size_t)(lf - p) + 1;
			if (i < n && msg_start(t, d, p + i, n - i))
				break;
		}
	}
	STAT(t, resynced, 1);
	d->state = D_START;
	return i;
}

static void dir_bytes(struct http_track *t, struct dir *d, const uint8_t *p, size_t n,
		      uint64_t ts)
{
	size_t off = 0;
	while (off < n) {
		const uint8_t *q = p + off;
		size_t left = n - off;
		switch (d->state) {
		case D_START:      off += st_start(t, d, q, ts); break;
		case D_HEAD:       off += st_head(t, d, q, left, ts); break;
		case D_BODY:       off += st_body(t, d, q, left, ts); break;
		case D_CHUNKED:    off += st_chunked(t, d, q, left, ts); break;
		case D_UNSYNCED:   off += st_seek(t, d, q, left, off == 0); break;
		default:           off = n; break;
		}
	}
}

/* ---- gaps and lost framing ------------------------------------------------------ */

/* The framing is lost. A response in progress is handed over as unsynced;
 * so is the oldest waiting exchange when its response's head was lost. A
 * request keeps its exchange (its response will come), marked cut. */
static void dir_unsync(struct http_track *t, struct dir *d, uint64_t ts, bool malformed)
{
	struct http_xnode *n = d->x;
	bool between = d->state == D_START || (d->state == D_HEAD && !d->h.first);
	STAT(t, unsynced, 1);
	if (malformed)
		STAT(t, malformed, 1);
	dir_reset(d, D_UNSYNCED);
	if (d == &t->in) {
		if (n)
			n->x.flags |= HTTP_X_REQ_CUT;
		return;
	}
	http_sse_reset(&t->ev);
	if (!n && between) {
		if (t->owed) {
			t->owed--;
			return;
		}
		n = t->head;
	}
	if (n)
		deliver(t, HTTP_END_UNSYNCED, ts);
}

static void dir_gap(struct http_track *t, struct dir *d, uint64_t n, uint64_t ts)
{
	STAT(t, gaps, 1);
	while (n) {
		uint64_t c = d->close_delim || d->left > n ? n : d->left;
		bool data = false;
		if (d->state == D_BODY) {
			body_gap(t, d);
			STAT(t, gap_bytes_skipped, c);
			n -= c;
			if (d->close_delim || (d->left -= c))
				continue;
			msg_done(t, d, ts);
		} else if (d->state == D_CHUNKED && (c = http_chunked_gap(&d->ch, n, &data))) {
			if (data)
				body_gap(t, d);
			STAT(t, gap_bytes_skipped, c);
			n -= c;
			if (http_chunked_done(&d->ch))
				msg_done(t, d, ts);
		} else {
			if (d->state != D_UNSYNCED && d->state != D_DEAD)
				dir_unsync(t, d, ts, false);
			if (d->state != D_DEAD)
				STAT(t, gap_bytes_lost, n);
			n = 0;
		}
	}
}

/* ---- public ------------------------------------------------------------------------ */

static uint64_t tick(struct http_track *t, uint64_t ts)
{
	if (ts < t->last_ts) {
		STAT(t, clamped, 1);
		ts = t->last_ts;
	}
	if (!ts)
		ts = 1;
	return t->last_ts = ts;
}

struct http_track *http_track_new(const struct http_track_cfg *cfg)
{
	struct http_track *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->cfg = *cfg;
	t->in.state = t->out.state = cfg->midstream ? D_UNSYNCED : D_START;
	return t;
}

void http_track_feed(struct http_track *t, enum http_dir dir, const uint8_t *data,
		     size_t captured, size_t moved, uint64_t ts)
{
	if (!t || !moved || (dir != HTTP_IN && dir != HTTP_OUT))
		return;
	struct dir *d = dir == HTTP_IN ? &t->in : &t->out;
	captured = http_feed_captured(data, captured, moved);
	ts = tick(t, ts);
	if (captured)
		dir_bytes(t, d, data, captured, ts);
	if (moved > captured)
		dir_gap(t, d, moved - captured, ts);
}

void http_track_close(struct http_track *t, uint64_t ts, enum http_closer who)
{
	if (!t)
		return;
	ts = tick(t, ts);
	struct dir *o = &t->out;
	if (o->x && o->state == D_BODY && o->close_delim && who != HTTP_BY_CLIENT)
		msg_done(t, o, ts);
	while (t->head)
		deliver(t, who == HTTP_BY_SERVER ? HTTP_END_SERVER_CLOSED : HTTP_END_CLIENT_CLOSED, ts);
	dir_reset(&t->in, D_START);
	dir_reset(&t->out, D_START);
	http_sse_reset(&t->ev);
	t->owed = 0;
}

void http_track_shut(struct http_track *t, uint64_t ts)
{
	if (!t)
		return;
	ts = tick(t, ts);
	struct dir *o = &t->out;
	if (o->x && o->state == D_BODY && o->close_delim)
		msg_done(t, o, ts);
}

void http_track_expire(struct http_track *t, uint64_t now)
{
	if (!t)
		return;
	now = tick(t, now);
	while (t->head) {
		if (t->head != t->out.x)
			t->owed++;
		deliver(t, HTTP_END_TIMEOUT, now);
	}
}

const char *http_proto_name(enum http_proto p)
{
	static const char *const names[] = { "http/1.1", "h2", "grpc" };
	return (unsigned)p < sizeof(names) / sizeof(names[0]) ? names[p] : "unknown";
}

uint64_t http_track_last_ts(const struct http_track *t) { return t->last_ts; }
unsigned http_track_in_flight(const struct http_track *t) { return t->queued; }
const struct http_track_stats *http_track_stats(const struct http_track *t) { return &t->st; }

bool http_track_synced(const struct http_track *t)
{
	return t->in.state < D_UNSYNCED && t->out.state < D_UNSYNCED;
}

void http_track_free(struct http_track *t)
{
	if (!t)
		return;
	while (t->head) {
		struct http_xnode *n = t->head;
		t->head = n->next;
		http_xnode_free(n);
	}
	explicit_bzero(t, sizeof(*t));
	free(t);
}

const char *http_end_name(enum http_end e)
{
	static const char *const names[] = { "complete", "client_closed", "server_closed",
					     "unsynced", "timeout" };
	return (unsigned)e < sizeof(names) / sizeof(names[0]) ? names[e] : "unknown";
}
