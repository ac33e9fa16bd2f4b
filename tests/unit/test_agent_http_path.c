/* test_agent_http_path.c - the HTTP path from synthetic PAYLOAD / HTTP_CLOSE
 * records through the assembler: marks, phases that sum to e2e, the first
 * segment's arrival, non-streamed and cut-off exchanges, malformed records,
 * TLS connections (plaintext from TLS_PAYLOAD only, the unreadable counted);
 * outbound exchanges (SOCK, client role) and the rules that link them. */
#include "tests/unit/check.h"
#include "agent/track/assemble.h"
#include "agent/track/bus.h"
#include "agent/track/hop_link.h"

#define MAXREC 8
static struct kpi_request_record got[MAXREC];
static int n_got;

static void on_req(void *ctx, const struct kpi_request_record *r)
{
	(void)ctx;
	if (n_got < MAXREC)
		got[n_got++] = *r;
}

static struct kpi_request_record outs[MAXREC];
static int n_outs;

static void on_out(void *ctx, const struct kpi_request_record *r)
{
	(void)ctx;
	if (n_outs < MAXREC)
		outs[n_outs++] = *r;
}

static struct kpi_integration_record integ[MAXREC];
static int n_integ;

static void on_integ(void *ctx, const struct kpi_integration_record *r)
{
	(void)ctx;
	if (n_integ < MAXREC)
		integ[n_integ++] = *r;
}

/* The inbound rows the HTTP path holds until their inferred split is decided. */
static void settle(struct assembler *a)
{
	assemble_flush(a, UINT64_MAX, true);
}

/* A new assembler on a new bus (the last test's assembler is freed by now). */
static struct assembler *fresh(void)
{
	static struct bus *bus;
	struct kpi_sink s = { .request = on_req, .exchange_out = on_out, .integration = on_integ };

	bus_free(bus);
	bus = bus_new();
	struct assembler *a = assemble_new(bus);
	n_got = n_outs = n_integ = 0;
	bus_add(bus, &s);
	return a;
}

/* One PAYLOAD record of str on (42, fd) by thread tid in role, at its real size. */
static int feed_on(struct assembler *a, int fd, unsigned tid, unsigned role, int dir, uint64_t ts,
		   uint64_t t_seg, const char *str)
{
	struct kpi_ev_payload e = { .h = { .type = KPI_EV_PAYLOAD, .pid = 42, .ts = ts }, .fd = fd,
				    .tid = tid, .role = role };
	size_t n = strlen(str);

	e.dir = (unsigned)dir;
	e.moved = e.captured = (unsigned)n;
	e.t_seg = t_seg;
	e.srtt_us = t_seg ? 25 : 0;
	memcpy(e.data, str, n);
	return assemble_event(a, &e, KPI_EV_PAYLOAD_HEAD + n);
}

/* One PAYLOAD record of str on the served connection fd 7; t_seg for reads. */
static int feed(struct assembler *a, int dir, uint64_t ts, uint64_t t_seg, const char *str)
{
	return feed_on(a, 7, 0, KPI_ROLE_SERVED, dir, ts, t_seg, str);
}

/* A SOCK record for (42, fd): IPv4 127.0.0.1 both ends, or (mapped) a
 * dual-stack socket's IPv4-mapped IPv6 addresses. */
static void sock(struct assembler *a, int fd, unsigned role, unsigned lport, unsigned rport, bool mapped)
{
	struct kpi_ev_sock e = { .h = { .type = KPI_EV_SOCK, .pid = 42, .ts = 1 }, .fd = fd,
				 .role = role, .family = mapped ? 10 : 2, .lport = (unsigned short)lport,
				 .rport = (unsigned short)rport };
	const unsigned char v4[4] = { 127, 0, 0, 1 };
	int at = mapped ? 12 : 0;

	if (mapped)
		e.laddr[10] = e.laddr[11] = e.raddr[10] = e.raddr[11] = 0xff;
	memcpy(e.laddr + at, v4, 4);
	memcpy(e.raddr + at, v4, 4);
	assemble_event(a, &e, sizeof(e));
}

static void http_close(struct assembler *a, uint64_t ts, unsigned by)
{
	struct kpi_ev_http_close e = { .h = { .type = KPI_EV_HTTP_CLOSE, .pid = 42, .ts = ts },
				       .fd = 7, .by = by };
	assemble_event(a, &e, sizeof(e));
}

static int64_t phase_sum(const struct kpi_request_record *r)
{
	int64_t p[6] = { r->net_in, r->server_wait, r->decode, r->net_out, r->queue, r->prefill }, s = 0;
	for (int i = 0; i < 6; i++)
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
	CHECK(n_got == 0, "%d rows before the split is decided", n_got);
	settle(a);
	CHECK(n_got == 1, "%d rows", n_got);
	struct kpi_request_record *r = &got[0];
	CHECK(!strcmp(r->request_id, "s-1") && !strcmp(r->source, "http"), "%s", r->request_id);
	CHECK(r->t_arrive == 900 && r->arrive_src == KPI_ARRIVE_TCP && r->srtt_us == 25,
	      "arrive %lld", (long long)r->t_arrive);
	CHECK(r->t_req_read == 1000 && r->t_resp_start == 1100 && r->t_first_write == 1500 &&
	      r->t_done == 1900, "marks");
	/* nothing else in flight: the split is inferred (idle), the role-only
	 * chunk is no token, the first token is the first content */
	CHECK(r->split_rule && !strcmp(r->split_rule, "idle") && r->queue == 0 && r->prefill == 500 &&
	      r->t_sched == 1000 && r->t_first == 1500 && r->step_ns == 150, "split %s %lld %lld",
	      r->split_rule ? r->split_rule : "-", (long long)r->queue, (long long)r->prefill);
	CHECK(r->net_in == 100 && r->server_wait == KPI_NULL && r->decode == 300 && r->net_out == 100,
	      "%lld %lld %lld %lld", (long long)r->net_in, (long long)r->server_wait,
	      (long long)r->decode, (long long)r->net_out);
	CHECK(r->t_admit == KPI_NULL && r->t_last == KPI_NULL, "engine marks");
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
	settle(a);
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
	settle(a);
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
	settle(a);
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

/* One record as feed_bytes' with flags (KPI_PAYLOAD_F_*). */
static void feed_flagged(struct assembler *a, unsigned type, int dir, uint64_t ts, unsigned flags,
			 const void *data, size_t n)
{
	struct kpi_ev_payload e = { .h = { .type = type, .pid = 42, .ts = ts }, .fd = 7, .flags = flags };

	e.dir = (unsigned)dir;
	e.moved = e.captured = (unsigned)n;
	memcpy(e.data, data, n);
	assemble_event(a, &e, KPI_EV_PAYLOAD_HEAD + n);
}

/* A memory BIO's SSL_write (Node's: KPI_PAYLOAD_F_LATER) is timed at the
 * socket write that follows it, the one carrying its record; when TCP holds
 * that write back (F_UNSENT), at its HTTP_SENT. */
static void tls_memory_bio_write(void)
{
	static const uint8_t hello[] = { 0x16, 0x03, 0x01, 0x00, 0x20, 1, 2, 3 };
	static const uint8_t appdata[] = { 0x17, 0x03, 0x03, 0x00, 0x40, 1, 2, 3 };
	const char *req = "POST /v1/completions HTTP/1.1\r\nx-request-id: bio-%d\r\n"
			  "Content-Length: 2\r\n\r\n{}";
	const char *head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
			   "Transfer-Encoding: chunked\r\n\r\n";
	char ev[256], r[256];

	for (int unsent = 0; unsent < 2; unsent++) {
		struct assembler *a = fresh();
		uint64_t t = 10000;

		readable_answer = true;
		assemble_set_tls_query(a, readable, NULL);
		feed_bytes(a, KPI_EV_PAYLOAD, 7, KPI_PAYLOAD_IN, 1000, hello, sizeof(hello));
		snprintf(r, sizeof(r), req, unsent);
		feed_bytes(a, KPI_EV_TLS_PAYLOAD, 7, KPI_PAYLOAD_IN, 2000, r, strlen(r));
		feed_flagged(a, KPI_EV_TLS_PAYLOAD, KPI_PAYLOAD_OUT, 3000, KPI_PAYLOAD_F_LATER,
			     head, strlen(head));
		snprintf(ev, sizeof(ev), "%zx\r\n%s\r\n", strlen(EVENT("a")), EVENT("a"));
		feed_flagged(a, KPI_EV_TLS_PAYLOAD, KPI_PAYLOAD_OUT, 3100, KPI_PAYLOAD_F_LATER,
			     ev, strlen(ev));
		/* the ciphertext of both: 150 ns after the second call returned */
		feed_flagged(a, KPI_EV_PAYLOAD, KPI_PAYLOAD_OUT, 3250,
			     unsent ? KPI_PAYLOAD_F_UNSENT : 0, appdata, sizeof(appdata));
		if (unsent) {
			struct kpi_ev_http_sent s = { .h = { .type = KPI_EV_HTTP_SENT, .pid = 42,
							     .ts = 3400 }, .fd = 7 };
			assemble_event(a, &s, sizeof(s));
			t = 3400;
		} else {
			t = 3250;
		}
		feed_flagged(a, KPI_EV_TLS_PAYLOAD, KPI_PAYLOAD_OUT, 4000, KPI_PAYLOAD_F_LATER,
			     "0\r\n\r\n", 5);
		feed_flagged(a, KPI_EV_PAYLOAD, KPI_PAYLOAD_OUT, 4200, 0, appdata, sizeof(appdata));
		settle(a);
		CHECK(n_got == 1 && got[0].t_arrive == 2000 && got[0].t_first_write == (int64_t)t &&
		      got[0].t_done == 4200, "unsent %d: %d rows, arrive %lld first write %lld done %lld",
		      unsent, n_got, (long long)got[0].t_arrive, (long long)got[0].t_first_write,
		      (long long)got[0].t_done);
		assemble_free(a);
	}
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
	settle(a);
	CHECK(n_got == 1 && got[0].http_status == 204, "%d rows", n_got);
	assemble_free(a);
}

/* An inbound request on fd 7 (thread 100) whose server calls another on fd 9:
 * the call's request is written with id hdr ("" none) by thread call_tid. */
static void call_within(struct assembler *a, uint64_t t0, const char *id, const char *hdr,
			unsigned call_tid)
{
	char req[160], call[160];

	snprintf(req, sizeof(req), "GET /in HTTP/1.1\r\nx-request-id: %s\r\n\r\n", id);
	snprintf(call, sizeof(call), "GET /call HTTP/1.1\r\n%s%s%s\r\n", hdr[0] ? "x-request-id: " : "",
		 hdr, hdr[0] ? "\r\n" : "");
	feed_on(a, 7, 100, KPI_ROLE_SERVED, KPI_PAYLOAD_IN, t0, 0, req);
	feed_on(a, 9, call_tid, KPI_ROLE_CLIENT, KPI_PAYLOAD_OUT, t0 + 100, 0, call);
	feed_on(a, 9, call_tid, KPI_ROLE_CLIENT, KPI_PAYLOAD_IN, t0 + 400, 0,
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
	feed_on(a, 7, 100, KPI_ROLE_SERVED, KPI_PAYLOAD_OUT, t0 + 500, 0,
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
}

/* The call is an outbound record, linked by thread to the request being
 * served, both ends spelled alike (a mapped v6 address as v4). */
static void call_linked_by_thread(void)
{
	struct assembler *a = fresh();
	struct assemble_stats st;

	sock(a, 7, KPI_ROLE_SERVED, 8080, 50000, true);
	sock(a, 9, KPI_ROLE_CLIENT, 50001, 9000, false);
	call_within(a, 1000, "in-1", "", 100);
	settle(a);
	CHECK(n_got == 1 && n_outs == 1, "%d in, %d out", n_got, n_outs);
	struct kpi_request_record *in = &got[0], *out = &outs[0];
	CHECK(!strcmp(in->direction, "in") && !strcmp(in->hop_id, "42.1000") && in->tid == 100,
	      "in %s %s", in->direction, in->hop_id);
	CHECK(!strcmp(in->sock_local, "127.0.0.1:8080") && !strcmp(in->sock_peer, "127.0.0.1:50000"),
	      "%s %s", in->sock_local, in->sock_peer);
	CHECK(!strcmp(out->direction, "out") && !strcmp(out->hop_id, "42.1100") &&
	      !strcmp(out->parent_hop_id, "42.1000") && !strcmp(out->link_rule, "thread"),
	      "out %s parent %s rule %s", out->hop_id, out->parent_hop_id, out->link_rule);
	CHECK(!strcmp(out->sock_local, "127.0.0.1:50001") && !strcmp(out->sock_peer, "127.0.0.1:9000"),
	      "%s %s", out->sock_local, out->sock_peer);
	CHECK(out->t_arrive == 1100 && out->t_resp_start == 1400 && out->t_done == 1400 &&
	      out->http_status == 200 && !strcmp(out->path, "/call") && phase_sum(out) == out->e2e,
	      "out marks %lld %lld", (long long)out->t_arrive, (long long)out->t_done);
	CHECK(!strncmp(out->request_id, "out-42-", 7), "%s", out->request_id);
	assemble_stats(a, &st);
	CHECK(st.hops_out[HOP_RULE_THREAD] == 1 && st.hops_out[HOP_RULE_NONE] == 0, "stats");
	assemble_free(a);
}

/* A propagated id links first; with none, another thread's call while one
 * request is open links by the loop rule; with two open, by none. */
static void call_rules(void)
{
	struct assembler *a = fresh();
	struct assemble_stats st;

	call_within(a, 1000, "in-1", "in-1", 100);
	CHECK(n_outs == 1 && !strcmp(outs[0].link_rule, "header") &&
	      !strcmp(outs[0].request_id, "in-1"), "%s", outs[0].link_rule);
	call_within(a, 2000, "in-2", "", 200);
	CHECK(n_outs == 2 && !strcmp(outs[1].link_rule, "loop") &&
	      !strcmp(outs[1].parent_hop_id, "42.2000"), "%s", outs[1].link_rule);
	/* a second request open on fd 8 (thread 300): the call of thread 200 has no parent */
	feed_on(a, 8, 300, KPI_ROLE_SERVED, KPI_PAYLOAD_IN, 2900, 0, "GET /other HTTP/1.1\r\n\r\n");
	call_within(a, 3000, "in-3", "", 200);
	CHECK(n_outs == 3 && outs[2].link_rule == NULL && !outs[2].parent_hop_id[0], "%s",
	      outs[2].link_rule);
	assemble_stats(a, &st);
	CHECK(st.hops_out[HOP_RULE_NONE] == 1 && st.hops_ambiguous == 1, "unlinked %llu",
	      (unsigned long long)st.hops_out[HOP_RULE_NONE]);
	struct kpi_loss_record l = { 0 };
	assemble_losses(a, &l);
	CHECK(l.total[KPI_LOSS_HOPS_UNLINKED] == 1, "loss %llu",
	      (unsigned long long)l.total[KPI_LOSS_HOPS_UNLINKED]);
	assemble_free(a);
}

/* A gateway (fd 7 served, fd 9 its call) and the model server it calls
 * (fd 10, the call's other end): the top-level request's integration
 * overhead is its e2e minus the model's, sent whether the model's record
 * comes before the gateway's or after it. */
static void integration_overhead(void)
{
	for (int late = 0; late < 2; late++) {
		struct assembler *a = fresh();
		const char *body = "{\"prompt\":\"hi\"}";
		char call[160];

		sock(a, 7, KPI_ROLE_SERVED, 8080, 50000, false);
		sock(a, 9, KPI_ROLE_CLIENT, 50001, 9000, false);
		sock(a, 10, KPI_ROLE_SERVED, 9000, 50001, false);
		snprintf(call, sizeof(call), "POST /v1/completions HTTP/1.1\r\nContent-Length: %zu\r\n\r\n%s",
			 strlen(body), body);
		feed_on(a, 7, 100, KPI_ROLE_SERVED, KPI_PAYLOAD_IN, 1000, 0, "GET /in HTTP/1.1\r\n\r\n");
		feed_on(a, 9, 100, KPI_ROLE_CLIENT, KPI_PAYLOAD_OUT, 1200, 0, call);
		feed_on(a, 10, 300, KPI_ROLE_SERVED, KPI_PAYLOAD_IN, 1250, 0, call);
		if (!late)
			feed_on(a, 10, 300, KPI_ROLE_SERVED, KPI_PAYLOAD_OUT, 1750, 0,
				"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
		feed_on(a, 9, 100, KPI_ROLE_CLIENT, KPI_PAYLOAD_IN, 1800, 0,
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
		feed_on(a, 7, 100, KPI_ROLE_SERVED, KPI_PAYLOAD_OUT, 2000, 0,
			"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
		CHECK(n_integ == 0 || !late, "sent before the model's record");
		if (late)
			feed_on(a, 10, 300, KPI_ROLE_SERVED, KPI_PAYLOAD_OUT, 1750, 0,
				"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
		settle(a);
		CHECK(n_got == 2 && n_outs == 1 && n_integ == 1, "late %d: %d in, %d out, %d integration",
		      late, n_got, n_outs, n_integ);
		struct kpi_integration_record *r = &integ[0];
		CHECK(r->e2e == 1000 && r->model_e2e == 500 && r->overhead == 500 &&
		      r->before_model == 250 && r->after_model == 250 && r->pid == 42,
		      "late %d: e2e %lld model %lld before %lld after %lld", late, (long long)r->e2e,
		      (long long)r->model_e2e, (long long)r->before_model, (long long)r->after_model);
		assemble_free(a);
	}
}

int main(void)
{
	RUN(streamed_exchange);
	RUN(plain_error_then_keepalive);
	RUN(client_disconnect);
	RUN(malformed_payload);
	RUN(tls_connection);
	RUN(tls_unreadable);
	RUN(tls_memory_bio_write);
	RUN(call_linked_by_thread);
	RUN(call_rules);
	RUN(integration_overhead);
	return CHECK_DONE();
}
