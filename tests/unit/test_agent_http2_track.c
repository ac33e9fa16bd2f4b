/* test_agent_http2_track.c - the HTTP/2 + gRPC tracker (agent/track/http/http2_track.c)
 * on frames built here: SSE streams interleaved on one connection, fed whole and
 * bytewise; a gRPC server-streaming call with messages split across frames and
 * its trailers; the dynamic table across requests; and the hostile shapes, each
 * counted where it is met: an HPACK bomb, a CONTINUATION flood, an RST storm,
 * lying gRPC length prefixes, a bad frame length, a connection older than tracking. */
#include <inttypes.h>
#include "tests/unit/check.h"
#include "agent/track/http/http2_track.h"

#define MAXX 64
struct got {
	int n;
	struct http_exchange x[MAXX];
	uint64_t w[MAXX][16];
};

static void on_x(void *ctx, const struct http_exchange *x)
{
	struct got *g = ctx;
	if (g->n >= MAXX)
		return;
	g->x[g->n] = *x;
	for (size_t i = 0; i < x->n_content_writes && i < 16; i++)
		g->w[g->n][i] = x->content_writes[i];
	g->n++;
}

static struct http2_track_stats st;

static struct http2_track *mk(struct got *g, bool midstream)
{
	memset(g, 0, sizeof(*g));
	memset(&st, 0, sizeof(st));
	struct http_track_cfg cfg = { .on_exchange = on_x, .ctx = g, .midstream = midstream };
	struct http2_track *t = http2_track_new(&cfg, &st);
	CHECK(t, "http2_track_new failed");
	return t;
}

/* ---- building frames -------------------------------------------------------- */

struct buf {
	size_t n;
	uint8_t b[1 << 16];
};

static void put(struct buf *o, const void *p, size_t n)
{
	CHECK(o->n + n <= sizeof(o->b), "test buffer full");
	memcpy(o->b + o->n, p, n);
	o->n += n;
}

static void frame(struct buf *o, uint8_t type, uint8_t flags, uint32_t sid, const void *p, size_t n)
{
	uint8_t h[9] = { (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n, type, flags,
			 (uint8_t)(sid >> 24), (uint8_t)(sid >> 16), (uint8_t)(sid >> 8), (uint8_t)sid };
	put(o, h, 9);
	put(o, p, n);
}

/* An HPACK literal, new name, without indexing (or with: index), no Huffman. */
static size_t lit(uint8_t *o, const char *name, const char *value, bool index)
{
	size_t nn = strlen(name), vn = strlen(value), k = 0;
	o[k++] = index ? 0x40 : 0x00;
	o[k++] = (uint8_t)nn;
	memcpy(o + k, name, nn);
	k += nn;
	o[k++] = (uint8_t)vn;
	memcpy(o + k, value, vn);
	return k + vn;
}

/* POST path with x-request-id rid (indexed: the table grows), content-type ct. */
static size_t req_head(uint8_t *o, const char *path, const char *rid, const char *ct)
{
	size_t k = 0;
	o[k++] = 0x83;                          /* :method POST */
	o[k++] = 0x86;                          /* :scheme http */
	o[k++] = 0x04;                          /* :path, literal value */
	o[k++] = (uint8_t)strlen(path);
	memcpy(o + k, path, strlen(path));
	k += strlen(path);
	k += lit(o + k, "x-request-id", rid, true);
	if (ct)
		k += lit(o + k, "content-type", ct, false);
	return k;
}

static void feed(struct http2_track *t, enum http_dir d, struct buf *b, uint64_t ts)
{
	http2_track_feed(t, d, b->b, b->n, b->n, ts);
	b->n = 0;
}

static const char *EV = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n";

static struct got g;

/* ---- streams ------------------------------------------------------------------ */

/* Two SSE streams interleaved; bytewise when bytewise. */
static void sse_two_streams(bool bytewise)
{
	struct http2_track *t = mk(&g, false);
	struct buf in = { 0 }, out = { 0 };
	uint8_t h[256];
	put(&in, HTTP2_PREFACE, HTTP2_PREFACE_LEN);
	frame(&in, 4, 0, 0, "\x00\x01\x00\x00\x10\x00", 6);    /* SETTINGS header table 4096 */
	frame(&in, 1, 4, 1, h, req_head(h, "/v1/chat/completions?q=1", "r1", NULL));
	frame(&in, 0, 1, 1, "{\"model\":\"m\",\"stream\":true}", 27);
	frame(&in, 1, 5, 3, h, req_head(h, "/v1/chat/completions", "r3", NULL));
	if (bytewise) {
		for (size_t i = 0; i < in.n; i++)
			http2_track_feed(t, HTTP_IN, in.b + i, 1, 1, 100 + i);
		in.n = 0;
	} else {
		feed(t, HTTP_IN, &in, 100);
	}
	size_t k = 0;
	h[k++] = 0x88;                           /* :status 200 */
	k += lit(h + k, "content-type", "text/event-stream", true);
	frame(&out, 1, 4, 1, h, k);
	h[0] = 0x88, h[1] = 0xbe;                /* the same, its content-type from the table */
	frame(&out, 1, 4, 3, h, 2);
	feed(t, HTTP_OUT, &out, 1000);
	for (int i = 0; i < 3; i++) {
		frame(&out, 0, 0, 1, EV, strlen(EV));
		static const char padded[] = "\x02" "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\nxx";
		frame(&out, 0, 0x08, 3, padded, sizeof(padded) - 1);
		feed(t, HTTP_OUT, &out, 2000 + 100 * (uint64_t)i);
	}
	frame(&out, 0, 1, 3, "", 0);
	feed(t, HTTP_OUT, &out, 3000);
	CHECK(g.n == 1 && g.x[0].stream_id == 3, "n %d", g.n);
	frame(&out, 0, 1, 1, "data: [DONE]\n\n", 14);
	feed(t, HTTP_OUT, &out, 3100);
	CHECK(g.n == 2 && http2_track_in_flight(t) == 0, "n %d", g.n);
	for (int i = 0; i < 2; i++) {
		struct http_exchange *x = &g.x[i];
		bool one = x->stream_id == 1;
		CHECK(!strcmp(x->path, "/v1/chat/completions") && !strcmp(x->method, "POST") && x->status == 200,
		      "%s %s %d", x->path, x->method, x->status);
		CHECK(!strcmp(x->request_id, one ? "r1" : "r3") && x->protocol == HTTP_PROTO_2, "%s", x->request_id);
		CHECK(x->content_events == 3 && x->end == HTTP_END_COMPLETE && (x->flags & HTTP_X_SSE), "%u",
		      x->content_events);
		CHECK(g.w[i][0] == 2000 && g.w[i][2] == 2200 && x->t_done == (one ? 3100u : 3000u), "times");
		CHECK(x->t_resp_start == 1000 && x->grpc_status == -1, "resp %" PRIu64, x->t_resp_start);
		CHECK(!one || (x->stream == 1 && !strcmp(x->model, "m")), "body keys");
	}
	CHECK(st.headers_undecodable == 0 && st.bad_frames == 0 && st.streams == 2, "stats");
	http2_track_free(t);
}

static void test_sse_streams_whole(void) { sse_two_streams(false); }
static void test_sse_streams_bytewise(void) { sse_two_streams(true); }

static void test_grpc_server_streaming(void)
{
	struct http2_track *t = mk(&g, false);
	struct buf in = { 0 }, out = { 0 };
	uint8_t h[256];
	put(&in, HTTP2_PREFACE, HTTP2_PREFACE_LEN);
	frame(&in, 1, 4, 1, h, req_head(h, "/kpi.Gen/Stream", "g1", "application/grpc"));
	frame(&in, 0, 1, 1, "\x00\x00\x00\x00\x01" "3", 6);
	feed(t, HTTP_IN, &in, 100);
	size_t k = 0;
	h[k++] = 0x88;
	k += lit(h + k, "content-type", "application/grpc+proto", false);
	frame(&out, 1, 4, 1, h, k);
	/* three messages of 4 bytes: the second split across frames and writes */
	frame(&out, 0, 0, 1, "\x00\x00\x00\x00\x04" "aaaa" "\x00\x00\x00", 12);
	feed(t, HTTP_OUT, &out, 1000);
	frame(&out, 0, 0, 1, "\x00\x04" "bb", 4);
	feed(t, HTTP_OUT, &out, 1100);
	frame(&out, 0, 0, 1, "bb" "\x00\x00\x00\x00\x04" "cccc", 11);
	feed(t, HTTP_OUT, &out, 1200);
	frame(&out, 1, 5, 1, h, lit(h, "grpc-status", "0", false));
	feed(t, HTTP_OUT, &out, 1300);
	CHECK(g.n == 1, "n %d", g.n);
	struct http_exchange *x = &g.x[0];
	CHECK(x->protocol == HTTP_PROTO_GRPC && x->grpc_status == 0 && !strcmp(x->path, "/kpi.Gen/Stream"),
	      "%d %d %s", x->protocol, x->grpc_status, x->path);
	CHECK(x->content_events == 3 && g.w[0][0] == 1000 && g.w[0][1] == 1200 && g.w[0][2] == 1200,
	      "%u", x->content_events);
	CHECK(x->t_done == 1300 && x->t_req_read == 100 && st.grpc_messages == 3, "end");
	http2_track_free(t);
}

/* ---- hostile ------------------------------------------------------------------- */

static void test_hpack_bomb_counted(void)
{
	struct http2_track *t = mk(&g, false);
	struct buf in = { 0 };
	uint8_t h[4096];
	char big[201];
	memset(big, 'v', 200);
	big[200] = 0;
	put(&in, HTTP2_PREFACE, HTTP2_PREFACE_LEN);
	size_t k = req_head(h, "/b", "bomb", NULL);
	k += lit(h + k, "big", big, true);
	frame(&in, 1, 0, 1, h, k);
	feed(t, HTTP_IN, &in, 10);
	memset(h, 0xbe, 1000);                  /* the 200-byte entry, over and over */
	for (int i = 0; i < 60; i++) {
		frame(&in, 9, i == 59 ? 4 : 0, 1, h, 1000);
		feed(t, HTTP_IN, &in, 20 + (uint64_t)i);
	}
	CHECK(st.bombs == 1 && st.tables_lost == 0, "bombs %" PRIu64 " lost %" PRIu64, st.bombs, st.tables_lost);
	CHECK(http2_track_in_flight(t) == 1, "the stream is still followed");
	http2_track_close(t, 100, HTTP_BY_CLIENT);
	CHECK(g.n == 1 && !strcmp(g.x[0].path, "/b") && g.x[0].end == HTTP_END_CLIENT_CLOSED, "%s", g.x[0].path);
	http2_track_free(t);
}

static void test_continuation_flood_loses_the_table(void)
{
	struct http2_track *t = mk(&g, false);
	struct buf in = { 0 };
	uint8_t h[256];
	put(&in, HTTP2_PREFACE, HTTP2_PREFACE_LEN);
	frame(&in, 1, 0, 1, h, req_head(h, "/f", "flood", NULL));
	feed(t, HTTP_IN, &in, 10);
	size_t k = lit(h, "a", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", false);
	for (int i = 0; i < 2000; i++) {
		frame(&in, 9, 0, 1, h, k);
		feed(t, HTTP_IN, &in, 20 + (uint64_t)i);
	}
	CHECK(st.tables_lost == 1 && http2_track_in_flight(t) == 0, "lost %" PRIu64, st.tables_lost);
	/* the block ends: its stream is followed, its head unknown */
	frame(&in, 9, 4, 1, h, k);
	frame(&in, 1, 5, 3, h, req_head(h, "/next", "n", NULL));
	feed(t, HTTP_IN, &in, 5000);
	CHECK(st.headers_undecodable == 2 && http2_track_in_flight(t) == 2, "undecodable %" PRIu64,
	      st.headers_undecodable);
	http2_track_close(t, 6000, HTTP_BY_SERVER);
	CHECK(g.n == 2 && !g.x[0].path[0] && !g.x[1].path[0] && (g.x[1].flags & HTTP_X_HEADERS_UNKNOWN),
	      "never a guessed path");
	http2_track_free(t);
}

static void test_rst_storm_and_stream_cap(void)
{
	struct http2_track *t = mk(&g, false);
	struct buf in = { 0 };
	uint8_t h[256];
	size_t k = 0;
	h[k++] = 0x83, h[k++] = 0x86, h[k++] = 0x84;    /* POST http / */
	put(&in, HTTP2_PREFACE, HTTP2_PREFACE_LEN);
	feed(t, HTTP_IN, &in, 1);
	for (uint32_t s = 1; s < 2 * 1000; s += 2) {
		frame(&in, 1, 4, s, h, k);
		frame(&in, 3, 0, s, "\x00\x00\x00\x08", 4);
		feed(t, HTTP_IN, &in, 10 + s);
	}
	CHECK(st.resets == 1000 && st.streams == 1000 && http2_track_in_flight(t) == 0, "resets %" PRIu64,
	      st.resets);
	/* streams left open: no more than HTTP2_MAX_STREAMS are followed */
	for (uint32_t s = 2001; s < 2001 + 2 * 300; s += 2) {
		frame(&in, 1, 4, s, h, k);
		feed(t, HTTP_IN, &in, 5000 + s);
	}
	CHECK(http2_track_in_flight(t) == HTTP2_MAX_STREAMS && st.streams_dropped == 300 - HTTP2_MAX_STREAMS,
	      "in flight %u dropped %" PRIu64, http2_track_in_flight(t), st.streams_dropped);
	http2_track_free(t);
}

static void test_lying_grpc_prefixes(void)
{
	struct http2_track *t = mk(&g, false);
	struct buf in = { 0 }, out = { 0 };
	uint8_t h[256];
	put(&in, HTTP2_PREFACE, HTTP2_PREFACE_LEN);
	frame(&in, 1, 5, 1, h, req_head(h, "/k/A", "a", "application/grpc"));
	frame(&in, 1, 5, 3, h, req_head(h, "/k/B", "b", "application/grpc"));
	feed(t, HTTP_IN, &in, 10);
	size_t k = 0;
	h[k++] = 0x88;
	k += lit(h + k, "content-type", "application/grpc", false);
	frame(&out, 1, 4, 1, h, k);
	frame(&out, 1, 4, 3, h, k);
	/* stream 1: a message that says 2 GB, then the stream ends */
	frame(&out, 0, 1, 1, "\x00\x7f\xff\xff\xff" "xx", 7);
	/* stream 3: a flag byte that is neither 0 nor 1 */
	frame(&out, 0, 0, 3, "\x07\x00\x00\x00\x01" "y" "\x00\x00\x00\x00\x00", 11);
	frame(&out, 0, 1, 3, "", 0);
	feed(t, HTTP_OUT, &out, 100);
	CHECK(g.n == 2 && st.grpc_bad_prefix == 2 && st.grpc_messages == 0, "bad %" PRIu64, st.grpc_bad_prefix);
	CHECK(g.x[0].content_events == 0 && g.x[1].content_events == 0 && (g.x[0].flags & HTTP_X_BODY_GAP),
	      "no message counted");
	http2_track_free(t);
}

static void test_bad_length_unsyncs_then_resyncs(void)
{
	struct http2_track *t = mk(&g, false);
	struct buf in = { 0 };
	uint8_t h[256];
	put(&in, HTTP2_PREFACE, HTTP2_PREFACE_LEN);
	frame(&in, 8, 0, 0, "\x00\x00\x00", 3);         /* WINDOW_UPDATE of 3 bytes */
	feed(t, HTTP_IN, &in, 10);
	CHECK(st.bad_frames == 1, "bad %" PRIu64, st.bad_frames);
	frame(&in, 1, 5, 1, h, req_head(h, "/again", "x", NULL));
	feed(t, HTTP_IN, &in, 20);
	CHECK(st.resynced == 1 && http2_track_in_flight(t) == 1, "resynced %" PRIu64, st.resynced);
	http2_track_free(t);
}

static void test_older_connection_timed_by_id(void)
{
	struct http2_track *t = mk(&g, false);
	struct buf in = { 0 }, out = { 0 };
	uint8_t h[4] = { 0x83, 0xbe, 0xbf, 0xc0 };     /* indexes into a table never seen */
	frame(&in, 1, 5, 41, h, 4);
	feed(t, HTTP_IN, &in, 10);
	frame(&out, 1, 4, 41, "\xbe", 1);
	frame(&out, 0, 0, 41, EV, strlen(EV));
	feed(t, HTTP_OUT, &out, 20);
	frame(&out, 0, 1, 41, EV, strlen(EV));
	feed(t, HTTP_OUT, &out, 30);
	CHECK(st.midstream == 1 && st.headers_undecodable == 2 && g.n == 1, "mid %" PRIu64 " undec %" PRIu64,
	      st.midstream, st.headers_undecodable);
	struct http_exchange *x = &g.x[0];
	CHECK(!x->path[0] && !x->method[0] && x->status == 0 && (x->flags & HTTP_X_HEADERS_UNKNOWN), "%s", x->path);
	CHECK(x->stream_id == 41 && x->content_events == 2 && x->t_arrive == 10 && x->t_resp_start == 20 &&
	      x->t_done == 30, "timed by id");
	http2_track_free(t);
}

int main(void)
{
	RUN(test_sse_streams_whole);
	RUN(test_sse_streams_bytewise);
	RUN(test_grpc_server_streaming);
	RUN(test_hpack_bomb_counted);
	RUN(test_continuation_flood_loses_the_table);
	RUN(test_rst_storm_and_stream_cap);
	RUN(test_lying_grpc_prefixes);
	RUN(test_bad_length_unsyncs_then_resyncs);
	RUN(test_older_connection_timed_by_id);
	return CHECK_DONE();
}
