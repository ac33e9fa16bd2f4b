/* http.h - HTTP/1.1 request parsing as pure functions over byte buffers (no
 * I/O, no globals), so the fuzzers and unit tests drive exactly the code the
 * daemon runs. Response status lines and reason phrases live here too. */
#ifndef KPI_HTTP_H
#define KPI_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "abi/kpi_request_id.h"
#include "daemon/server/sbuf.h"

#define HTTP_MAX_HEAD 16384    /* request line + headers */
#define HTTP_MAX_HEADERS 64
/* The id is the trace's join key: keep no more than the agent's event ABI
 * carries, so the stored id always equals the x-request-id header. */
#define HTTP_MAX_REQUEST_ID (KPI_REQID_LEN - 1)

struct http_request {
	const char *method;     /* points into the parsed buffer */
	size_t method_len;
	const char *path;       /* target without the query string */
	size_t path_len;
	int minor;              /* HTTP/1.<minor> */
	bool keep_alive;        /* after this request */
	bool chunked;           /* Transfer-Encoding: chunked */
	bool expect_continue;   /* Expect: 100-continue */
	long long content_length; /* -1 when absent */
	const char *request_id; /* X-Request-Id as sent, or NULL */
	size_t request_id_len;
	const char *prefill;    /* x-kpi-prefill as sent, or NULL (abi/kpi_kv_wire.h) */
	size_t prefill_len;
	const char *model_fp;   /* x-kpi-model as sent, or NULL */
	size_t model_fp_len;
	size_t head_len;        /* bytes up to and including the blank line */
	const char *error;      /* why parsing failed, for the JSON error body */
};

/* Parses the request head at the start of buf. Returns head_len (> 0) when
 * the head is complete, 0 when more bytes are needed, or -status (400, 431,
 * 501, 505) with req->error set. Pointers in req point into buf. */
int http_parse_head(const char *buf, size_t len, struct http_request *req);

/* Incremental decoder of a chunked body (RFC 9112 7.1): feed it bytes as they
 * arrive; it appends the payload to out. */
struct http_chunked {
	int state;
	unsigned long long size;  /* bytes left in the current chunk */
	int digits;
	size_t line;              /* length of the current size/trailer line */
	bool done;
	const char *error;
};

/* Consumes up to n bytes. Returns bytes consumed (stops right after the
 * final CRLF once done), or -400 (bad size or framing) / -413 (payload over
 * max_body) with st->error set. */
ssize_t http_chunked_feed(struct http_chunked *st, const char *in, size_t n, struct sbuf *out,
			  size_t max_body);

/* "Bad Request" for 400, etc.; "Unknown" for codes this server never sends. */
const char *http_status_text(int status);

/* Copies a client X-Request-Id keeping only [A-Za-z0-9._:-], at most
 * HTTP_MAX_REQUEST_ID bytes; returns the length (0: nothing usable). */
size_t http_sanitize_request_id(const char *in, size_t n, char out[HTTP_MAX_REQUEST_ID + 1]);

/* Case-insensitive comparison of a (ptr, len) token with a C string. */
bool http_token_eq(const char *p, size_t n, const char *s);

/* Copies a "host:port" keeping only [A-Za-z0-9.:[]-]; "" when anything else
 * is in it or it does not fit. Returns the length. */
size_t http_sanitize_hostport(const char *in, size_t n, char *out, size_t outlen);

/* 1 to 16 hex digits into *v; false otherwise. */
bool http_parse_hex64(const char *in, size_t n, uint64_t *v);

/* ---- responses an upstream sends (the router's and decode worker's client side) ---- */

struct http_response {
	int status;             /* 100..599 */
	int minor;
	bool keep_alive;        /* the connection may carry another request after this */
	bool chunked;
	long long content_length; /* -1 when absent */
	const char *content_type; /* as sent, or NULL */
	size_t content_type_len;
	const char *retry_after;  /* as sent, or NULL */
	size_t retry_after_len;
	size_t head_len;
	const char *error;
};

/* Parses a response head at the start of buf: returns head_len (> 0), 0 when
 * more bytes are needed, or -1 with resp->error set. */
int http_parse_response_head(const char *buf, size_t len, struct http_response *resp);

/* The header lines of a parsed head (request or response) one at a time:
 * *pos starts at 0; returns false after the last. name/value point into buf. */
bool http_next_header(const char *buf, size_t head_len, size_t *pos, const char **name,
		      size_t *nlen, const char **value, size_t *vlen);

#endif
