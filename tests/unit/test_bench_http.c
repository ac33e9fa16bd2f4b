/* Unit tests of kpi-bench's pure parts: the incremental HTTP response parser
 * and SSE splitter fed at every split point, and the DIST forms. */
#include <math.h>

#include "tests/unit/check.h"
#include "tools/kpi-bench/dist.h"
#include "tools/kpi-bench/http.h"

static const char chunked[] =
	"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
	"X-Request-Id: abc-123\r\nTransfer-Encoding: chunked\r\n\r\n"
	"19\r\ndata: {\"choices\":[\"a\"]}\n\n\r\n"
	"1a\r\ndata: {\"choices\":[\"bc\"]}\n\n\r\n"
	"31\r\ndata: {\"choices\":[],\"usage\":{}}\r\n\r\ndata: [DONE]\n\n\r\n"
	"0\r\n\r\n";

/* Feeds msg in two pieces split at `at`, collecting SSE events. */
static int feed_split(const char *msg, size_t len, size_t at, struct http_resp *r,
		      char events[8][64], int *n_ev)
{
	struct buf ev = { 0 };
	int rc = 0;
	*n_ev = 0;
	http_resp_init(r);
	const char *parts[2] = { msg, msg + at };
	size_t lens[2] = { at, len - at };
	for (int i = 0; i < 2 && rc == 0; i++) {
		rc = http_resp_feed(r, parts[i], lens[i]);
		while (rc >= 0 && sse_next(&r->body, &ev))
			snprintf(events[(*n_ev)++ % 8], 64, "%s", ev.p);
	}
	buf_free(&ev);
	return rc;
}

static void test_chunked_sse_every_split(void)
{
	size_t len = strlen(chunked);
	for (size_t at = 0; at <= len; at++) {
		struct http_resp r = { 0 };
		char ev[8][64];
		int n;
		int rc = feed_split(chunked, len, at, &r, ev, &n);
		CHECK(rc == 1, "split at %zu: rc %d (%s)", at, rc, r.err);
		CHECK(r.status == 200 && r.chunked && r.event_stream, "split at %zu", at);
		CHECK(!strcmp(r.request_id, "abc-123"), "split at %zu: id '%s'", at, r.request_id);
		CHECK(n == 4, "split at %zu: %d events", at, n);
		CHECK(!strcmp(ev[0], "{\"choices\":[\"a\"]}"), "'%s'", ev[0]);
		CHECK(!strcmp(ev[1], "{\"choices\":[\"bc\"]}"), "'%s'", ev[1]);
		CHECK(!strcmp(ev[3], "[DONE]"), "'%s'", ev[3]);
		http_resp_free(&r);
	}
}

static void test_content_length_and_keepalive(void)
{
	const char *m = "HTTP/1.1 429 Too Many Requests\r\ncontent-length: 5\r\n"
			"Retry-After: 1\r\nx-request-id:  r9 \r\n\r\nbusy!";
	struct http_resp r = { 0 };
	http_resp_init(&r);
	CHECK(http_resp_feed(&r, m, strlen(m)) == 1, "%s", r.err);
	CHECK(r.status == 429 && !r.conn_close && r.content_length == 5, "status %d", r.status);
	CHECK(!strcmp(r.request_id, "r9"), "'%s'", r.request_id);
	CHECK(r.body.len - r.body.off == 5 && !memcmp(r.body.p + r.body.off, "busy!", 5), "body");
	/* the same struct parses the next response on the connection */
	const char *m2 = "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{}";
	http_resp_init(&r);
	CHECK(http_resp_feed(&r, m2, strlen(m2)) == 0, "read-to-close body is never complete early");
	CHECK(r.conn_close, "HTTP/1.0 closes");
	CHECK(http_resp_eof(&r) == 1, "EOF ends a read-to-close body");
	CHECK(!strcmp(r.body.p + r.body.off, "{}"), "'%s'", r.body.p + r.body.off);
	http_resp_free(&r);
}

static void test_malformed_responses(void)
{
	const char *bad[] = {
		"HTTX/1.1 200 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: -4\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct http_resp r = { 0 };
		http_resp_init(&r);
		CHECK(http_resp_feed(&r, bad[i], strlen(bad[i])) == -1, "case %zu accepted", i);
		CHECK(r.err[0], "case %zu: no reason", i);
		http_resp_free(&r);
	}
	struct http_resp r = { 0 };
	http_resp_init(&r);
	const char *cut = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc";
	CHECK(http_resp_feed(&r, cut, strlen(cut)) == 0, "incomplete");
	CHECK(http_resp_eof(&r) == -1 && strstr(r.err, "mid-response"), "%s", r.err);
	http_resp_free(&r);
}

static void test_sse_multiline_and_comments(void)
{
	struct buf b = { 0 }, ev = { 0 };
	const char *s = ": keep-alive comment\n\ndata: a\ndata:b\r\nid: 7\r\n\r\ndata: tail";
	buf_append(&b, s, strlen(s));
	CHECK(sse_next(&b, &ev) == 1 && !strcmp(ev.p, "a\nb"), "'%s'", ev.p);
	CHECK(sse_next(&b, &ev) == 0, "an unterminated event waits for more");
	buf_append(&b, "\n\n", 2);
	CHECK(sse_next(&b, &ev) == 1 && !strcmp(ev.p, "tail"), "'%s'", ev.p);
	buf_free(&b);
	buf_free(&ev);
}

static void test_dist_forms(void)
{
	struct dist d;
	char err[256];
	struct rng r;
	rng_seed(&r, 5);
	CHECK(!dist_parse(&d, "17", err, sizeof(err)) && dist_sample(&d, &r) == 17, "%s", err);
	CHECK(!dist_parse(&d, "uniform:3:5", err, sizeof(err)), "%s", err);
	int seen[6] = { 0 };
	for (int i = 0; i < 3000; i++) {
		long v = dist_sample(&d, &r);
		CHECK(v >= 3 && v <= 5, "%ld", v);
		seen[v]++;
	}
	CHECK(seen[3] > 800 && seen[4] > 800 && seen[5] > 800, "%d %d %d", seen[3], seen[4], seen[5]);
	CHECK(!dist_parse(&d, "exp:40:100", err, sizeof(err)), "%s", err);
	double sum = 0;
	long mx = 0;
	for (int i = 0; i < 20000; i++) {
		long v = dist_sample(&d, &r);
		CHECK(v >= 1 && v <= 100, "%ld", v);
		sum += v;
		mx = v > mx ? v : mx;
	}
	/* capped at 100, so the mean sits a little under 40 */
	CHECK(sum / 20000 > 33 && sum / 20000 < 41, "mean %g", sum / 20000);
	CHECK(mx == 100, "the cap is reached: %ld", mx);
	const char *bad[] = { "0", "-1", "x", "uniform:5:1", "uniform:1", "exp:0.5", "exp:5:2",
			      "exp:", "poisson:3", "file:", "file:/nonexistent", "12abc" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		CHECK(dist_parse(&d, bad[i], err, sizeof(err)) == -1, "'%s' accepted", bad[i]);
		CHECK(err[0], "'%s': no message", bad[i]);
		dist_free(&d);
	}
}

static void test_rng_reproducible(void)
{
	struct rng a, b, c;
	rng_seed(&a, 42);
	rng_seed(&b, 42);
	rng_seed(&c, 43);
	int differ = 0;
	for (int i = 0; i < 100; i++) {
		uint64_t x = rng_next(&a);
		CHECK(x == rng_next(&b), "same seed, same sequence");
		differ += x != rng_next(&c);
	}
	CHECK(differ > 95, "another seed, another sequence");
}

int main(void)
{
	RUN(test_chunked_sse_every_split);
	RUN(test_content_length_and_keepalive);
	RUN(test_malformed_responses);
	RUN(test_sse_multiline_and_comments);
	RUN(test_dist_forms);
	RUN(test_rng_reproducible);
	return CHECK_DONE();
}
