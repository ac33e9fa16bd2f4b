/* fuzz_agent_http_track.c - libFuzzer target for the agent's HTTP/SSE stream
 * tracker (agent/track/http/): arbitrary bytes in arbitrary pieces, with gaps,
 * closes and expiries, to both directions; every record must hold together,
 * and a second connection fed in between must come out exactly as it went in.
 *
 * Input: a list of steps. op byte: bit 0 direction; bits 1-3: 6 = expire,
 * 7 = close (bit 4: by client), else a feed whose ts advances by those bits
 * (0: the same ts; op 0xfe also steps back, to exercise clamping); bits 4-7
 * of a feed: how much is captured (0-11 all, 12 half, 13 none: sendfile,
 * 14 all plus a long gap, 15 one byte). Then a length byte (n + 1) and the
 * piece's bytes. tests/fuzz/make_seeds.py writes seeds in this form. */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "agent/track/http/http_track.h"
#include "tests/fuzz/fuzz_piece.h"

struct seen {
	unsigned n;
	uint64_t last_arrive;
	unsigned good;          /* the side connection's exchanges */
};

static bool ok_chars(const char *s, size_t cap, const char *extra, bool printable)
{
	size_t n = strnlen(s, cap);
	if (n == cap)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		bool id = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			  strchr(extra, c);
		if (printable ? c < 0x20 || c >= 0x7f : !id)
			return false;
	}
	return true;
}

static void check_times(const struct http_exchange *x)
{
	const uint64_t marks[] = { x->t_arrive, x->t_continue, x->t_resp_start,
				   x->t_first_content, x->t_last_content, x->t_done };
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
	assert(!x->t_first_content || x->t_resp_start);
	assert(x->n_content_writes <= x->content_events);
	assert(x->n_content_writes == x->content_events || (x->flags & HTTP_X_WRITES_CAPPED));
	for (size_t i = 0; i < x->n_content_writes; i++)
		assert(!i || x->content_writes[i] >= x->content_writes[i - 1]);
	if (x->n_content_writes) {
		assert(x->content_writes[0] == x->t_first_content);
		assert(x->content_writes[x->n_content_writes - 1] == x->t_last_content);
	}
}

static void on_exchange(void *ctx, const struct http_exchange *x)
{
	struct seen *s = ctx;
	s->n++;
	assert(x->t_arrive >= s->last_arrive);      /* handed over in request order */
	s->last_arrive = x->t_arrive;
	check_times(x);
	assert((unsigned)x->end <= HTTP_END_TIMEOUT);
	assert(x->status == 0 || (x->status >= 100 && x->status <= 599));
	assert(x->stream >= -1 && x->stream <= 1);
	assert(x->max_tokens >= -1 && x->prompt_tokens >= -1 && x->completion_tokens >= -1);
	assert(ok_chars(x->method, sizeof(x->method), "", true) && x->method[0]);
	assert(ok_chars(x->path, sizeof(x->path), "", true));
	assert(!x->path[0] || x->path[0] == '/' || x->path[0] == '*');
	assert(ok_chars(x->model, sizeof(x->model), "", true));
	assert(ok_chars(x->finish_reason, sizeof(x->finish_reason), "._:-", false));
	assert(ok_chars(x->request_id, sizeof(x->request_id), "._:-", false));
	assert(!x->request_id[0] == (x->id_src == HTTP_ID_NONE));
}

/* The side connection: the same streamed exchange over and over, one piece per
 * step of the fuzzed one; it must never notice its neighbour. */
static const char *const side_script[] = {
	"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 28\r\nX-Request-Id: side\r\n\r\n",
	"{\"model\":\"s\",\"max_tokens\":2}",
	"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
	"21\r\ndata: {\"delta\":{\"content\":\"a\"}}\n\n\r\n",
	"21\r\ndata: {\"delta\":{\"content\":\"b\"}}\n\n\r\n",
	"0\r\n\r\n",
};
#define SIDE_STEPS (sizeof(side_script) / sizeof(side_script[0]))

static void on_side(void *ctx, const struct http_exchange *x)
{
	struct seen *s = ctx;
	assert(x->end == HTTP_END_COMPLETE && x->status == 200 && x->content_events == 2);
	assert(!strcmp(x->request_id, "side") && !strcmp(x->model, "s") && x->max_tokens == 2);
	s->good++;
}

static void side_step(struct http_track *side, unsigned *k, uint64_t ts)
{
	unsigned i = (*k)++ % SIDE_STEPS;
	const char *p = side_script[i];
	http_track_feed(side, i == 0 || i == 1 ? HTTP_IN : HTTP_OUT, (const uint8_t *)p,
			strlen(p), strlen(p), ts);
}

static void feed_piece(struct http_track *t, uint8_t op, const uint8_t *p, size_t n, uint64_t ts)
{
	struct fuzz_piece f = fuzz_piece(op, p, n);
	http_track_feed(t, f.dir, f.data, f.captured, f.moved, ts);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_track_stats totals = { 0 };
	struct seen seen = { 0 }, side_seen = { 0 };
	struct http_track_cfg cfg = { .on_exchange = on_exchange, .ctx = &seen, .totals = &totals,
				      .midstream = size && data[0] == 0xff };
	struct http_track_cfg side_cfg = { .on_exchange = on_side, .ctx = &side_seen };
	struct http_track *t = http_track_new(&cfg), *side = http_track_new(&side_cfg);
	assert(t && side);
	uint64_t ts = 1u << 20;
	unsigned k = 0;
	size_t i = 0;
	while (i < size) {
		uint8_t op = data[i++];
		unsigned kind = (op >> 1) & 7;
		if (kind == 7) {
			http_track_close(t, ts, (op & 0x10) ? HTTP_BY_CLIENT : HTTP_BY_SERVER);
			assert(http_track_in_flight(t) == 0);
		} else if (kind == 6) {
			http_track_expire(t, ts);
			assert(http_track_in_flight(t) == 0);
		} else {
			size_t n = i < size ? (size_t)data[i++] + 1 : 0;
			n = n < size - i ? n : size - i;
			ts = op == 0xfe ? ts - 5 : ts + kind;
			feed_piece(t, op, data + i, n, ts);
			i += n;
		}
		assert(http_track_in_flight(t) <= HTTP_TRACK_MAX_QUEUE);
		side_step(side, &k, 10 * (uint64_t)k + 1);
	}
	const struct http_track_stats *st = http_track_stats(t);
	assert(st->exchanges == seen.n && !memcmp(st, &totals, sizeof(totals)));
	assert(st->malformed <= st->unsynced);
	http_track_close(t, ts + 1, HTTP_BY_SERVER);
	assert(http_track_in_flight(t) == 0 && http_track_stats(t)->exchanges == seen.n);
	assert(side_seen.good == k / SIDE_STEPS);
	assert(http_track_stats(side)->unsynced == 0 && http_track_in_flight(side) == (k % SIDE_STEPS != 0));
	http_track_free(t);
	http_track_free(side);
	return 0;
}
