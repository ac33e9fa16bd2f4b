/* fuzz_agent_http2.c - libFuzzer target for the agent's HTTP/2 and gRPC tracker
 * (agent/track/http/http2_track.c): arbitrary frames in arbitrary pieces, with
 * gaps, closes and expiries, to both directions; bad lengths, HPACK bombs,
 * CONTINUATION floods, RST storms and lying gRPC length prefixes must leave
 * every stream's record whole, the streams followed bounded and a second
 * connection fed in between exactly as it went in.
 *
 * Input: the steps of fuzz_agent_http_track.c (op byte: bit 0 direction;
 * bits 1-3: 6 = expire, 7 = close (bit 4: by client), else a feed whose ts
 * advances by those bits; bits 4-7 of a feed: what is captured (0-11 all, 12
 * half, 13 none, 14 all plus a long gap, 15 one byte); a length byte (n + 1)
 * and the bytes; one step may repeat its piece: op 0xfc, a count byte, then a
 * step, fed count * 16 times (the floods and storms a seed of bounded size can
 * carry).  A first byte 0xff: a connection open before tracking began.
 * tests/fuzz/make_seeds.py writes seeds in this form. */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "agent/track/http/http2_track.h"
#include "tests/fuzz/fuzz_piece.h"

struct seen {
	unsigned n;
	unsigned good;          /* the side connection's exchanges */
};

static bool printable(const char *s, size_t cap)
{
	size_t n = strnlen(s, cap);
	if (n == cap)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f)
			return false;
	return true;
}

static void on_exchange(void *ctx, const struct http_exchange *x)
{
	struct seen *s = ctx;
	s->n++;
	const uint64_t marks[] = { x->t_arrive, x->t_resp_start, x->t_first_content, x->t_last_content,
				   x->t_done };
	uint64_t prev = 0;
	for (size_t i = 0; i < sizeof(marks) / sizeof(marks[0]); i++) {
		if (!marks[i])
			continue;
		assert(marks[i] >= prev);
		prev = marks[i];
	}
	assert(x->t_done && x->t_arrive);
	assert(!x->t_req_read || (x->t_req_read >= x->t_arrive && x->t_req_read <= x->t_done));
	assert(!x->t_first_content == !x->content_events);
	assert(x->n_content_writes <= x->content_events);
	assert(x->n_content_writes == x->content_events || (x->flags & HTTP_X_WRITES_CAPPED));
	for (size_t i = 1; i < x->n_content_writes; i++)
		assert(x->content_writes[i] >= x->content_writes[i - 1]);
	assert((unsigned)x->end <= HTTP_END_TIMEOUT);
	assert(x->protocol == HTTP_PROTO_2 || x->protocol == HTTP_PROTO_GRPC);
	assert(x->stream_id & 1);
	assert(x->status == 0 || (x->status >= 0 && x->status <= 999));
	assert(x->grpc_status >= -1 && x->grpc_status <= 9999);
	assert(printable(x->method, sizeof(x->method)) && printable(x->path, sizeof(x->path)));
	assert(!(x->flags & HTTP_X_HEADERS_UNKNOWN) || (!x->path[0] && !x->method[0]) ||
	       x->t_resp_start);   /* a request's unknown head is never guessed */
}

/* The side connection: one gRPC call over and over (HPACK literals without
 * indexing, so each pass decodes alike), one piece per step. */
static const uint8_t side_req[] = {
	0, 0, 0x1f, 1, 5, 0, 0, 0, 1,   /* HEADERS, END_HEADERS | END_STREAM */
	0x83, 0x86,                     /* :method POST, :scheme http */
	0x04, 8, '/', 'k', '/', 'S', 't', 'r', 'e', 'a',       /* :path (indexed name) */
	0x0f, 0x10, 16, 'a', 'p', 'p', 'l', 'i', 'c', 'a', 't', 'i', 'o', 'n', '/', 'g', 'r', 'p', 'c',
};
static const uint8_t side_resp[] = {
	0, 0, 0x14, 1, 4, 0, 0, 0, 1,   /* HEADERS :status 200, content-type application/grpc */
	0x88, 0x0f, 0x10, 16, 'a', 'p', 'p', 'l', 'i', 'c', 'a', 't', 'i', 'o', 'n', '/', 'g', 'r', 'p', 'c',
	0, 0, 12, 0, 0, 0, 0, 0, 1,     /* DATA: two messages of 1 byte */
	0, 0, 0, 0, 1, 'a', 0, 0, 0, 0, 1, 'b',
	0, 0, 15, 1, 5, 0, 0, 0, 1,     /* trailers, END_STREAM: grpc-status 0 */
	0x00, 11, 'g', 'r', 'p', 'c', '-', 's', 't', 'a', 't', 'u', 's', 1, '0',
};
#define SIDE_STEPS 3

static void on_side(void *ctx, const struct http_exchange *x)
{
	struct seen *s = ctx;
	assert(x->end == HTTP_END_COMPLETE && x->status == 200 && x->content_events == 2);
	assert(x->protocol == HTTP_PROTO_GRPC && x->grpc_status == 0 && !strcmp(x->path, "/k/Strea"));
	s->good++;
}

/* A copy of frames with every frame's stream id set to sid. */
static void with_sid(uint8_t *dst, const uint8_t *src, size_t n, uint32_t sid)
{
	memcpy(dst, src, n);
	for (size_t o = 0; o + 9 <= n; o += 9 + ((size_t)dst[o] << 16 | (size_t)dst[o + 1] << 8 | dst[o + 2]))
		dst[o + 5] = (uint8_t)(sid >> 24), dst[o + 6] = (uint8_t)(sid >> 16),
		dst[o + 7] = (uint8_t)(sid >> 8), dst[o + 8] = (uint8_t)sid;
}

#define SIDE_SPLIT 50   /* the response's HEADERS and DATA, then its trailers */

static void side_step(struct http2_track *side, unsigned *k, uint64_t ts)
{
	unsigned pass = *k / SIDE_STEPS, i = (*k)++ % SIDE_STEPS;
	uint32_t sid = 2 * pass + 1;
	uint8_t buf[sizeof(side_resp)];
	if (i == 0) {
		if (!pass)
			http2_track_feed(side, HTTP_IN, (const uint8_t *)HTTP2_PREFACE, HTTP2_PREFACE_LEN,
					 HTTP2_PREFACE_LEN, ts);
		with_sid(buf, side_req, sizeof(side_req), sid);
		http2_track_feed(side, HTTP_IN, buf, sizeof(side_req), sizeof(side_req), ts);
		return;
	}
	with_sid(buf, side_resp, sizeof(side_resp), sid);
	if (i == 1)
		http2_track_feed(side, HTTP_OUT, buf, SIDE_SPLIT, SIDE_SPLIT, ts);
	else
		http2_track_feed(side, HTTP_OUT, buf + SIDE_SPLIT, sizeof(side_resp) - SIDE_SPLIT,
				 sizeof(side_resp) - SIDE_SPLIT, ts);
}

static void feed_piece(struct http2_track *t, uint8_t op, const uint8_t *p, size_t n, uint64_t ts)
{
	struct fuzz_piece f = fuzz_piece(op, p, n);
	http2_track_feed(t, f.dir, f.data, f.captured, f.moved, ts);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_track_stats totals = { 0 };
	struct http2_track_stats h2 = { 0 };
	struct seen seen = { 0 }, side_seen = { 0 };
	struct http_track_cfg cfg = { .on_exchange = on_exchange, .ctx = &seen, .totals = &totals,
				      .midstream = size && data[0] == 0xff };
	struct http_track_cfg side_cfg = { .on_exchange = on_side, .ctx = &side_seen };
	struct http2_track *t = http2_track_new(&cfg, &h2), *side = http2_track_new(&side_cfg, NULL);
	assert(t && side);
	uint64_t ts = 1u << 20;
	unsigned k = 0;
	size_t i = 0;
	while (i < size) {
		uint8_t op = data[i++];
		unsigned repeat = 1;
		if (op == 0xfc && i + 1 < size) {
			repeat = 16u * data[i++];
			op = data[i++];
		}
		unsigned kind = (op >> 1) & 7;
		if (kind == 7) {
			http2_track_close(t, ts, (op & 0x10) ? HTTP_BY_CLIENT : HTTP_BY_SERVER);
			assert(http2_track_in_flight(t) == 0);
		} else if (kind == 6) {
			http2_track_expire(t, ts);
			assert(http2_track_in_flight(t) == 0);
		} else {
			size_t n = i < size ? (size_t)data[i++] + 1 : 0;
			n = n < size - i ? n : size - i;
			for (unsigned r = 0; r < repeat; r++) {
				ts = ts + kind;
				feed_piece(t, op, data + i, n, ts);
				assert(http2_track_in_flight(t) <= HTTP2_MAX_STREAMS);
			}
			i += n;
		}
		side_step(side, &k, 10 * (uint64_t)k + 1);
	}
	assert(totals.exchanges == seen.n && h2.streams == seen.n);
	assert(h2.headers_undecodable <= h2.frames && h2.grpc_messages <= h2.frames * 16384);
	http2_track_close(t, ts + 1, HTTP_BY_SERVER);
	assert(http2_track_in_flight(t) == 0 && h2.streams == seen.n);
	assert(side_seen.good == k / SIDE_STEPS);
	http2_track_free(t);
	http2_track_free(side);
	return 0;
}
