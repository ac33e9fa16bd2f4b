/* fuzz_http.c - libFuzzer target for the HTTP/1.1 request head parser and the
 * chunked body decoder (daemon/server/http.c), fed exactly as the daemon feeds
 * them: the head first, then whatever follows in pieces of varying size. */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/server/http.h"
#include "daemon/server/sbuf.h"

#define FUZZ_MAX_BODY 4096

static void check_head(const char *buf, size_t len, const struct http_request *req, int rc)
{
	if (rc > 0) {
		assert((size_t)rc <= len && req->head_len == (size_t)rc);
		assert(req->method >= buf && req->method + req->method_len <= buf + rc);
		assert(req->path >= buf && req->path + req->path_len <= buf + rc);
		assert(req->path_len >= 1 && req->path[0] == '/');
		assert(!(req->chunked && req->content_length >= 0));
		if (req->request_id) {
			assert(req->request_id >= buf &&
			       req->request_id + req->request_id_len <= buf + rc);
			char id[HTTP_MAX_REQUEST_ID + 1];
			size_t n = http_sanitize_request_id(req->request_id, req->request_id_len, id);
			assert(n <= HTTP_MAX_REQUEST_ID && strlen(id) == n);
			for (size_t i = 0; i < n; i++)
				assert(strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
					      "0123456789._:-", id[i]));
		}
	} else if (rc < 0) {
		assert(req->error && req->error[0]);
		assert(rc == -400 || rc == -413 || rc == -431 || rc == -501 || rc == -505);
	}
	assert(http_status_text(rc < 0 ? -rc : 200) != NULL);
}

/* The body decoder in pieces whose sizes come from step: the state machine
 * must not care where the reads split the stream. */
static void feed_chunked(const char *in, size_t n, size_t step)
{
	struct http_chunked st = { 0 };
	struct sbuf out = { 0 };
	size_t off = 0;
	while (off < n && !st.done) {
		size_t piece = n - off < step ? n - off : step;
		ssize_t r = http_chunked_feed(&st, in + off, piece, &out, FUZZ_MAX_BODY);
		if (r < 0) {
			assert(r == -400 || r == -413);
			assert(st.error && st.error[0]);
			break;
		}
		assert((size_t)r <= piece);
		assert(out.len <= FUZZ_MAX_BODY);
		if (r == 0 && !st.done)
			assert(!"http_chunked_feed consumed nothing and is not done");
		off += (size_t)r;
	}
	sbuf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;
	struct http_request req;
	int rc = http_parse_head(buf, size, &req);
	check_head(buf, size, &req, rc);

	/* every prefix of a complete head is "need more" or the same answer:
	 * the daemon parses again on each read */
	if (rc > 0 && size > 1) {
		struct http_request part;
		int prc = http_parse_head(buf, (size_t)rc - 1, &part);
		check_head(buf, (size_t)rc - 1, &part, prc);
		assert(prc == 0);
	}

	/* the body after the head (or the whole input when the head failed) goes
	 * through the chunked decoder, whole and in small pieces */
	size_t off = rc > 0 ? (size_t)rc : 0;
	const char *body = buf + off;
	size_t blen = size - off;
	size_t step = size ? (size_t)(data[0] % 7) + 1 : 1;
	feed_chunked(body, blen, blen ? blen : 1);
	feed_chunked(body, blen, step);
	return 0;
}
