/* http2_track.c - HTTP/2 framing behind http2_track.h: frames per direction
 * (split anywhere across reads and writes), streams by id, header blocks
 * through libnghttp2's HPACK inflater, DATA as SSE events or gRPC messages.
 * The exchange each stream builds is http_xnode.h's, as HTTP/1.1's is. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <nghttp2/nghttp2.h>
#include "http2_track.h"
#include "http_text.h"
#include "http_xnode.h"

/* ---- the protocol (RFC 9113) --------------------------------------------- */

enum { F_DATA, F_HEADERS, F_PRIORITY, F_RST_STREAM, F_SETTINGS, F_PUSH_PROMISE, F_PING,
       F_GOAWAY, F_WINDOW_UPDATE, F_CONTINUATION };
#define FL_END_STREAM  0x01
#define FL_END_HEADERS 0x04
#define FL_PADDED      0x08
#define FL_PRIORITY    0x20
#define SET_HEADER_TABLE_SIZE 0x1
#define FRAME_MAX      0xffffff
#define SNIFF_FRAME_MAX 16384   /* the default SETTINGS_MAX_FRAME_SIZE: a frame header
				 * found where no boundary was known claims no more */
#define GRPC_PREFIX    5        /* compressed flag, 4-byte big-endian length */

/* ---- state ----------------------------------------------------------------- */

enum dstate {
	D_PREFACE,      /* the client preface (HTTP_IN only) */
	D_HEAD,         /* a frame header */
	D_PAYLOAD,      /* a frame's payload */
	D_SEEK,         /* framing lost (or begun before us): a piece that starts a frame chain */
};

/* Where a frame's payload is: the pad-length byte, the fixed part before a
 * header block (priority, promised stream), the content, the padding. */
enum part { P_PADLEN, P_FIXED, P_BODY, P_PAD };

struct stream {
	struct stream *next;
	uint32_t id;
	struct http_xnode *n;
	bool resp_head;                 /* the response's head came: a later HEADERS is its trailers */
	bool req_done;
	bool sniffed;                   /* a response whose head was unknown: its body's kind told */
	bool sse, grpc;
	bool grpc_lost;                 /* a lying length prefix: its messages are unknown */
	uint8_t gpre[GRPC_PREFIX], gpre_len;
	uint32_t gleft;                 /* bytes of the gRPC message in progress */
	struct http_json_carry carry;   /* the request's or the response's key scan */
	struct http_sse ev;
};

/* The header block in progress on a direction. */
struct block {
	bool open;                      /* HEADERS or PUSH_PROMISE without END_HEADERS: CONTINUATION next */
	bool decoding;                  /* fed to the inflater */
	bool end_stream;                /* the HEADERS carried END_STREAM */
	bool ignore;                    /* decoded for the table only (a push, a stream not followed) */
	uint32_t sid;
	uint32_t bytes;                 /* compressed bytes of the block so far */
	uint32_t out;                   /* decoded bytes so far */
	uint64_t ts;                    /* the HEADERS frame's first byte */
	int status;
	bool sse, grpc;
	bool mid_read;                  /* another stream's frame came before it in its read */
	int grpc_status;
	char method[HTTP_TRACK_METHOD_LEN], path[HTTP_TRACK_PATH_LEN];
	struct http_xnode ids;          /* the ids the head names, until its stream has them */
};

struct dir {
	uint8_t state;
	uint8_t hdr[9], hdr_len;
	uint8_t type, flags, part, pad;
	uint32_t sid, left;             /* the frame's stream; payload bytes left */
	uint32_t fixed_left, body_left;
	uint8_t set[6], set_len;        /* a SETTINGS entry across pieces */
	uint8_t preface_got;
	bool piece_streams;             /* a stream's frame began earlier in this read or write */
	uint64_t frame_ts;
	nghttp2_hd_inflater *hd;        /* decodes this direction's header blocks */
	bool table_lost;                /* from here on its blocks are not decodable */
	uint32_t table_max;             /* what the peer's SETTINGS allowed */
	struct block blk;
};

struct http2_track {
	struct http_track_cfg cfg;
	struct http2_track_stats st, *totals;
	struct http_track_stats hst;    /* the exchange counts HTTP/1.1 keeps too */
	uint64_t last_ts;
	uint32_t last_sid;              /* the highest stream the client opened */
	struct stream *streams;
	unsigned n_streams;
	struct dir in, out;
};

#define STAT(t, f, n) do { (t)->st.f += (n); if ((t)->totals) (t)->totals->f += (n); } while (0)
#define HSTAT(t, f, n) do { (t)->hst.f += (n); \
	if ((t)->cfg.totals) (t)->cfg.totals->f += (n); } while (0)

/* ---- streams ------------------------------------------------------------------ */

static struct stream *stream_find(struct http2_track *t, uint32_t id)
{
	for (struct stream *s = t->streams; s; s = s->next)
		if (s->id == id)
			return s;
	return NULL;
}

static void stream_unlink(struct http2_track *t, struct stream *s)
{
	for (struct stream **p = &t->streams; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			t->n_streams--;
			return;
		}
}

/* Frames out of the protocol's order (a response's header block begun
 * before its request's, DATA before HEADERS: a broken peer's, a fuzzer's)
 * would give marks out of order: each is kept no earlier than the one
 * before it, and counted as a clamp. */
static void marks_in_order(struct http2_track *t, struct http_exchange *x)
{
	uint64_t *m[] = { &x->t_arrive, &x->t_resp_start, &x->t_first_content, &x->t_last_content,
			  &x->t_done };
	uint64_t prev = 0;

	for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
		if (!*m[i])
			continue;
		if (*m[i] < prev) {
			HSTAT(t, clamped, 1);
			*m[i] = prev;
		}
		prev = *m[i];
	}
}

/* Hands the stream's exchange over with end at ts and forgets it. */
static void stream_end(struct http2_track *t, struct stream *s, enum http_end end, uint64_t ts)
{
	struct http_xnode *n = s->n;
	stream_unlink(t, s);
	if (s->grpc && !s->grpc_lost && (s->gpre_len || s->gleft) && end == HTTP_END_COMPLETE) {
		STAT(t, grpc_bad_prefix, 1);   /* a message its prefix promised never came */
		n->x.flags |= HTTP_X_BODY_GAP;
	}
	http_xnode_end(n, end, ts);
	marks_in_order(t, &n->x);
	STAT(t, streams, 1);
	HSTAT(t, exchanges, 1);
	if (t->cfg.on_exchange)
		t->cfg.on_exchange(t->cfg.ctx, &n->x);
	http_xnode_free(n);
	http_sse_reset(&s->ev);
	http_json_carry_clear(&s->carry);
	free(s);
}

/* The request's head (decoded or not) opens stream sid. */
static struct stream *stream_open(struct http2_track *t, const struct block *b, bool known)
{
	if (t->n_streams >= HTTP2_MAX_STREAMS) {
		STAT(t, streams_dropped, 1);
		return NULL;
	}
	struct stream *s = calloc(1, sizeof(*s));
	struct http_xnode *n = s ? http_xnode_new(t->cfg.digest_key, b->ts, known ? b->method : "",
						  known ? b->path : "") : NULL;
	if (!n) {
		free(s);
		HSTAT(t, no_memory, 1);
		return NULL;
	}
	s->id = b->sid;
	s->n = n;
	n->x.stream_id = b->sid;
	n->x.protocol = known && b->grpc ? HTTP_PROTO_GRPC : HTTP_PROTO_2;
	s->grpc = known && b->grpc;
	if (!known)
		n->x.flags |= HTTP_X_HEADERS_UNKNOWN;
	if (b->mid_read)
		n->x.flags |= HTTP_X_MID_READ;
	s->next = t->streams;
	t->streams = s;
	t->n_streams++;
	return s;
}

/* ---- header blocks ------------------------------------------------------------ */

/* One decoded header of the block in progress. */
static void block_header(struct dir *d, const nghttp2_nv *nv)
{
	struct block *b = &d->blk;
	const char *name = (const char *)nv->name, *v = (const char *)nv->value;
	size_t nn = nv->namelen, vn = nv->valuelen;
#define IS(s) (nn == sizeof(s) - 1 && !memcmp(name, s, nn))
	if (IS(":method"))
		http_copy_clean(b->method, sizeof(b->method), v, vn < sizeof(b->method) ? vn : 0, false);
	else if (IS(":path")) {
		size_t o = 0;
		for (size_t i = 0; i < vn && o + 1 < sizeof(b->path); i++) {
			if (v[i] == '?' || v[i] == '#' || v[i] <= 0x20 || v[i] >= 0x7f)
				break;
			b->path[o++] = v[i];
		}
		b->path[o] = 0;
	} else if (IS(":status"))
		b->status = vn == 3 ? (int)http_dec(v, 3) : -1;
	else if (IS("content-type")) {
		b->sse = vn >= 17 && !strncasecmp(v, "text/event-stream", 17);
		b->grpc = vn >= 16 && !strncasecmp(v, "application/grpc", 16);
	} else if (IS("grpc-status"))
		b->grpc_status = (int)http_dec(v, vn < 4 ? vn : 0);
#undef IS
}

static void table_lost(struct http2_track *t, struct dir *d)
{
	if (!d->table_lost)
		STAT(t, tables_lost, 1);
	d->table_lost = true;
	d->blk.decoding = false;
}

/* Feeds fragment bytes of the block to the inflater; final: the block's last. */
static void block_feed(struct http2_track *t, struct dir *d, const uint8_t *p, size_t n, bool final)
{
	struct block *b = &d->blk;
	if (!b->decoding)
		return;
	b->bytes += (uint32_t)n;
	if (b->bytes > HTTP2_BLOCK_MAX) {
		table_lost(t, d);
		return;
	}
	for (;;) {
		nghttp2_nv nv;
		int flags = 0;
		ssize_t rv = nghttp2_hd_inflate_hd2(d->hd, &nv, &flags, p, n, final);
		if (rv < 0) {
			table_lost(t, d);
			return;
		}
		p += rv;
		n -= (size_t)rv;
		if (flags & NGHTTP2_HD_INFLATE_EMIT) {
			bool bomb = b->out > HTTP2_HEADERS_MAX;
			b->out += (uint32_t)(nv.namelen + nv.valuelen + 32);
			if (!bomb && b->out > HTTP2_HEADERS_MAX)
				STAT(t, bombs, 1);
			if (!bomb && b->out <= HTTP2_HEADERS_MAX) {
				block_header(d, &nv);
				http_xnode_header(&b->ids, d == &t->in, (const char *)nv.name, nv.namelen,
						  (const char *)nv.value, nv.valuelen);
			}
		}
		if (flags & NGHTTP2_HD_INFLATE_FINAL) {
			nghttp2_hd_inflate_end_headers(d->hd);
			return;
		}
		if (!(flags & NGHTTP2_HD_INFLATE_EMIT) && !n)
			return;
	}
}

/* ---- what a stream's DATA carries ----------------------------------------------- */

struct sse_ctx {
	struct http2_track *t;
	struct stream *s;
	uint64_t ts;
};

static void sse_event(void *ctx, const struct http_sse *e)
{
	struct sse_ctx *c = ctx;
	enum http_ev_kind k = http_xnode_event(c->s->n, e, c->ts);
	if ((k == HTTP_EV_CONTENT || k == HTTP_EV_EMPTY) && c->t->cfg.on_token)
		c->t->cfg.on_token(c->t->cfg.ctx, &c->s->n->x, c->ts);
	if (k == HTTP_EV_UNKNOWN)
		HSTAT(c->t, unknown_events, 1);
}

/* A response whose head was not decoded tells its body's kind by its first
 * bytes: a gRPC message starts with a 0 or 1 flag byte (text never does),
 * an event stream with a field name. */
static void sniff(struct stream *s, const uint8_t *p, size_t n)
{
	static const char *const fields[] = { "data:", "event:", "id:", "retry:", ":" };
	s->sniffed = true;
	if (!n)
		return;
	if (p[0] <= 1) {
		s->grpc = true;
		s->n->x.protocol = HTTP_PROTO_GRPC;
		return;
	}
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		size_t k = strlen(fields[i]);
		if (!memcmp(p, fields[i], n < k ? n : k)) {
			s->sse = true;
			s->n->x.flags |= HTTP_X_SSE;
			return;
		}
	}
}

/* gRPC's length-prefixed messages: each one complete at ts is a content event. */
static void grpc_bytes(struct http2_track *t, struct stream *s, const uint8_t *p, size_t n, uint64_t ts)
{
	while (n && !s->grpc_lost) {
		if (s->gleft) {
			size_t c = n < s->gleft ? n : s->gleft;
			s->gleft -= (uint32_t)c;
			p += c;
			n -= c;
		} else {
			s->gpre[s->gpre_len++] = *p++;
			n--;
			if (s->gpre_len < GRPC_PREFIX)
				continue;
			s->gpre_len = 0;
			if (s->gpre[0] > 1) {
				STAT(t, grpc_bad_prefix, 1);
				s->grpc_lost = true;
				s->n->x.flags |= HTTP_X_BODY_GAP;
				return;
			}
			s->gleft = (uint32_t)s->gpre[1] << 24 | (uint32_t)s->gpre[2] << 16 |
				   (uint32_t)s->gpre[3] << 8 | s->gpre[4];
		}
		if (!s->gleft && !s->gpre_len) {
			STAT(t, grpc_messages, 1);
			http_xnode_content(s->n, ts);
			if (t->cfg.on_token)
				t->cfg.on_token(t->cfg.ctx, &s->n->x, ts);
		}
	}
}

/* DATA bytes of stream sid on d, written or read at ts. */
static void data_bytes(struct http2_track *t, struct dir *d, const uint8_t *p, size_t n, uint64_t ts)
{
	struct stream *s = stream_find(t, d->sid);
	if (!s || !n)
		return;
	if (d == &t->in) {
		if (!s->grpc)
			http_xnode_req_body(s->n, &s->carry, p, n);
		return;
	}
	if (!s->sniffed && (s->n->x.flags & HTTP_X_HEADERS_UNKNOWN))
		sniff(s, p, n);
	s->sniffed = true;
	if (s->grpc)
		grpc_bytes(t, s, p, n, ts);
	else if (s->sse)
		http_sse_feed(&s->ev, (const char *)p, n, sse_event, &(struct sse_ctx){ t, s, ts });
	else
		http_json_scan_body(&s->carry, (const char *)p, n, HTTP_USAGE_KEYS, http_xnode_usage_key,
				    &s->n->x);
}

static void data_gap(struct http2_track *t, struct dir *d)
{
	struct stream *s = stream_find(t, d->sid);
	if (!s)
		return;
	s->n->x.flags |= HTTP_X_BODY_GAP;
	http_json_carry_clear(&s->carry);
	if (d == &t->out && s->sse)
		http_sse_cut(&s->ev);
	if (d == &t->out && s->grpc)
		s->grpc_lost = true;    /* where the next prefix lies is unknown */
	if (d == &t->in)
		http_digest_gap(&s->n->digest);
}

/* END_STREAM on d for sid at ts: a request read whole, or a response's end. */
static void end_stream(struct http2_track *t, struct dir *d, uint32_t sid, uint64_t ts)
{
	struct stream *s = stream_find(t, sid);
	if (!s)
		return;
	if (d == &t->in) {
		s->req_done = true;
		s->n->x.t_req_read = ts;
		return;
	}
	stream_end(t, s, HTTP_END_COMPLETE, ts);
}

/* ---- frames ---------------------------------------------------------------------- */

/* A header block began (HEADERS, PUSH_PROMISE) on d. */
static void block_begin(struct http2_track *t, struct dir *d, bool push)
{
	struct block *b = &d->blk;
	memset(b, 0, sizeof(*b));
	b->open = true;
	b->sid = d->sid;
	b->ts = d->frame_ts;
	b->grpc_status = -1;
	b->end_stream = !push && (d->flags & FL_END_STREAM);
	b->ignore = push;
	b->decoding = !d->table_lost;
	b->mid_read = d->piece_streams;
}

/* The block ended (END_HEADERS): a request opens its stream, a response
 * head or trailers go to theirs. */
static void block_end(struct http2_track *t, struct dir *d, uint64_t ts)
{
	struct block *b = &d->blk;
	bool known = b->decoding;
	b->open = false;
	if (!known)
		STAT(t, headers_undecodable, 1);
	if (b->ignore)
		return;
	struct stream *s = stream_find(t, b->sid);
	if (d == &t->in) {
		if (s) {                                /* the request's trailers */
			if (b->end_stream)
				end_stream(t, d, b->sid, ts);
			return;
		}
		if (b->sid <= t->last_sid || !(b->sid & 1))
			return;                         /* a stream that ended or was not followed */
		t->last_sid = b->sid;
		if (!(s = stream_open(t, b, known)))
			return;
		memcpy(s->n->req_id, b->ids.req_id, sizeof(s->n->req_id));
		memcpy(s->n->trace_id, b->ids.trace_id, sizeof(s->n->trace_id));
		memcpy(s->n->x.conversation_id, b->ids.x.conversation_id, sizeof(s->n->x.conversation_id));
		if (t->cfg.on_request) {
			http_xnode_pick_id(s->n);
			s->n->x.tag = t->cfg.on_request(t->cfg.ctx, &s->n->x);
		}
		if (b->end_stream)
			end_stream(t, d, b->sid, ts);
		return;
	}
	if (!s)
		return;
	struct http_exchange *x = &s->n->x;
	if (!known)
		x->flags |= HTTP_X_HEADERS_UNKNOWN;
	if (!s->resp_head && (!known || b->status >= 200 || b->status < 100)) {
		s->resp_head = true;
		x->t_resp_start = b->ts;
		if (known) {
			x->status = b->status > 0 ? b->status : 0;
			s->sse = b->sse;
			s->grpc |= b->grpc;
			s->sniffed = true;
			if (b->sse)
				x->flags |= HTTP_X_SSE;
			if (b->grpc)
				x->protocol = HTTP_PROTO_GRPC;
			memcpy(s->n->resp_id, b->ids.resp_id, sizeof(s->n->resp_id));
		}
	} else if (known && b->status >= 100 && b->status < 200 && !x->t_continue) {
		x->t_continue = b->ts;
	}
	if (known && b->grpc_status >= 0)
		x->grpc_status = b->grpc_status;        /* trailers, or a trailers-only response */
	if (b->end_stream)
		end_stream(t, d, b->sid, ts);
}

/* Payload bytes of the current frame on d (n > 0), at ts. */
static void payload(struct http2_track *t, struct dir *d, const uint8_t *p, size_t n, uint64_t ts)
{
	bool block = d->type == F_HEADERS || d->type == F_PUSH_PROMISE || d->type == F_CONTINUATION;
	if (d->type == F_DATA || block) {
		while (n) {
			size_t c;
			switch (d->part) {
			case P_PADLEN:
				d->pad = *p;
				c = 1;
				/* what is left must hold the fixed part and the padding */
				if ((uint32_t)d->pad + d->fixed_left > d->left - 1) {
					STAT(t, bad_frames, 1);
					d->state = D_SEEK;
					return;
				}
				d->body_left = d->left - 1 - d->fixed_left - d->pad;
				d->part = d->fixed_left ? P_FIXED : P_BODY;
				break;
			case P_FIXED:
				c = n < d->fixed_left ? n : d->fixed_left;
				if (!(d->fixed_left -= (uint32_t)c))
					d->part = P_BODY;
				break;
			case P_BODY:
				c = n < d->body_left ? n : d->body_left;
				d->body_left -= (uint32_t)c;
				if (d->type == F_DATA)
					data_bytes(t, d, p, c, ts);
				else
					block_feed(t, d, p, c, !d->body_left && (d->flags & FL_END_HEADERS));
				if (!d->body_left)
					d->part = P_PAD;
				break;
			default:
				c = n;
				break;
			}
			p += c;
			n -= c;
			d->left -= (uint32_t)c;
		}
		/* a padded block fragment that is empty ends with its pad length */
		if (block && d->part == P_BODY && !d->body_left) {
			block_feed(t, d, (const uint8_t *)"", 0, d->flags & FL_END_HEADERS);
			d->part = P_PAD;
		}
		return;
	}
	if (d->type == F_SETTINGS && !(d->flags & 1)) {
		for (; n; p++, n--, d->left--) {
			d->set[d->set_len++] = *p;
			if (d->set_len < 6)
				continue;
			d->set_len = 0;
			uint16_t id = (uint16_t)(d->set[0] << 8 | d->set[1]);
			uint32_t v = (uint32_t)d->set[2] << 24 | (uint32_t)d->set[3] << 16 |
				     (uint32_t)d->set[4] << 8 | d->set[5];
			if (id != SET_HEADER_TABLE_SIZE)
				continue;
			/* the table the other direction's encoder may use */
			struct dir *o = d == &t->in ? &t->out : &t->in;
			o->table_max = v < HTTP2_TABLE_MAX ? v : HTTP2_TABLE_MAX;
			if (nghttp2_hd_inflate_change_table_size(o->hd, o->table_max))
				table_lost(t, o);
		}
		return;
	}
	d->left -= (uint32_t)n;         /* the rest is read from the header alone */
}

/* Whether a frame header is one a peer may send: a known type's length and
 * stream rules (an unknown type is skipped, as RFC 9113 says). */
static bool header_ok(uint32_t len, uint8_t type, uint32_t sid, size_t max)
{
	if (len > max)
		return false;
	switch (type) {
	case F_DATA: case F_HEADERS: case F_CONTINUATION: return sid != 0;
	case F_PRIORITY: return sid != 0 && len == 5;
	case F_RST_STREAM: return sid != 0 && len == 4;
	case F_SETTINGS: return sid == 0 && len % 6 == 0;
	case F_PUSH_PROMISE: return sid != 0 && len >= 4;
	case F_PING: return sid == 0 && len == 8;
	case F_GOAWAY: return sid == 0 && len >= 8;
	case F_WINDOW_UPDATE: return len == 4;
	default: return true;
	}
}

static void frame_fields(const uint8_t *h, uint32_t *len, uint8_t *type, uint8_t *flags, uint32_t *sid)
{
	*len = (uint32_t)h[0] << 16 | (uint32_t)h[1] << 8 | h[2];
	*type = h[3];
	*flags = h[4];
	*sid = ((uint32_t)h[5] << 24 | (uint32_t)h[6] << 16 | (uint32_t)h[7] << 8 | h[8]) & 0x7fffffffu;
}

static void block_maybe_end(struct http2_track *t, struct dir *d, uint64_t ts);

/* The frame is over: what its header alone said takes effect. */
static void frame_done(struct http2_track *t, struct dir *d, uint64_t ts)
{
	if (d->type == F_DATA && (d->flags & FL_END_STREAM))
		end_stream(t, d, d->sid, ts);
	d->state = D_HEAD;
	d->hdr_len = 0;
}

/* A frame header complete on d at ts. */
static void frame_begin(struct http2_track *t, struct dir *d, uint64_t ts)
{
	uint32_t len;
	frame_fields(d->hdr, &len, &d->type, &d->flags, &d->sid);
	STAT(t, frames, 1);
	bool cont = d->type == F_CONTINUATION;
	/* a header block's CONTINUATIONs follow it on its stream, nothing between */
	if (!header_ok(len, d->type, d->sid, FRAME_MAX) || d->blk.open != cont ||
	    (cont && d->sid != d->blk.sid)) {
		STAT(t, bad_frames, 1);
		if (d->blk.open)
			table_lost(t, d);
		d->blk.open = false;
		d->state = D_SEEK;
		return;
	}
	d->left = len;
	d->state = D_PAYLOAD;
	bool padded = (d->type == F_DATA || d->type == F_HEADERS || d->type == F_PUSH_PROMISE) &&
		      (d->flags & FL_PADDED);
	d->fixed_left = d->type == F_HEADERS && (d->flags & FL_PRIORITY) ? 5 :
			d->type == F_PUSH_PROMISE ? 4 : 0;
	d->part = padded ? P_PADLEN : d->fixed_left ? P_FIXED : P_BODY;
	d->pad = 0;
	if (!padded) {
		if (d->fixed_left > len) {
			STAT(t, bad_frames, 1);
			d->state = D_SEEK;
			return;
		}
		d->body_left = len - d->fixed_left;
	} else if (!len) {
		STAT(t, bad_frames, 1);
		d->state = D_SEEK;
		return;
	}
	d->set_len = 0;
	if (d->type == F_HEADERS || d->type == F_PUSH_PROMISE)
		block_begin(t, d, d->type == F_PUSH_PROMISE);
	if (d->type == F_DATA || d->type == F_HEADERS || d->type == F_CONTINUATION)
		d->piece_streams = true;
	if (d->type == F_RST_STREAM) {
		STAT(t, resets, 1);
		struct stream *s = stream_find(t, d->sid);
		if (s)
			stream_end(t, s, d == &t->in ? HTTP_END_CLIENT_CLOSED : HTTP_END_SERVER_CLOSED, ts);
	}
	/* a block's last fragment may be empty */
	if ((d->type == F_HEADERS || d->type == F_PUSH_PROMISE || cont) && d->body_left == 0 &&
	    d->part == P_BODY && (d->flags & FL_END_HEADERS))
		block_feed(t, d, (const uint8_t *)"", 0, true);
	if (!len) {
		block_maybe_end(t, d, ts);
		frame_done(t, d, ts);
	}
}

/* After a block's last fragment went through payload(): its end. */
static void block_maybe_end(struct http2_track *t, struct dir *d, uint64_t ts)
{
	bool block = d->type == F_HEADERS || d->type == F_PUSH_PROMISE || d->type == F_CONTINUATION;
	if (block && (d->flags & FL_END_HEADERS) && d->blk.open)
		block_end(t, d, ts);
}

/* Whether p (n captured bytes) starts a chain of plausible frame headers. */
bool http2_looks_framed(const uint8_t *p, size_t n)
{
	size_t off = 0;
	unsigned frames = 0;
	while (off + 9 <= n) {
		uint32_t len, sid;
		uint8_t type, flags;
		frame_fields(p + off, &len, &type, &flags, &sid);
		if (type > F_CONTINUATION || (p[off + 5] & 0x80) ||
		    !header_ok(len, type, sid, SNIFF_FRAME_MAX))
			return false;
		frames++;
		off += 9 + len;
	}
	return frames > 0 && (off == n || off > n);
}

bool http2_is_preface(const uint8_t *d, size_t n)
{
	if (n < 3)
		return false;
	return !memcmp(d, HTTP2_PREFACE, n < HTTP2_PREFACE_LEN ? n : HTTP2_PREFACE_LEN);
}

/* The client's first bytes are no preface: the connection was open before
 * tracking began, and the blocks sent before then filled tables never seen. */
static void midstream(struct http2_track *t)
{
	STAT(t, midstream, 1);
	table_lost(t, &t->in);
	table_lost(t, &t->out);
	t->in.state = D_SEEK;
}

static void dir_bytes(struct http2_track *t, struct dir *d, const uint8_t *p, size_t n, uint64_t ts)
{
	if (d->state == D_PREFACE && !d->preface_got &&
	    memcmp(p, HTTP2_PREFACE, n < HTTP2_PREFACE_LEN ? n : HTTP2_PREFACE_LEN))
		midstream(t);
	if (d->state == D_SEEK) {
		if (!http2_looks_framed(p, n))
			return;
		STAT(t, resynced, 1);
		d->state = D_HEAD;
		d->hdr_len = 0;
	}
	while (n) {
		if (d->state == D_PREFACE) {
			size_t c = HTTP2_PREFACE_LEN - d->preface_got;
			c = n < c ? n : c;
			if (memcmp(p, &HTTP2_PREFACE[d->preface_got], c)) {
				STAT(t, bad_frames, 1);
				d->state = D_SEEK;
				return;
			}
			d->preface_got += (uint8_t)c;
			if (d->preface_got == HTTP2_PREFACE_LEN)
				d->state = D_HEAD;
			p += c;
			n -= c;
		} else if (d->state == D_HEAD) {
			if (!d->hdr_len)
				d->frame_ts = ts;
			size_t c = 9u - d->hdr_len;
			c = n < c ? n : c;
			memcpy(d->hdr + d->hdr_len, p, c);
			d->hdr_len += (uint8_t)c;
			p += c;
			n -= c;
			if (d->hdr_len == 9)
				frame_begin(t, d, ts);
		} else if (d->state == D_PAYLOAD) {
			size_t c = n < d->left ? n : d->left;
			payload(t, d, p, c, ts);
			if (d->state != D_PAYLOAD)
				return;         /* a bad pad length: unsynced */
			p += c;
			n -= c;
			if (!d->left) {
				block_maybe_end(t, d, ts);
				frame_done(t, d, ts);
			}
		} else {
			return;
		}
	}
}

/* moved - captured bytes on d went unseen. */
static void dir_gap(struct http2_track *t, struct dir *d, uint64_t n, uint64_t ts)
{
	while (n && d->state == D_PAYLOAD) {
		uint64_t c = n < d->left ? n : d->left;
		bool block = d->type == F_HEADERS || d->type == F_PUSH_PROMISE || d->type == F_CONTINUATION;
		if (d->type == F_DATA && d->part != P_PAD)
			data_gap(t, d);
		if (block && d->part != P_PAD)
			table_lost(t, d);
		if (d->part == P_PADLEN)
			break;                  /* where the content ends is unknown */
		/* the fixed part, the content and the padding, in order */
		uint64_t left = c;
		uint32_t *parts[] = { &d->fixed_left, &d->body_left };
		for (int i = d->part == P_FIXED ? 0 : 1; i < 2 && d->part != P_PAD; i++) {
			uint32_t k = left < *parts[i] ? (uint32_t)left : *parts[i];
			*parts[i] -= k;
			left -= k;
		}
		if (!d->fixed_left && d->part == P_FIXED)
			d->part = P_BODY;
		if (!d->body_left && d->part == P_BODY)
			d->part = P_PAD;
		d->left -= (uint32_t)c;
		n -= c;
		STAT(t, gap_bytes, c);
		if (!d->left) {
			block_maybe_end(t, d, ts);
			frame_done(t, d, ts);
			if (n)
				break;          /* a frame header in the gap */
		}
	}
	if (n && d->state != D_SEEK) {
		if (d->blk.open)
			table_lost(t, d);
		d->blk.open = false;
		d->state = D_SEEK;
		/* what the lost frames said is unknown to every stream of the direction */
		for (struct stream *s = t->streams; s; s = s->next) {
			s->n->x.flags |= HTTP_X_BODY_GAP;
			if (d == &t->out && s->sse)
				http_sse_cut(&s->ev);
			if (d == &t->out && s->grpc)
				s->grpc_lost = true;
		}
		table_lost(t, d);       /* a header block may have been among them */
	}
}

/* ---- public ----------------------------------------------------------------------- */

static uint64_t tick(struct http2_track *t, uint64_t ts)
{
	if (ts < t->last_ts) {
		HSTAT(t, clamped, 1);
		ts = t->last_ts;
	}
	if (!ts)
		ts = 1;
	return t->last_ts = ts;
}

struct http2_track *http2_track_new(const struct http_track_cfg *cfg, struct http2_track_stats *h2_totals)
{
	struct http2_track *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->cfg = *cfg;
	t->totals = h2_totals;
	if (nghttp2_hd_inflate_new(&t->in.hd) || nghttp2_hd_inflate_new(&t->out.hd)) {
		http2_track_free(t);
		return NULL;
	}
	t->in.table_max = t->out.table_max = 4096;
	t->in.state = D_PREFACE;
	t->out.state = D_HEAD;          /* a server may speak first: its SETTINGS */
	STAT(t, conns, 1);
	if (cfg->midstream) {
		midstream(t);
		t->out.state = D_SEEK;
	}
	return t;
}

void http2_track_feed(struct http2_track *t, enum http_dir dir, const uint8_t *data,
		      size_t captured, size_t moved, uint64_t ts)
{
	if (!t || !moved || (dir != HTTP_IN && dir != HTTP_OUT))
		return;
	struct dir *d = dir == HTTP_IN ? &t->in : &t->out;
	captured = http_feed_captured(data, captured, moved);
	ts = tick(t, ts);
	d->piece_streams = false;
	if (captured)
		dir_bytes(t, d, data, captured, ts);
	if (moved > captured)
		dir_gap(t, d, moved - captured, ts);
}

static void end_all(struct http2_track *t, enum http_end end, uint64_t ts)
{
	while (t->streams)
		stream_end(t, t->streams, end, ts);
}

void http2_track_close(struct http2_track *t, uint64_t ts, enum http_closer who)
{
	if (!t)
		return;
	ts = tick(t, ts);
	end_all(t, who == HTTP_BY_CLIENT ? HTTP_END_CLIENT_CLOSED : HTTP_END_SERVER_CLOSED, ts);
}

void http2_track_expire(struct http2_track *t, uint64_t now)
{
	if (t)
		end_all(t, HTTP_END_TIMEOUT, tick(t, now));
}

uint64_t http2_track_last_ts(const struct http2_track *t) { return t->last_ts; }
unsigned http2_track_in_flight(const struct http2_track *t) { return t->n_streams; }

void http2_track_free(struct http2_track *t)
{
	if (!t)
		return;
	while (t->streams) {
		struct stream *s = t->streams;
		t->streams = s->next;
		http_xnode_free(s->n);
		free(s);
	}
	if (t->in.hd)
		nghttp2_hd_inflate_del(t->in.hd);
	if (t->out.hd)
		nghttp2_hd_inflate_del(t->out.hd);
	explicit_bzero(t, sizeof(*t));
	free(t);
}
