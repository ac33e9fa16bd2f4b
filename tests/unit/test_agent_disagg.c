/* test_agent_disagg.c - a disaggregated request's three processes' events
 * through the assembler: the rows joined by x-request-id, the phases across
 * router, prefill and decode workers summing to e2e, the hops linked, a
 * router's TTFT from its relayed writes, rows held and given up. */
#include "tests/unit/check.h"
#include "agent/track/assemble.h"
#include "agent/track/bus.h"
#include "tests/unit/event_util.h"
#include "abi/kpi_kv_wire.h"
#include "abi/kpi_reasons.h"

#define MAXREC 16
#define ROUTER 10
#define DECODE 20
#define PREFILL 30
static struct kpi_request_record got[MAXREC];
static struct kpi_integration_record integ[MAXREC];
static int n_got, n_integ;

static void on_req(void *ctx, const struct kpi_request_record *r)
{
	if (n_got < MAXREC)
		got[n_got++] = *r;
}

static void on_integ(void *ctx, const struct kpi_integration_record *r)
{
	if (n_integ < MAXREC)
		integ[n_integ++] = *r;
}

static struct assembler *fresh(void)
{
	static struct bus *bus;
	struct kpi_sink s = { .request = on_req, .integration = on_integ };
	bus_free(bus);
	bus = bus_new();
	struct assembler *a = assemble_new(bus);
	bus_add(bus, &s);
	n_got = n_integ = 0;
	return a;
}

static void ev(struct assembler *a, unsigned pid, int type, uint64_t ts, uint64_t id, int fd, int x,
	       int y, const char *rid)
{
	union kpi_event e = mkev(pid, type, ts, id, fd, x, y, rid);
	if (type == KPI_EV_ADMIT)
		e.admit.operation = pid == PREFILL ? KPI_OP_KV_PREFILL : KPI_OP_TEXT_COMPLETION;
	assemble_ev(a, e);
}

static void route(struct assembler *a, uint64_t ts, uint64_t id, int fd, const char *rid,
		  const char *prefill)
{
	union kpi_event e = { .route = { .h = { KPI_EV_ROUTE, ROUTER, ts }, .id = id, .fd = fd,
					 .policy = KPI_ROUTE_ROUND_ROBIN } };
	snprintf(e.route.reqid, sizeof(e.route.reqid), "%s", rid);
	snprintf(e.route.decode, sizeof(e.route.decode), "127.0.0.1:8003");
	snprintf(e.route.prefill, sizeof(e.route.prefill), "%s", prefill);
	assemble_ev(a, e);
}

static void kv(struct assembler *a, unsigned pid, int type, uint64_t ts, uint64_t id, uint64_t bytes,
	       int status)
{
	union kpi_event e = { .h = { (unsigned)type, pid, ts } };
	if (type == KPI_EV_KV_SEND_START || type == KPI_EV_KV_RECV_START) {
		e.kv_start.id = id;
		e.kv_start.bytes = bytes;
		e.kv_start.fd = 11;
		e.kv_start.blocks = 1;
		snprintf(e.kv_start.peer, sizeof(e.kv_start.peer), "127.0.0.1:%d",
			 pid == DECODE ? 8001 : 40000);
	} else {
		e.kv_end = (struct kpi_ev_kv_end){ .h = e.h, .id = id, .bytes = bytes, .fd = 11,
						   .blocks = type == KPI_EV_KV_RECV_END ? 1 : -1,
						   .status = status };
	}
	assemble_ev(a, e);
}

static void slot_wait(struct assembler *a, uint64_t ts, uint64_t id, int ahead, int running, int max)
{
	union kpi_event e = { .slot_wait = { .h = { KPI_EV_SLOT_WAIT, DECODE, ts }, .id = id,
					     .waiting_ahead = ahead, .blocks_needed = 1,
					     .blocks_free = 10, .running = running,
					     .max_running = max } };
	assemble_ev(a, e);
}

static const struct kpi_request_record *row_of(unsigned pid)
{
	for (int i = 0; i < n_got; i++)
		if (got[i].pid == pid)
			return &got[i];
	return NULL;
}

static int64_t pd_sum(const struct kpi_request_record *r)
{
	int64_t p[8] = { r->net_in, r->router_ns, r->queue, r->prefill, r->kv_transfer_ns,
			 r->decode_queue_ns, r->decode, r->net_out }, s = 0;
	for (int i = 0; i < 8; i++)
		if (p[i] != KPI_NULL)
			s += p[i];
	return s;
}

/* The prefill worker's part: admitted, KV out while its prefill runs, the
 * first token, the stream's last byte (response__end before kv__send_end,
 * as kpi-infer fires them). */
static void prefill_side(struct assembler *a, const char *rid, uint64_t bytes)
{
	ev(a, PREFILL, KPI_EV_ARRIVE, 1400, 0, 9, KPI_ARRIVE_TCP, 0, NULL);
	ev(a, PREFILL, KPI_EV_ADMIT, 1500, 5, 9, 10, 1, rid);
	ev(a, PREFILL, KPI_EV_SCHED, 1600, 5, -1, 0, 0, NULL);
	kv(a, PREFILL, KPI_EV_KV_SEND_START, 2000, 5, bytes, 0);
	ev(a, PREFILL, KPI_EV_WRITE, 2050, 0, 9, 0, 0, NULL);
	ev(a, PREFILL, KPI_EV_FIRST, 3000, 5, -1, 0, 0, NULL);
	ev(a, PREFILL, KPI_EV_FINISH, 3010, 5, -1, 1, KPI_FINISH_LENGTH, NULL);
	ev(a, PREFILL, KPI_EV_WRITE, 3020, 0, 9, 0, 0, NULL);
	ev(a, PREFILL, KPI_EV_RESP_END, 3030, 5, 9, 200, 0, NULL);
	kv(a, PREFILL, KPI_EV_KV_SEND_END, 3031, 5, bytes, KPI_KV_OK);
}

/* The decode worker's arrival read before the router's decision (a segment
 * on a keep-alive connection whose read the agent did not see while it
 * attached): its KV fetch, after the decision, still ties its row to the
 * router's, which keeps its split. */
static void stale_decode_arrival_joined(void)
{
	struct assembler *a = fresh();
	uint64_t bytes = 4 * 10 * 2 * 128 * 2;

	ev(a, DECODE, KPI_EV_ARRIVE, 1050, 0, 7, KPI_ARRIVE_TCP, 0, NULL);
	ev(a, ROUTER, KPI_EV_ARRIVE, 1000, 0, 5, KPI_ARRIVE_TCP, 0, NULL);
	route(a, 1100, 1, 5, "pd-1", "127.0.0.1:8001");
	ev(a, DECODE, KPI_EV_ADMIT, 1300, 3, 7, 10, 3, "pd-1");
	prefill_side(a, "pd-1", bytes);
	kv(a, DECODE, KPI_EV_KV_RECV_START, 2100, 3, bytes, 0);
	kv(a, DECODE, KPI_EV_KV_RECV_END, 3100, 3, bytes, KPI_KV_OK);
	ev(a, DECODE, KPI_EV_SCHED, 3500, 3, -1, 0, 0, NULL);
	ev(a, DECODE, KPI_EV_FIRST, 3501, 3, -1, 0, 0, NULL);
	ev(a, DECODE, KPI_EV_WRITE, 3510, 0, 7, 0, 0, NULL);
	ev(a, ROUTER, KPI_EV_WRITE, 3520, 0, 5, 0, 0, NULL);
	ev(a, DECODE, KPI_EV_FINISH, 3650, 3, -1, 1, KPI_FINISH_LENGTH, NULL);
	ev(a, DECODE, KPI_EV_RESP_END, 3710, 3, 7, 200, 0, NULL);
	ev(a, ROUTER, KPI_EV_WRITE, 3720, 0, 5, 0, 0, NULL);
	ev(a, ROUTER, KPI_EV_RESP_END, 3730, 1, 5, 200, 0, NULL);
	CHECK(n_got == 3, "%d rows", n_got);

	const struct kpi_request_record *r = row_of(ROUTER), *d = row_of(DECODE);
	CHECK(r && d && r->pd_role && d->pd_role && !strcmp(d->pd_role, "decode"), "joined");
	CHECK(r && r->router_ns == 200 && r->kv_transfer_ns == 100 && r->decode_queue_ns == 400 &&
	      pd_sum(r) == r->e2e, "the router's split");
	CHECK(d && !strcmp(d->parent_hop_id, "10.1000"), "linked");
	assemble_free(a);
}

static void three_rows_joined(void)
{
	struct assembler *a = fresh();
	uint64_t bytes = 4 * 10 * 2 * 128 * 2;

	ev(a, ROUTER, KPI_EV_ARRIVE, 1000, 0, 5, KPI_ARRIVE_TCP, 0, NULL);
	route(a, 1100, 1, 5, "pd-1", "127.0.0.1:8001");
	ev(a, DECODE, KPI_EV_ARRIVE, 1200, 0, 7, KPI_ARRIVE_TCP, 0, NULL);
	ev(a, DECODE, KPI_EV_ADMIT, 1300, 3, 7, 10, 3, "pd-1");
	prefill_side(a, "pd-1", bytes);
	CHECK(n_got == 0, "the prefill worker's row waits for the decode worker's: %d rows", n_got);
	kv(a, DECODE, KPI_EV_KV_RECV_START, 2100, 3, bytes, 0);
	kv(a, DECODE, KPI_EV_KV_RECV_END, 3100, 3, bytes, KPI_KV_OK);
	slot_wait(a, 3110, 3, 0, 1, 1);
	ev(a, DECODE, KPI_EV_SCHED, 3500, 3, -1, 0, 0, NULL);
	ev(a, DECODE, KPI_EV_FIRST, 3501, 3, -1, 0, 0, NULL);
	ev(a, DECODE, KPI_EV_WRITE, 3510, 0, 7, 0, 0, NULL);
	ev(a, ROUTER, KPI_EV_WRITE, 3520, 0, 5, 0, 0, NULL);
	ev(a, DECODE, KPI_EV_WRITE, 3600, 0, 7, 0, 0, NULL);
	ev(a, ROUTER, KPI_EV_WRITE, 3610, 0, 5, 0, 0, NULL);
	ev(a, DECODE, KPI_EV_FINISH, 3650, 3, -1, 3, KPI_FINISH_LENGTH, NULL);
	ev(a, DECODE, KPI_EV_WRITE, 3700, 0, 7, 0, 0, NULL);
	ev(a, DECODE, KPI_EV_RESP_END, 3710, 3, 7, 200, 0, NULL);
	CHECK(n_got == 0, "the decode worker's row waits for the router's: %d rows", n_got);
	ev(a, ROUTER, KPI_EV_WRITE, 3720, 0, 5, 0, 0, NULL);
	ev(a, ROUTER, KPI_EV_RESP_END, 3730, 1, 5, 200, 0, NULL);
	CHECK(n_got == 3, "%d rows", n_got);

	const struct kpi_request_record *r = row_of(ROUTER), *d = row_of(DECODE), *p = row_of(PREFILL);
	CHECK(r && d && p, "a row from each process");
	CHECK(!strcmp(r->pd_role, "router") && !strcmp(d->pd_role, "decode") && !strcmp(p->pd_role, "prefill"),
	      "roles %s %s %s", r->pd_role, d->pd_role, p->pd_role);
	CHECK(r->net_in == 100 && r->router_ns == 200 && r->queue == 300 && r->prefill == 1400 &&
	      r->kv_transfer_ns == 100 && r->decode_queue_ns == 400 && r->decode == 150 && r->net_out == 70,
	      "%lld %lld %lld %lld %lld %lld %lld %lld", (long long)r->net_in, (long long)r->router_ns,
	      (long long)r->queue, (long long)r->prefill, (long long)r->kv_transfer_ns,
	      (long long)r->decode_queue_ns, (long long)r->decode, (long long)r->net_out);
	CHECK(r->e2e == 2720 && pd_sum(r) == r->e2e, "e2e %lld", (long long)r->e2e);
	CHECK(r->t_admit == 1100 && r->t_pd_admit == 1300 && r->t_sched == 1600 && r->t_first == 3000 &&
	      r->t_kv_end == 3100 && r->t_pd_sched == 3500 && r->t_last == 3650 && r->t_done == 3720,
	      "router marks");
	CHECK(r->ttft == 2520 && r->t_first_write == 3520, "ttft %lld", (long long)r->ttft);
	CHECK(r->tpot == 100, "tpot %lld", (long long)r->tpot);
	CHECK(r->prompt_tokens == 10 && r->output_tokens == 3 && !strcmp(r->finish_reason, "length"),
	      "the decode worker's counts on the router's row");
	/* the whole transfer: the prefill worker's first byte out to the last in */
	CHECK(r->kv_bytes == (int64_t)bytes && !strcmp(r->kv_status, "ok") && r->kv_stream_ns == 1100 &&
	      r->t_kv_start == 2000 && !strcmp(r->kv_peer, "127.0.0.1:8001"), "kv %lld %lld",
	      (long long)r->kv_bytes, (long long)r->kv_stream_ns);
	CHECK(d->kv_stream_ns == 1100 && d->t_kv_start == 2000 && d->t_kv_end == 3100, "decode's transfer");
	CHECK(!strcmp(r->slot_wait, "slots") && r->slot_waiting_ahead == 0, "%s", r->slot_wait);
	CHECK(!strcmp(r->route_policy, "round-robin") && !strcmp(r->decode_worker, "127.0.0.1:8003") &&
	      !strcmp(r->prefill_worker, "127.0.0.1:8001"), "decision");

	CHECK(d->net_in == 100 && d->router_ns == KPI_NULL && d->queue == 300 && d->prefill == 1400 &&
	      d->kv_transfer_ns == 100 && d->decode_queue_ns == 400 && d->decode == 150 && d->net_out == 50,
	      "decode phases");
	CHECK(d->e2e == 2500 && pd_sum(d) == d->e2e, "decode e2e %lld", (long long)d->e2e);
	CHECK(!strcmp(d->parent_hop_id, "10.1000") && !strcmp(d->link_rule, "header"), "%s",
	      d->parent_hop_id);
	CHECK(!strcmp(p->parent_hop_id, "20.1200") && !strcmp(p->link_rule, "header"), "%s",
	      p->parent_hop_id);
	CHECK(r->parent_hop_id[0] == 0 && r->link_rule == NULL, "the router's row is the trace's root");
	CHECK(p->kv_bytes == (int64_t)bytes && p->kv_stream_ns == 1031 && p->t_kv_start == 2000 &&
	      p->t_kv_end == 3031 && !strcmp(p->kv_status, "ok"), "prefill kv %lld", (long long)p->kv_stream_ns);
	CHECK(p->queue == 100 && p->prefill == 1400, "the prefill worker keeps its own phases");
	CHECK(n_integ == 1 && integ[0].pid == ROUTER && integ[0].e2e == 2720 &&
	      integ[0].model_e2e == 2500 && integ[0].overhead == 220, "%d", n_integ);
	struct assemble_stats st;
	assemble_stats(a, &st);
	CHECK(st.pd_joined == 1 && st.pd_partial == 0, "%llu %llu", (unsigned long long)st.pd_joined,
	      (unsigned long long)st.pd_partial);
	assemble_free(a);
}

/* No prefill worker named: the decode worker prefills, its own queue and
 * prefill are the request's; the transfer and slot wait are NULL. */
static void local_prefill_routed(void)
{
	struct assembler *a = fresh();

	ev(a, ROUTER, KPI_EV_ARRIVE, 1000, 0, 5, KPI_ARRIVE_TCP, 0, NULL);
	route(a, 1100, 1, 5, "pd-2", "");
	ev(a, DECODE, KPI_EV_ARRIVE, 1200, 0, 7, KPI_ARRIVE_TCP, 0, NULL);
	ev(a, DECODE, KPI_EV_ADMIT, 1300, 3, 7, 10, 2, "pd-2");
	ev(a, DECODE, KPI_EV_SCHED, 1400, 3, -1, 0, 0, NULL);
	ev(a, DECODE, KPI_EV_FIRST, 2000, 3, -1, 0, 0, NULL);
	ev(a, DECODE, KPI_EV_WRITE, 2010, 0, 7, 0, 0, NULL);
	ev(a, DECODE, KPI_EV_FINISH, 2100, 3, -1, 2, KPI_FINISH_LENGTH, NULL);
	ev(a, DECODE, KPI_EV_WRITE, 2110, 0, 7, 0, 0, NULL);
	ev(a, DECODE, KPI_EV_RESP_END, 2120, 3, 7, 200, 0, NULL);
	ev(a, ROUTER, KPI_EV_WRITE, 2020, 0, 5, 0, 0, NULL);
	ev(a, ROUTER, KPI_EV_WRITE, 2130, 0, 5, 0, 0, NULL);
	ev(a, ROUTER, KPI_EV_RESP_END, 2140, 1, 5, 200, 0, NULL);
	CHECK(n_got == 2, "%d rows", n_got);
	const struct kpi_request_record *r = row_of(ROUTER);
	CHECK(r->net_in == 100 && r->router_ns == 200 && r->queue == 100 && r->prefill == 600 &&
	      r->kv_transfer_ns == KPI_NULL && r->decode_queue_ns == KPI_NULL && r->decode == 100 &&
	      r->net_out == 30, "phases");
	CHECK(r->e2e == 1130 && pd_sum(r) == r->e2e && r->ttft == 1020, "e2e %lld ttft %lld",
	      (long long)r->e2e, (long long)r->ttft);
	CHECK(r->kv_bytes == KPI_NULL && r->slot_wait == NULL, "no transfer");
	CHECK(!strcmp(row_of(DECODE)->pd_role, "decode"), "a routed id makes the decode worker's row one");
	assemble_free(a);
}

/* Rows that never get their partners go after the wait, as they are. */
static void partial_rows_given_up(void)
{
	struct assembler *a = fresh();

	ev(a, ROUTER, KPI_EV_ARRIVE, 1000, 0, 5, KPI_ARRIVE_TCP, 0, NULL);
	route(a, 1100, 1, 5, "pd-3", "127.0.0.1:8001");
	ev(a, ROUTER, KPI_EV_WRITE, 1500, 0, 5, 0, 0, NULL);
	ev(a, ROUTER, KPI_EV_RESP_END, 1510, 1, 5, 200, 0, NULL);
	CHECK(n_got == 0, "held");
	assemble_sample(a, 1500 + 1000000000ull, NULL, NULL, 0, 0);
	CHECK(n_got == 0, "still within the wait");
	assemble_sample(a, 1500 + 2000000001ull, NULL, NULL, 0, 0);
	CHECK(n_got == 1, "given up after the wait: %d", n_got);
	const struct kpi_request_record *r = &got[0];
	/* what the router's own marks tell: net-in, then the decision closed by its end */
	CHECK(r->net_in == 100 && r->router_ns == 400 && r->queue == KPI_NULL && r->e2e == 500 &&
	      r->net_out == KPI_NULL && pd_sum(r) == r->e2e, "%lld %lld", (long long)r->net_in,
	      (long long)r->router_ns);
	CHECK(r->ttft == KPI_NULL && r->prompt_tokens == KPI_NULL, "no worker told them");
	struct assemble_stats st;
	assemble_stats(a, &st);
	CHECK(st.pd_partial == 1 && st.pd_joined == 0, "partial");
	/* a prefill worker's row no traced decode worker asked for goes at once */
	prefill_side(a, "nobody-asked", 4096);
	CHECK(n_got == 2 && got[1].pid == PREFILL && got[1].parent_hop_id[0] == 0, "%d", n_got);
	assemble_free(a);
}

/* A decode worker's transfer fails: its one request answers 502 with the
 * check that failed, one row (not an admitted one and a rejected one). */
static void failed_transfer_one_row(void)
{
	struct assembler *a = fresh();

	ev(a, DECODE, KPI_EV_ARRIVE, 1200, 0, 7, KPI_ARRIVE_TCP, 0, NULL);
	ev(a, DECODE, KPI_EV_ADMIT, 1300, 3, 7, 10, 3, "pd-4");
	kv(a, DECODE, KPI_EV_KV_RECV_START, 2100, 3, 4096, 0);
	kv(a, DECODE, KPI_EV_KV_RECV_END, 2200, 3, 100, KPI_KV_ERR_MODEL);
	ev(a, DECODE, KPI_EV_REJECT, 2210, 0, 7, 502, KPI_REJECT_KV_TRANSFER, "pd-4");
	ev(a, DECODE, KPI_EV_WRITE, 2220, 0, 7, 0, 0, NULL);
	ev(a, DECODE, KPI_EV_RESP_END, 2230, 0, 7, 502, 0, NULL);
	assemble_release_held(a);
	CHECK(n_got == 1, "%d rows", n_got);
	const struct kpi_request_record *d = &got[0];
	CHECK(d->http_status == 502 && !strcmp(d->reject_reason, "kv_transfer") &&
	      !strcmp(d->kv_status, "model") && d->kv_bytes == 100 && d->prompt_tokens == 10,
	      "%lld %s", (long long)d->http_status, d->kv_status);
	CHECK(d->t_admit == 1300 && d->net_in == 100 && d->net_out == 920 && d->e2e == 1020,
	      "net-in to the admission, then the error out: %lld %lld", (long long)d->net_in,
	      (long long)d->net_out);
	assemble_free(a);
}

/* Two requests with one x-request-id at once: each worker row goes to the
 * request whose decision it followed and whose worker it is. */
static void repeated_id_kept_apart(void)
{
	struct assembler *a = fresh();

	ev(a, ROUTER, KPI_EV_ARRIVE, 1000, 0, 5, KPI_ARRIVE_TCP, 0, NULL);
	route(a, 1100, 1, 5, "same", "");
	ev(a, ROUTER, KPI_EV_ARRIVE, 1050, 0, 6, KPI_ARRIVE_TCP, 0, NULL);
	route(a, 1150, 2, 6, "same", "");
	for (int k = 0; k < 2; k++) {
		uint64_t t = 1200 + 1000 * (uint64_t)k;
		ev(a, DECODE, KPI_EV_ARRIVE, t, 0, 7 + k, KPI_ARRIVE_TCP, 0, NULL);
		ev(a, DECODE, KPI_EV_ADMIT, t + 100, 3 + k, 7 + k, 10, 1, "same");
		ev(a, DECODE, KPI_EV_SCHED, t + 200, 3 + k, -1, 0, 0, NULL);
		ev(a, DECODE, KPI_EV_FIRST, t + 300, 3 + k, -1, 0, 0, NULL);
		ev(a, DECODE, KPI_EV_FINISH, t + 300, 3 + k, -1, 1, KPI_FINISH_LENGTH, NULL);
		ev(a, DECODE, KPI_EV_WRITE, t + 310, 0, 7 + k, 0, 0, NULL);
		ev(a, DECODE, KPI_EV_RESP_END, t + 320, 3 + k, 7 + k, 200, 0, NULL);
	}
	ev(a, ROUTER, KPI_EV_WRITE, 1520, 0, 5, 0, 0, NULL);
	ev(a, ROUTER, KPI_EV_RESP_END, 1530, 1, 5, 200, 0, NULL);
	ev(a, ROUTER, KPI_EV_WRITE, 2520, 0, 6, 0, 0, NULL);
	ev(a, ROUTER, KPI_EV_RESP_END, 2530, 2, 6, 200, 0, NULL);
	CHECK(n_got == 4, "%d rows", n_got);
	for (int i = 0; i < n_got; i++)
		if (got[i].pid == DECODE)
			CHECK(!strcmp(got[i].parent_hop_id, got[i].t_arrive == 1200 ? "10.1000" : "10.1050"),
			      "decode row at %lld under %s", (long long)got[i].t_arrive, got[i].parent_hop_id);
		else
			CHECK(got[i].ttft == (got[i].t_arrive == 1000 ? 520 : 1470) && pd_sum(&got[i]) == got[i].e2e,
			      "router row at %lld: ttft %lld", (long long)got[i].t_arrive, (long long)got[i].ttft);
	assemble_free(a);
}

int main(void)
{
	RUN(three_rows_joined);
	RUN(stale_decode_arrival_joined);
	RUN(local_prefill_routed);
	RUN(partial_rows_given_up);
	RUN(failed_transfer_one_row);
	RUN(repeated_id_kept_apart);
	return CHECK_DONE();
}
