/* test_agent_http_path.c - the HTTP path from synthetic PAYLOAD / HTTP_CLOSE
 * records through the assembler: marks, phases that sum to e2e, the first
 * segment's arrival, non-streamed and cut-off exchanges, malformed records,
 * TLS connections (plaintext from TLS_PAYLOAD only, the unreadable counted). */
#include "tests/unit/check.h"
#include "agent/assemble.h"

#define MAXREC 8
static struct kpi_request_record got[MAXREC];
static int n_got;

static void on_req(void *ctx, const struct kpi_request_record *r)
{
	(void)ctx;
	if (n_got < MAXREC)
		got[n_got++] = *r;
}

static struct assembler *fresh(void)
{
	struct assembler *a = assemble_new();
	struct kpi_sink s = { .request = on_req };

	n_got = 0;
	assemble_add_sink(a, &s);
	return a;
}

/* One PAYLOAD record of str, sent at its real size; t_seg for reads. */
static int feed(struct assembler *a, int dir, uint64_t ts, uint64_t t_seg, const char *str)
{
	struct kpi_ev_payload e = { .h = { .type = KPI_EV_PAYLOAD, .pid = 42, .ts = ts }, .fd = 7 };
	size_t n = strlen(str);

	e.dir = (unsigned)dir;
	e.moved = e.captured = (unsigned)n;
	e.t_seg = t_seg;
	e.srtt_us = t_seg ? 25 : 0;
	memcpy(e.data, str, n);
	return assemble_event(a, &e, KPI_EV_PAYLOAD_HEAD + n);
}

static void http_close(struct assembler *a, uint64_t ts, unsigned by)
{
	struct kpi_ev_http_close e = { .h = { .type = KPI_EV_HTTP_CLOSE, .pid = 42, .ts = ts },
				       .fd = 7, .by = by };
	assemble_event(a, &e, sizeof(e));
}

static int64_t phase_sum(const struct kpi_request_record *r)
{
	int64_t p[5] = { r->net_in, r->server_wait, r->decode, r->net_out, r->queue }, s = 0;
	for (int i = 0; i < 5; i++)
		if (p[i] != KPI_NULL)
			s += p[i];
	return s;
}

#define EVENT(text) "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" text "\"}}]}\n\n"

static char *chunk(const char *s)
{
	static char buf[512];
	snprintf(buf, sizeof(buf), "%zx\r\n%s\r\n", strlen(s), s);
	return buf;
}

static void streamed_exchange(void)
{
	struct assembler *a = fresh();
	const char *body = "{\"model\":\"m1\",\"stream\":true,\"max_tokens\":3}";
	char req[256];

	snprintf(req, sizeof(req), "POST /v1/chat/completions?key=secret HTTP/1.1\r\nHost: x\r\n"
		 "x-request-id: s-1\r\nContent-Length: %zu\r\n\r\n%s", strlen(body), body);
	feed(a, KPI_PAYLOAD_IN, 1000, 900, req);
	feed(a, KPI_PAYLOAD_OUT, 1100, 0, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
	     "Transfer-Encoding: chunked\r\n\r\n");
	feed(a, KPI_PAYLOAD_OUT, 1200, 0, chunk("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"));
	feed(a, KPI_PAYLOAD_OUT, 1500, 0, chunk(EVENT("a")));
	feed(a, KPI_PAYLOAD_OUT, 1600, 0, chunk(EVENT("b")));
	feed(a, KPI_PAYLOAD_OUT, 1800, 0, chunk(EVENT("c")));
	feed(a, KPI_PAYLOAD_OUT, 1850, 0, chunk("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\n"));
	feed(a, KPI_PAYLOAD_OUT, 1900, 0, "0\r\n\r\n");
	CHECK(n_got == 1, "%d rows", n_got);
	struct kpi_request_record *r = &got[0];
	CHECK(!strcmp(r->request_id, "s-1") && !strcmp(r->source, "http"), "%s", r->request_id);
	CHECK(r->t_arrive == 900 && r->arrive_src == KPI_ARRIVE_TCP && r->srtt_us == 25,
	      "arrive %lld", (long long)r->t_arrive);
	CHECK(r->t_req_read == 1000 && r->t_resp_start == 1100 && r->t_first_write == 1500 &&
	      r->t_done == 1900, "marks");
	CHECK(r->net_in == 100 && r->server_wait == 500 && r->decode == 300 && r->net_out == 100,
	      "%lld %lld %lld %lld", (long long)r->net_in, (long long)r->server_wait,
	      (long long)r->decode, (long long)r->net_out);
	CHECK(r->queue == KPI_NULL && r->prefill == KPI_NULL && r->t_admit == KPI_NULL, "engine marks");
	CHECK(r->e2e == 1000 && phase_sum(r) == r->e2e, "e2e %lld", (long long)r->e2e);
	CHECK(r->ttft == 600 && r->content_events == 3 && r->n_token_writes == 3, "ttft");
	CHECK(r->itl_max == 200 && r->itl_p50 == 150 && r->tpot == 150, "itl %lld %lld %lld",
	      (long long)r->itl_max, (long long)r->itl_p50, (long long)r->tpot);
	CHECK(r->prompt_tokens == 7 && r->output_tokens == 3 && r->http_status == 200, "counts");
	CHECK(!strcmp(r->path, "/v1/chat/completions") && !strcmp(r->method, "POST") &&
	      !strcmp(r->model, "m1") && r->stream == 1 && r->max_tokens == 3, "fields");
	CHECK(!strcmp(r->end_reason, "complete") && r->operation && !strcmp(r->operation, "chat"),
	      "%s", r->end_reason);
	assemble_free(a);
}

/* A 404 with Content-Length: time to first byte, no decode; then the
 * connection is reused by a request without an id. */
static void plain_error_then_keepalive(void)
{
	struct assembler *a = fresh();

	feed(a, KPI_PAYLOAD_IN, 1000, 0, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n");
	feed(a, KPI_PAYLOAD_OUT, 1300, 0, "HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n");
	feed(a, KPI_PAYLOAD_OUT, 1400, 0, "{}");
	feed(a, KPI_PAYLOAD_IN, 2000, 1990, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
	feed(a, KPI_PAYLOAD_OUT, 2100, 0, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
	CHECK(n_got == 2, "%d rows", n_got);
	struct kpi_request_record *r = &got[0];
	CHECK(r->http_status == 404 && r->ttft == 300 && r->decode == KPI_NULL &&
	      r->t_first_write == KPI_NULL && r->content_events == 0, "404 row");
	CHECK(r->arrive_src == KPI_ARRIVE_READ && r->t_arrive == 1000, "read arrival");
	CHECK(r->net_in == 0 && r->server_wait == 300 && r->net_out == 100 && phase_sum(r) == r->e2e,
	      "%lld %lld %lld", (long long)r->net_in, (long long)r->server_wait, (long long)r->net_out);
	CHECK(!strncmp(r->request_id, "http-42-", 8), "%s", r->request_id);
	CHECK(got[1].t_arrive == 1990 && strcmp(got[1].request_id, r->request_id), "second row");
	assemble_free(a);
}

/* The client goes away mid-stream: the row says so, phases still sum. */
static void client_disconnect(void)
{
	struct assembler *a = fresh();

	feed(a, KPI_PAYLOAD_IN, 1000, 0, "POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}");
	feed(a, KPI_PAYLOAD_OUT, 1100, 0, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
	     "Transfer-Encoding: chunked\r\n\r\n");
	feed(a, KPI_PAYLOAD_OUT, 1200, 0, chunk("data: {\"choices\":[{\"text\":\"x\"}]}\n\n"));
	http_close(a, 1500, KPI_CLOSE_BY_CLIENT);
	http_close(a, 1600, KPI_CLOSE_BY_SERVER);
	CHECK(n_got == 1 && !strcmp(got[0].end_reason, "client_closed"), "%d", n_got);
	CHECK(got[0].t_done == 1500 && phase_sum(&got[0]) == got[0].e2e && got[0].content_events == 1,
	      "done %lld", (long long)got[0].t_done);
	CHECK(got[0].operation && !strcmp(got[0].operation, "text_completion"), "op");
	assemble_free(a);
}

/* A record whose captured bytes do not fit its size is malformed, not read. */
static void malformed_payload(void)
{
	struct assembler *a = fresh();
	struct kpi_ev_payload e = { .h = { .type = KPI_EV_PAYLOAD, .pid = 42, .ts = 5 }, .fd = 7,
				    .moved = 100, .captured = 100 };
	struct assemble_stats st;

	CHECK(assemble_event(a, &e, KPI_EV_PAYLOAD_HEAD + 10) == -1, "short record accepted");
	e.captured = 200;
	CHECK(assemble_event(a, &e, sizeof(e)) == -1, "captured > moved accepted");
	assemble_stats(a, &st);
	CHECK(st.malformed == 2 && st.events == 0, "malformed %llu events %llu",
	      (unsigned long long)st.malformed, (unsigned long long)st.events);
	assemble_free(a);
}

/* One record of type (PAYLOAD or TLS_PAYLOAD) holding n bytes of data on fd. */
static void feed_bytes(struct assembler *a, unsigned type, int fd, int dir, uint64_t ts,
		       const void *data, size_t n)
{
	struct kpi_ev_payload e = { .h = { .type = type, .pid = 42, .ts = ts }, .fd = fd };

	e.dir = (unsigned)dir;
	e.moved = e.captured = (unsigned)n;
	memcpy(e.data, data, n);
	assemble_event(a, &e, KPI_EV_PAYLOAD_HEAD + n);
}

static bool readable_answer;
static int readable_asked;

static bool readable(void *ctx, uint32_t pid)
{
	(void)ctx;
	readable_asked += pid == 42;
	return readable_answer;
}

/* The ledger's tls_unreadable and http_unsynced. */
static void tls_losses(struct assembler *a, uint64_t *unreadable, uint64_t *unsynced)
{
	struct kpi_loss_record l = { 0 };

	assemble_losses(a, &l);
	*unreadable = l.total[KPI_LOSS_TLS_UNREADABLE];
	*unsynced = l.total[KPI_LOSS_HTTP_UNSYNCED];
}

/* A TLS connection: nginx's one-byte peek decides nothing, the ClientHello
 * makes it TLS, its ciphertext is never parsed, the plaintext records make
 * the row with their (syscall) times; an SSL call with no socket is counted. */
static void tls_connection(void)
{
	static const uint8_t hello[] = { 0x16, 0x03, 0x01, 0x00, 0x20, 1, 2, 3 };
	static const uint8_t appdata[] = { 0x17, 0x03, 0x03, 0x00, 0x40, 'G', 'E', 'T' };
	const char *req = "GET /v1/models HTTP/1.1\r\nx-request-id: tls-1\r\n\r\n";
	const char *resp = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
	struct assembler *a = fresh();
	uint64_t unreadable, unsynced;

	readable_answer = true;
	readable_asked = 0;
	assemble_set_tls_query(a, readable, NULL);
	feed_bytes(a, KPI_EV_PAYLOAD, 7, KPI_PAYLOAD_IN, 900, hello, 1);
	feed_bytes(a, KPI_EV_PAYLOAD, 7, KPI_PAYLOAD_IN, 1000, hello, sizeof(hello));
	feed_bytes(a, KPI_EV_PAYLOAD, 7, KPI_PAYLOAD_OUT, 1100, appdata, sizeof(appdata));
	feed_bytes(a, KPI_EV_TLS_PAYLOAD, 7, KPI_PAYLOAD_IN, 2000, req, strlen(req));
	feed_bytes(a, KPI_EV_PAYLOAD, 7, KPI_PAYLOAD_IN, 2050, appdata, sizeof(appdata));
	feed_bytes(a, KPI_EV_TLS_PAYLOAD, 7, KPI_PAYLOAD_OUT, 2400, resp, strlen(resp));
	feed_bytes(a, KPI_EV_TLS_PAYLOAD, KPI_TLS_FD_UNKNOWN, KPI_PAYLOAD_IN, 2500, req, strlen(req));
	CHECK(n_got == 1 && !strcmp(got[0].request_id, "tls-1") && got[0].http_status == 200,
	      "%d rows", n_got);
	CHECK(got[0].t_arrive == 2000 && got[0].t_done == 2400, "arrive %lld done %lld",
	      (long long)got[0].t_arrive, (long long)got[0].t_done);
	tls_losses(a, &unreadable, &unsynced);
	CHECK(readable_asked == 1 && unsynced == 0 && unreadable == 1, "asked %d unsynced %llu "
	      "unreadable %llu", readable_asked, (unsigned long long)unsynced,
	      (unsigned long long)unreadable);
	assemble_free(a);
}

/* A process whose libssl is not probed: its TLS connection is counted, and
 * its ciphertext is still not parsed; a plain connection beside it is. */
static void tls_unreadable(void)
{
	static const uint8_t hello[] = { 0x16, 0x03, 0x01, 0x00, 0x20, 1, 2, 3 };
	struct assembler *a = fresh();
	uint64_t unreadable, unsynced;

	readable_answer = false;
	assemble_set_tls_query(a, readable, NULL);
	feed_bytes(a, KPI_EV_PAYLOAD, 7, KPI_PAYLOAD_IN, 1000, hello, sizeof(hello));
	feed_bytes(a, KPI_EV_PAYLOAD, 7, KPI_PAYLOAD_OUT, 1100, hello, sizeof(hello));
	feed(a, KPI_PAYLOAD_IN, 2000, 0, "GET /a HTTP/1.1\r\n\r\n");  /* fd 7 still: TLS */
	http_close(a, 3000, KPI_CLOSE_BY_SERVER);
	feed(a, KPI_PAYLOAD_IN, 4000, 0, "GET /b HTTP/1.1\r\n\r\n");  /* a new connection */
	feed(a, KPI_PAYLOAD_OUT, 4100, 0, "HTTP/1.1 204 No Content\r\n\r\n");
	tls_losses(a, &unreadable, &unsynced);
	CHECK(unreadable == 1 && unsynced == 0, "unreadable %llu unsynced %llu",
	      (unsigned long long)unreadable, (unsigned long long)unsynced);
	CHECK(n_got == 1 && got[0].http_status == 204, "%d rows", n_got);
	assemble_free(a);
}

int main(void)
{
	RUN(streamed_exchange);
	RUN(plain_error_then_keepalive);
	RUN(client_disconnect);
	RUN(malformed_payload);
	RUN(tls_connection);
	RUN(tls_unreadable);
	return CHECK_DONE();
}
