/* test_agent_assemble.c - request assembly from synthetic BPF events: phase
 * arithmetic, rejected and cancelled requests, keep-alive, in-flight states. */
#include <math.h>
#include "tests/unit/check.h"
#include "agent/track/assemble.h"
#include "agent/track/bus.h"
#include "tests/unit/event_util.h"
#include "abi/kpi_reasons.h"

#define MAXREC 16
static struct kpi_request_record got[MAXREC];
static uint64_t got_tok[MAXREC][64];
static int n_got, n_steps, n_samples;
static struct kpi_sample_record last_sample;
static int admit_op;    /* operation argument of the next KPI_EV_ADMIT (enum kpi_operation) */

static void on_req(void *ctx, const struct kpi_request_record *r)
{
	if (n_got < MAXREC) {
		got[n_got] = *r;
		for (size_t i = 0; i < r->n_token_writes && i < 64; i++)
			got_tok[n_got][i] = r->token_writes[i];
		n_got++;
	}
}
static void on_step(void *ctx, const struct kpi_step_record *s) { n_steps++; }
static void on_sample(void *ctx, const struct kpi_sample_record *s) { n_samples++; last_sample = *s; }

/* A new assembler on a new bus (the last test's assembler is freed by now). */
static struct assembler *fresh(void)
{
	static struct bus *bus;
	struct kpi_sink s = { .request = on_req, .step = on_step, .sample = on_sample };
	bus_free(bus);
	bus = bus_new();
	struct assembler *a = assemble_new(bus);
	n_got = n_steps = n_samples = 0;
	admit_op = KPI_OP_CHAT;
	bus_add(bus, &s);
	return a;
}

static void ev(struct assembler *a, int type, uint64_t ts, uint64_t id, int fd, int x, int y,
	       const char *rid)
{
	union kpi_event e = mkev(42, type, ts, id, fd, x, y, rid);
	if (type == KPI_EV_ARRIVE) {
		e.arrive.t_read = ts + 5;
		e.arrive.srtt_us = 30;
		e.arrive.runq_ns = 1000;
	}
	if (type == KPI_EV_RESP_END)
		e.resp_end.runq_ns = 4000;
	if (type == KPI_EV_ADMIT)
		e.admit.operation = admit_op;
	assemble_ev(a, e);
}

static void runq_by(struct assembler *a, uint32_t other, const char *comm, uint64_t ns)
{
	union kpi_event e = mkev(42, KPI_EV_RUNQ_BY, 1, 0, -1, (int)other, 0, comm);
	e.runq_by.wait_ns = ns;
	assemble_ev(a, e);
}

static int64_t phase_sum(const struct kpi_request_record *r)
{
	int64_t p[5] = { r->net_in, r->queue, r->prefill, r->decode, r->net_out }, s = 0;
	for (int i = 0; i < 5; i++)
		if (p[i] != KPI_NULL)
			s += p[i];
	return s;
}

/* A streamed request: headers written before the first token, then one
 * write per token, then the final write. */
static void streamed_request_phases(void)
{
	struct assembler *a = fresh();
	ev(a, KPI_EV_ARRIVE, 1000, 0, 7, KPI_ARRIVE_TCP, 0, NULL);
	ev(a, KPI_EV_ADMIT, 1100, 9, 7, 12, 4, "req-a");
	ev(a, KPI_EV_SCHED, 1300, 9, -1, 0, 0, NULL);
	ev(a, KPI_EV_FIRST, 2000, 9, -1, 0, 0, NULL);
	ev(a, KPI_EV_WRITE, 1990, 0, 7, 0, 0, NULL);  /* a 100-continue before the token */
	ev(a, KPI_EV_WRITE, 2010, 0, 7, 0, 0, NULL);
	ev(a, KPI_EV_WRITE, 2110, 0, 7, 0, 0, NULL);
	ev(a, KPI_EV_WRITE, 2200, 0, 7, 0, 0, NULL);
	ev(a, KPI_EV_FINISH, 2290, 9, -1, 4, 2, NULL);
	ev(a, KPI_EV_WRITE, 2300, 0, 7, 0, 0, NULL);
	ev(a, KPI_EV_WRITE, 2320, 0, 7, 0, 0, NULL);
	ev(a, KPI_EV_RESP_END, 2330, 9, 7, 200, 0, NULL);
	CHECK(n_got == 1, "got %d records", n_got);
	struct kpi_request_record *r = &got[0];
	CHECK(!strcmp(r->request_id, "req-a"), "%s", r->request_id);
	CHECK(r->t_first_write == 2010, "%lld", (long long)r->t_first_write);
	CHECK(r->t_done == 2320, "%lld", (long long)r->t_done);
	CHECK(r->net_in == 100 && r->queue == 200 && r->prefill == 700 && r->decode == 290 &&
	      r->net_out == 30, "%lld %lld %lld %lld %lld", (long long)r->net_in, (long long)r->queue,
	      (long long)r->prefill, (long long)r->decode, (long long)r->net_out);
	CHECK(r->e2e == 1320 && phase_sum(r) == r->e2e, "e2e %lld", (long long)r->e2e);
	CHECK(r->ttft == 1010, "%lld", (long long)r->ttft);
	CHECK(r->tpot == (2320 - 2010) / 3, "%lld", (long long)r->tpot);
	CHECK(r->n_token_writes == 5 && got_tok[0][0] == 2010, "%zu", r->n_token_writes);
	CHECK(r->itl_max == 100 && r->itl_p50 == 95, "%lld %lld", (long long)r->itl_max, (long long)r->itl_p50);
	CHECK(r->output_tokens == 4 && r->prompt_tokens == 12 && r->http_status == 200, "counts");
	CHECK(!strcmp(r->finish_reason, "length"), "%s", r->finish_reason);
	CHECK(r->operation && !strcmp(r->operation, "chat"), "%s", r->operation ? r->operation : "NULL");
	CHECK(r->srtt_us == 30 && r->runq_ns == 3000, "srtt %lld runq %lld", (long long)r->srtt_us,
	      (long long)r->runq_ns);
	assemble_free(a);
}

static void rejected_request_row(void)
{
	struct assembler *a = fresh();
	ev(a, KPI_EV_ARRIVE, 100, 0, 5, KPI_ARRIVE_READ, 0, NULL);
	ev(a, KPI_EV_REJECT, 150, 0, 5, 429, 1, "busy-1");
	ev(a, KPI_EV_WRITE, 170, 0, 5, 0, 0, NULL);
	ev(a, KPI_EV_RESP_END, 171, 0, 5, 429, 0, NULL);
	CHECK(n_got == 1, "%d", n_got);
	struct kpi_request_record *r = &got[0];
	CHECK(r->http_status == 429 && !strcmp(r->reject_reason, "queue_full"), "%lld %s",
	      (long long)r->http_status, r->reject_reason);
	CHECK(r->net_in == 50 && r->net_out == 20 && r->queue == KPI_NULL && r->prefill == KPI_NULL &&
	      r->decode == KPI_NULL, "phases");
	CHECK(r->e2e == 70 && phase_sum(r) == 70, "%lld", (long long)r->e2e);
	CHECK(r->ttft == KPI_NULL && r->output_tokens == KPI_NULL, "no ttft for a rejection");
	CHECK(r->operation == NULL, "never admitted: no operation, got %s", r->operation);
	assemble_free(a);
}

/* Requests that reached a target before its USDT probes were attached are
 * counted (issue 19); one whose engine marks came in after all still gets
 * its row. */
static void arrivals_before_attach_counted(void)
{
	struct assembler *a = fresh();
	struct assemble_stats st;
	union kpi_event e = mkev(42, KPI_EV_ARRIVE, 100, 0, 5, KPI_ARRIVE_TCP, 0, NULL);

	e.arrive.flags = KPI_ARRIVE_BEFORE_ATTACH;
	assemble_ev(a, e);
	ev(a, KPI_EV_ADMIT, 150, 3, 5, 4, 2, "early");
	ev(a, KPI_EV_WRITE, 170, 0, 5, 0, 0, NULL);
	ev(a, KPI_EV_RESP_END, 171, 3, 5, 200, 0, NULL);
	ev(a, KPI_EV_ARRIVE, 200, 0, 6, KPI_ARRIVE_TCP, 0, NULL);
	assemble_stats(a, &st);
	CHECK(st.before_attach == 1, "%llu", (unsigned long long)st.before_attach);
	CHECK(n_got == 1 && !strcmp(got[0].request_id, "early"), "%d", n_got);
	assemble_free(a);
}

/* Keep-alive: the second request on the same fd starts at its own arrival. */
static void keepalive_two_requests(void)
{
	struct assembler *a = fresh();
	for (int k = 0; k < 2; k++) {
		uint64_t b = 10000 * (uint64_t)(k + 1);
		char rid[16];
		snprintf(rid, sizeof(rid), "ka-%d", k);
		admit_op = k ? KPI_OP_CHAT : KPI_OP_TEXT_COMPLETION;
		ev(a, KPI_EV_ARRIVE, b, 0, 3, KPI_ARRIVE_TCP, 0, NULL);
		ev(a, KPI_EV_ADMIT, b + 10, 100 + k, 3, 5, 1, rid);
		ev(a, KPI_EV_SCHED, b + 20, 100 + k, -1, 0, 0, NULL);
		ev(a, KPI_EV_FIRST, b + 30, 100 + k, -1, 0, 0, NULL);
		ev(a, KPI_EV_FINISH, b + 30, 100 + k, -1, 1, 1, NULL);
		ev(a, KPI_EV_WRITE, b + 40, 0, 3, 0, 0, NULL);
		ev(a, KPI_EV_RESP_END, b + 41, 100 + k, 3, 200, 0, NULL);
	}
	CHECK(n_got == 2, "%d", n_got);
	CHECK(got[1].t_arrive == 20000 && got[1].e2e == 40 && got[1].ttft == 40, "%lld %lld",
	      (long long)got[1].t_arrive, (long long)got[1].e2e);
	CHECK(got[1].tpot == KPI_NULL, "one token: no tpot");
	CHECK(got[0].operation && !strcmp(got[0].operation, "text_completion") &&
	      got[1].operation && !strcmp(got[1].operation, "chat"), "operation per request: %s %s",
	      got[0].operation ? got[0].operation : "NULL", got[1].operation ? got[1].operation : "NULL");
	assemble_free(a);
}

/* Marks a few ns out of order (two CPUs) are clamped: no negative phase. */
static void out_of_order_marks_clamped(void)
{
	struct assembler *a = fresh();
	admit_op = 99;          /* an operation this agent does not know: none */
	ev(a, KPI_EV_ARRIVE, 500, 0, 4, KPI_ARRIVE_TCP, 0, NULL);
	ev(a, KPI_EV_ADMIT, 600, 1, 4, 5, 3, "ooo");
	ev(a, KPI_EV_SCHED, 590, 1, -1, 0, 0, NULL);
	ev(a, KPI_EV_FIRST, 700, 1, -1, 0, 0, NULL);
	ev(a, KPI_EV_FINISH, 800, 1, -1, 3, 1, NULL);
	ev(a, KPI_EV_WRITE, 795, 0, 4, 0, 0, NULL);
	ev(a, KPI_EV_RESP_END, 796, 1, 4, 200, 0, NULL);
	CHECK(n_got == 1, "%d", n_got);
	struct kpi_request_record *r = &got[0];
	CHECK(r->queue == 0 && r->net_out == 0, "queue %lld net_out %lld", (long long)r->queue,
	      (long long)r->net_out);
	CHECK(phase_sum(r) == r->e2e && r->e2e == 300, "%lld", (long long)r->e2e);
	CHECK(r->operation == NULL, "unknown operation 99 gave %s", r->operation);
	struct assemble_stats st;
	assemble_stats(a, &st);
	CHECK(st.clamped == 1, "%llu", (unsigned long long)st.clamped);
	assemble_free(a);
}

/* The client leaves while queued: the row comes when the engine lets go. */
static void cancelled_after_close(void)
{
	struct assembler *a = fresh();
	ev(a, KPI_EV_ARRIVE, 100, 0, 9, KPI_ARRIVE_TCP, 0, NULL);
	ev(a, KPI_EV_ADMIT, 110, 77, 9, 5, 30, "gone");
	ev(a, KPI_EV_CLOSE, 200, 0, 9, 0, 0, NULL);
	CHECK(n_got == 0, "not yet: the engine still holds it");
	ev(a, KPI_EV_CANCEL, 201, 77, -1, 0, 0, NULL);
	ev(a, KPI_EV_FINISH, 210, 77, -1, 0, 3, NULL);
	CHECK(n_got == 1, "%d", n_got);
	struct kpi_request_record *r = &got[0];
	CHECK(!strcmp(r->finish_reason, "cancelled"), "%s", r->finish_reason);
	CHECK(r->queue == 100 && r->prefill == KPI_NULL && r->decode == KPI_NULL, "queue %lld",
	      (long long)r->queue);
	CHECK(phase_sum(r) == r->e2e, "sum");
	assemble_free(a);
}

/* Losses the assembler counts: a request known only from events after its
 * admission (a dropped ADMIT) is one orphan however many events name it; a
 * finish that arrives after its request completed is late, not an orphan; a
 * record cut short is malformed and not read. */
static void orphans_and_malformed(void)
{
	struct assembler *a = fresh();
	struct assemble_stats st;
	struct kpi_loss_record l = { .t = 1 };

	/* request 5: complete, then a late second finish */
	ev(a, KPI_EV_ARRIVE, 100, 0, 3, KPI_ARRIVE_TCP, 0, NULL);
	ev(a, KPI_EV_ADMIT, 110, 5, 3, 4, 4, "whole");
	ev(a, KPI_EV_FINISH, 150, 5, -1, 1, 1, NULL);
	ev(a, KPI_EV_RESP_END, 160, 5, 3, 200, 0, NULL);
	ev(a, KPI_EV_FINISH, 161, 5, -1, 1, 1, NULL);
	/* request 6: its ADMIT was dropped; four events name it */
	ev(a, KPI_EV_ARRIVE, 200, 0, 4, KPI_ARRIVE_TCP, 0, NULL);
	ev(a, KPI_EV_SCHED, 210, 6, -1, 0, 0, NULL);
	ev(a, KPI_EV_FIRST, 220, 6, -1, 0, 0, NULL);
	ev(a, KPI_EV_FINISH, 230, 6, -1, 2, 1, NULL);
	ev(a, KPI_EV_RESP_END, 240, 6, 4, 200, 0, NULL);
	CHECK(n_got == 1 && !strcmp(got[0].request_id, "whole"), "%d rows", n_got);
	assemble_stats(a, &st);
	CHECK(st.orphan_requests == 1, "orphans %llu, want 1", (unsigned long long)st.orphan_requests);
	assemble_losses(a, &l);
	CHECK(l.total[KPI_LOSS_ORPHANS] == 1 && l.total[KPI_LOSS_CLAMPED] == 0, "ledger");

	union kpi_event e = mkev(42, KPI_EV_ADMIT, 300, 7, 5, 1, 1, "short");
	CHECK(assemble_event(a, &e, sizeof(struct kpi_ev_hdr) + 8) == -1, "a short ADMIT was read");
	e.h.type = 99;
	CHECK(assemble_event(a, &e, sizeof(e)) == -1, "an unknown type was read");
	assemble_stats(a, &st);
	CHECK(st.malformed == 2 && n_got == 1, "malformed %llu", (unsigned long long)st.malformed);
	assemble_free(a);
}

struct states { int arriving, queued, prefill, decode, writing; };
static void count_state(void *ctx, const struct kpi_inflight_record *r)
{
	struct states *s = ctx;
	if (!strcmp(r->state, "arriving")) s->arriving++;
	else if (!strcmp(r->state, "queued")) s->queued++;
	else if (!strcmp(r->state, "prefill")) s->prefill++;
	else if (!strcmp(r->state, "decode")) s->decode++;
	else if (!strcmp(r->state, "writing")) s->writing++;
}

static void inflight_states_and_samples(void)
{
	struct assembler *a = fresh();
	struct states s = { 0 };
	uint32_t pid = 42;
	struct kpi_runq runq = { 0 };

	assemble_sample(a, 1000000000ull, &pid, &runq, 1, 0);
	ev(a, KPI_EV_ARRIVE, 10, 0, 1, 1, 0, NULL);
	ev(a, KPI_EV_ARRIVE, 10, 0, 2, 1, 0, NULL);
	ev(a, KPI_EV_ADMIT, 11, 2, 2, 5, 5, "q");
	ev(a, KPI_EV_ARRIVE, 10, 0, 3, 1, 0, NULL);
	ev(a, KPI_EV_ADMIT, 11, 3, 3, 5, 5, "p");
	ev(a, KPI_EV_SCHED, 12, 3, -1, 0, 0, NULL);
	ev(a, KPI_EV_ARRIVE, 10, 0, 4, 1, 0, NULL);
	ev(a, KPI_EV_ADMIT, 11, 4, 4, 5, 5, "d");
	ev(a, KPI_EV_SCHED, 12, 4, -1, 0, 0, NULL);
	ev(a, KPI_EV_FIRST, 13, 4, -1, 0, 0, NULL);
	ev(a, KPI_EV_STEP_BEGIN, 14, 1, -1, 10, 2, NULL);
	ev(a, KPI_EV_STEP_END, 15, 1, -1, 0, 0, NULL);
	assemble_foreach_inflight(a, count_state, &s);
	CHECK(s.arriving == 1 && s.queued == 1 && s.prefill == 1 && s.decode == 1 && s.writing == 0,
	      "%d %d %d %d", s.arriving, s.queued, s.prefill, s.decode);
	CHECK(n_steps == 1, "%d", n_steps);
	/* waits behind other processes, summed by process, largest first; those
	 * behind the idle task come summed in the totals, named pid 0 */
	runq_by(a, 77, "hog", 2000);
	runq_by(a, 77, "hog", 1000);
	runq = (struct kpi_runq){ .total = 5000, .self = 1500, .idle = 500 };
	assemble_sample(a, 2000000000ull, &pid, &runq, 1, 3);
	CHECK(n_samples == 1, "%d", n_samples);
	/* the depth is the most in their queue phase at once since the last
	 * sample: q and p were, before p's first step; q alone is now */
	CHECK(last_sample.queue_depth == 2 && last_sample.running == 2 && last_sample.drops == 3 &&
	      last_sample.runq_ns == 5000 && last_sample.runq_self_ns == 1500, "q %d r %d d %llu",
	      last_sample.queue_depth, last_sample.running, (unsigned long long)last_sample.drops);
	CHECK(last_sample.n_runq_by == 2 && last_sample.runq_by[0].pid == 77 &&
	      !strcmp(last_sample.runq_by[0].comm, "hog") && last_sample.runq_by[0].ns == 3000 &&
	      last_sample.runq_by[1].pid == 0 && last_sample.runq_by[1].ns == 500 &&
	      !strcmp(last_sample.runq_by[1].comm, "(idle)") && last_sample.runq_idle_ns == 500,
	      "%d by: %u %s %llu", last_sample.n_runq_by, last_sample.runq_by[0].pid,
	      last_sample.runq_by[0].comm, (unsigned long long)last_sample.runq_by[0].ns);
	/* the next second: more processes than a sample names, the smallest summed
	 * into the rest (the slots the assembler keeps overflow into it too) */
	uint64_t want_rest = 0;
	for (int i = 1; i <= 40; i++) {
		char comm[16];
		snprintf(comm, sizeof(comm), "p%d", i);
		runq_by(a, 1000 + (uint32_t)i, comm, (uint64_t)i * 10);
		if (i <= 40 - KPI_RUNQ_BY_MAX)
			want_rest += (uint64_t)i * 10;
	}
	runq = (struct kpi_runq){ .total = 5000 + 8200, .self = 1500, .idle = 500 };
	assemble_sample(a, 3000000000ull, &pid, &runq, 1, 3);
	CHECK(last_sample.runq_ns == 8200 && last_sample.runq_self_ns == 0 && last_sample.runq_idle_ns == 0, "%llu",
	      (unsigned long long)last_sample.runq_ns);
	/* nothing came or went: q alone, still waiting */
	CHECK(last_sample.queue_depth == 1, "queue %d", last_sample.queue_depth);
	CHECK(last_sample.n_runq_by == KPI_RUNQ_BY_MAX + 1, "%d", last_sample.n_runq_by);
	uint64_t named = 0;
	for (int i = 0; i < last_sample.n_runq_by; i++)
		named += last_sample.runq_by[i].ns;
	CHECK(named == 8200, "%llu named", (unsigned long long)named);
	CHECK(last_sample.runq_by[0].pid == 1040 && last_sample.runq_by[0].ns == 400 &&
	      last_sample.runq_by[KPI_RUNQ_BY_MAX].pid == KPI_RUNQ_BY_REST &&
	      last_sample.runq_by[KPI_RUNQ_BY_MAX].ns == want_rest, "first %u rest %llu",
	      last_sample.runq_by[0].pid, (unsigned long long)last_sample.runq_by[KPI_RUNQ_BY_MAX].ns);
	/* q is cancelled in the queue, and a burst comes and goes within the
	 * next second: the sample holds its peak, not the empty queue at its edge */
	ev(a, KPI_EV_CANCEL, 16, 2, -1, 0, 0, NULL);
	for (int i = 0; i < 5; i++) {
		ev(a, KPI_EV_ARRIVE, 17, 0, 10 + i, 1, 0, NULL);
		ev(a, KPI_EV_ADMIT, 18, 10 + i, 10 + i, 5, 5, "b");
	}
	for (int i = 0; i < 5; i++)
		ev(a, KPI_EV_SCHED, 19, 10 + i, -1, 0, 0, NULL);
	assemble_sample(a, 4000000000ull, &pid, &runq, 1, 3);
	CHECK(last_sample.queue_depth == 5, "burst of 5: queue %d", last_sample.queue_depth);
	assemble_sample(a, 5000000000ull, &pid, &runq, 1, 3);
	CHECK(last_sample.queue_depth == 0, "after the burst: queue %d", last_sample.queue_depth);
	assemble_forget_pid(a, 42);
	memset(&s, 0, sizeof(s));
	assemble_foreach_inflight(a, count_state, &s);
	CHECK(s.arriving + s.queued + s.prefill + s.decode == 0, "forgotten");
	assemble_free(a);
}

int main(void)
{
	RUN(streamed_request_phases);
	RUN(rejected_request_row);
	RUN(arrivals_before_attach_counted);
	RUN(keepalive_two_requests);
	RUN(out_of_order_marks_clamped);
	RUN(cancelled_after_close);
	RUN(orphans_and_malformed);
	RUN(inflight_states_and_samples);
	return CHECK_DONE();
}
