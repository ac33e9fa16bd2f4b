/* test_server_http.c - the HTTP/1.1 request parser and chunked decoder on
 * well-formed, split, malformed and hostile inputs. */
#include <string.h>

#include "tests/unit/check.h"
#include "daemon/server/http.h"

static int parse(const char *s, struct http_request *r)
{
	return http_parse_head(s, strlen(s), r);
}

static void test_simple_get(void)
{
	struct http_request r;
	const char *s = "GET /v1/models?x=1 HTTP/1.1\r\nHost: a\r\nX-Request-Id: abc\r\n\r\nrest";
	int n = parse(s, &r);
	CHECK(n == (int)strlen(s) - 4, "head length %d", n);
	CHECK(r.method_len == 3 && !memcmp(r.method, "GET", 3), "method");
	CHECK(r.path_len == 10 && !memcmp(r.path, "/v1/models", 10), "path without query");
	CHECK(r.minor == 1 && r.keep_alive, "HTTP/1.1 keeps alive by default");
	CHECK(r.content_length == -1 && !r.chunked, "no body");
	CHECK(r.request_id_len == 3 && !memcmp(r.request_id, "abc", 3), "x-request-id");
}

static void test_incremental(void)
{
	const char *s = "POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}";
	size_t head = strlen(s) - 2;
	for (size_t i = 0; i < head; i++) {
		struct http_request r;
		CHECK(http_parse_head(s, i, &r) == 0, "prefix of %zu bytes must need more", i);
	}
	struct http_request r;
	CHECK(http_parse_head(s, head, &r) == (int)head, "complete head");
	CHECK(r.content_length == 2, "content length %lld", r.content_length);
}

static void test_connection_header(void)
{
	struct http_request r;
	CHECK(parse("GET / HTTP/1.1\r\nConnection: close\r\n\r\n", &r) > 0 && !r.keep_alive, "close");
	CHECK(parse("GET / HTTP/1.0\r\n\r\n", &r) > 0 && !r.keep_alive, "1.0 closes");
	CHECK(parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &r) > 0 && r.keep_alive,
	      "1.0 keep-alive");
	CHECK(parse("GET / HTTP/1.1\nHost: x\n\n", &r) > 0, "bare LF line ends");
}

static void test_malformed(void)
{
	static const struct {
		const char *in;
		int status;
	} cases[] = {
		{ "GARBAGE\r\n\r\n", -400 },
		{ "GET\r\n\r\n", -400 },
		{ "GET noslash HTTP/1.1\r\n\r\n", -400 },
		{ "GET / HTTP/2.0\r\n\r\n", -505 },
		{ "GET / HTTX/1.1\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nNo colon here\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\n folded: x\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nBad\x01: x\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nA: b\x01\r\n\r\n", -400 },
		{ "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", -400 },
		{ "POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", -400 },
		{ "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", -400 },
		{ "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", -413 },
		{ "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", -501 },
		{ "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", -400 },
		{ "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", -400 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct http_request r;
		int n = parse(cases[i].in, &r);
		CHECK(n == cases[i].status, "case %zu: got %d want %d", i, n, cases[i].status);
		CHECK(r.error && r.error[0], "case %zu has a reason", i);
	}
	/* garbage in the request line is refused before the head completes */
	struct http_request r;
	CHECK(parse("\x16\x03\x01 tls hello", &r) == -400, "binary junk");
}

static void test_oversized_head(void)
{
	static char big[HTTP_MAX_HEAD + 100];
	memset(big, 'a', sizeof(big));
	memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
	struct http_request r;
	CHECK(http_parse_head(big, sizeof(big), &r) == -431, "head over the limit");
	char many[8192] = "GET / HTTP/1.1\r\n";
	for (int i = 0; i < 70; i++)
		strcat(many, "A: b\r\n");
	strcat(many, "\r\n");
	CHECK(parse(many, &r) == -431, "too many headers");
}

static void test_chunked(void)
{
	const char *body = "4\r\nWiki\r\n5;ext=1\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nT: x\r\n\r\nNEXT";
	/* fed one byte at a time and all at once give the same payload */
	for (int mode = 0; mode < 2; mode++) {
		struct http_chunked st = { 0 };
		struct sbuf out = { 0 };
		size_t used = 0, n = strlen(body);
		while (!st.done && used < n) {
			size_t give = mode ? n - used : 1;
			ssize_t k = http_chunked_feed(&st, body + used, give, &out, 1 << 20);
			CHECK(k >= 0, "feed failed: %s", st.error);
			used += (size_t)k;
		}
		CHECK(st.done, "body complete");
		CHECK(used == n - 4, "stops before the next request: used %zu", used);
		CHECK(out.len == 23 && !memcmp(out.data, "Wikipedia in\r\n\r\nchunks.", 23),
		      "payload '%s'", out.data);
		sbuf_free(&out);
	}
}

static void test_chunked_bad(void)
{
	static const struct {
		const char *in;
		int status;
	} cases[] = {
		{ "x\r\n", -400 },
		{ "4\r\nWikiXX", -400 },
		{ "4\rX", -400 },
		{ "fffffffffffffffff\r\n", -413 },
		{ "100001\r\n", -413 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct http_chunked st = { 0 };
		struct sbuf out = { 0 };
		ssize_t k = http_chunked_feed(&st, cases[i].in, strlen(cases[i].in), &out, 1 << 20);
		CHECK(k == cases[i].status, "case %zu: got %zd want %d", i, k, cases[i].status);
		sbuf_free(&out);
	}
}

static void test_request_id(void)
{
	char out[HTTP_MAX_REQUEST_ID + 1];
	CHECK(http_sanitize_request_id("ab c\"<>d-1.2_3:4", 16, out) == 12, "len");
	CHECK(!strcmp(out, "abcd-1.2_3:4"), "kept '%s'", out);
	char longid[200];
	memset(longid, 'x', sizeof(longid));
	CHECK(http_sanitize_request_id(longid, sizeof(longid), out) == 63 && strlen(out) == 63,
	      "truncated to 63, what the agent's event carries");
	CHECK(http_sanitize_request_id("\"\r\n", 3, out) == 0 && out[0] == 0, "nothing usable");
}

/* What the router and decode workers read back from an upstream. */
static void test_response_head(void)
{
	struct http_response r;
	const char *ok = "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.kpiscope.kv\r\n"
			 "Content-Length: 4240\r\nRetry-After: 1\r\n\r\nbody";
	int n = http_parse_response_head(ok, strlen(ok), &r);
	CHECK(n == (int)strlen(ok) - 4 && r.status == 200 && r.keep_alive && !r.chunked &&
	      r.content_length == 4240, "n %d status %d", n, r.status);
	CHECK(http_token_eq(r.content_type, r.content_type_len, "application/vnd.kpiscope.kv"), "ctype");
	CHECK(r.retry_after && r.retry_after_len == 1, "retry-after");
	for (size_t cut = 0; cut < strlen(ok) - 4; cut++)
		CHECK(http_parse_response_head(ok, cut, &r) == 0, "cut at %zu is incomplete", cut);
	const char *ch = "HTTP/1.0 502 Bad Gateway\r\nTransfer-Encoding: chunked\r\n"
			 "Connection: keep-alive\r\n\r\n";
	CHECK(http_parse_response_head(ch, strlen(ch), &r) > 0 && r.status == 502 && r.chunked &&
	      r.keep_alive && r.content_length == -1, "1.0 kept alive, chunked");
	const char *close = "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
	CHECK(http_parse_response_head(close, strlen(close), &r) > 0 && !r.keep_alive, "close");
	static const char *bad[] = {
		"HTTP/2 200 OK\r\n\r\n", "HTTP/1.1 20 OK\r\n\r\n", "HTTP/1.1 999 X\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: x1\r\n\r\n", "SSH-2.0-OpenSSH\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(http_parse_response_head(bad[i], strlen(bad[i]), &r) == -1 && r.error, "bad %zu", i);
	char hp[64];
	CHECK(http_sanitize_hostport("127.0.0.1:8001", 14, hp, sizeof(hp)) == 14, "hostport");
	CHECK(http_sanitize_hostport("[::1]:80", 8, hp, sizeof(hp)) == 8, "v6");
	CHECK(http_sanitize_hostport("a b:1", 5, hp, sizeof(hp)) == 0 && !hp[0], "space refused");
	uint64_t v;
	CHECK(http_parse_hex64("18096c7d57e72d63", 16, &v) && v == 0x18096c7d57e72d63ull, "hex");
	CHECK(!http_parse_hex64("18096c7d57e72d63f", 17, &v) && !http_parse_hex64("xyz", 3, &v), "bad hex");
}

int main(void)
{
	RUN(test_response_head);
	RUN(test_simple_get);
	RUN(test_incremental);
	RUN(test_connection_header);
	RUN(test_malformed);
	RUN(test_oversized_head);
	RUN(test_chunked);
	RUN(test_chunked_bad);
	RUN(test_request_id);
	return CHECK_DONE();
}
