/* test_agent_cost_attr.c - the agent's cost attribution (agent/track/cost_attr.c) on
 * synthetic steps, step__seqs lists and samples: time and energy by step time
 * then by weighted tokens, idle apart, steps across samples and still open,
 * unlisted steps, two targets at once, wraps of the split; sums are exact. */
#include <inttypes.h>
#include "tests/unit/check.h"
#include "agent/track/cost_attr.h"
#include "agent/sources/energy.h"

#define MAXO 1024
static struct {
	struct cost_interval iv[MAXO];
	int n_iv;
	struct cost_req rq[MAXO];
	int n_rq;
} w;

static bool on_iv(void *ctx, const struct cost_interval *i)
{
	w.iv[w.n_iv++] = *i;
	return true;
}

static bool on_rq(void *ctx, const struct cost_req *r)
{
	w.rq[w.n_rq++] = *r;
	return true;
}

static const struct cost_req *rq(uint32_t pid, uint64_t id)
{
	for (int i = 0; i < w.n_rq; i++)
		if (w.rq[i].pid == pid && w.rq[i].seq_id == id)
			return &w.rq[i];
	return NULL;
}

static void seqs(struct cost_attr *a, uint32_t pid, uint64_t step, const struct kpi_step_seq *e,
		 uint32_t n, uint64_t t)
{
	cost_attr_step_seqs(a, pid, step, n, 0, e, n, t);
}

/* One interval of 1000 ns and 10000 µJ: steps [100,300) and [500,900), idle
 * 400 ns. Step 1 prefills 30 + 10 tokens, step 2 decodes both and a third. */
static void splits_by_time_then_tokens(void)
{
	struct cost_attr *a = cost_attr_new(1, 1);
	memset(&w, 0, sizeof(w));
	struct kpi_step_seq s1[] = { { 1, 30, 1 }, { 2, 10, 1 } };
	struct kpi_step_seq s2[] = { { 1, 1, 0 }, { 2, 1, 0 }, { 3, 2, 1 } };
	cost_attr_interval(a, 0, 0);
	seqs(a, 5, 1, s1, 2, 100);
	cost_attr_step(a, 5, 1, 100, 300);
	seqs(a, 5, 2, s2, 3, 500);
	cost_attr_step(a, 5, 2, 500, 900);
	cost_attr_interval(a, 1000, 10000);
	cost_attr_request(a, 5, 1, 950);
	cost_attr_request(a, 5, 2, 960);
	cost_attr_settle(a, 1000, false);
	cost_attr_drain(a, 1000, on_iv, on_rq, NULL);
	CHECK(w.n_iv == 0, "the newest interval waits for the next sample");
	cost_attr_interval(a, 2000, 7000);
	cost_attr_settle(a, 2000, false);
	cost_attr_drain(a, 2000, on_iv, on_rq, NULL);
	CHECK(w.n_iv == 1, "%d intervals", w.n_iv);
	const struct cost_interval *i = &w.iv[0];
	CHECK(i->busy_ns == 600 && i->idle_ns == 400 && i->steps == 2 && i->step_tokens == 44,
	      "busy %" PRIu64 " idle %" PRIu64 " steps %" PRIu64 " tokens %" PRIu64, i->busy_ns,
	      i->idle_ns, i->steps, i->step_tokens);
	CHECK(i->energy_uj == 10000 && i->idle_energy_uj == 4000 && i->unattributed_energy_uj == 0,
	      "energy %" PRId64 " idle %" PRId64, i->energy_uj, i->idle_energy_uj);
	/* step 1: 200 ns, 2000 µJ by 30:10; step 2: 400 ns, 4000 µJ by 1:1:2 */
	const struct cost_req *r1 = rq(5, 1), *r2 = rq(5, 2);
	CHECK(r1 && r2 && !rq(5, 3), "requests 1 and 2 handed out, 3 has no row yet");
	CHECK(r1->machine_ns == 150 + 100 && r1->energy_uj == 1500 + 1000, "r1 %" PRIu64 " %" PRId64,
	      r1->machine_ns, r1->energy_uj);
	CHECK(r2->machine_ns == 50 + 100 && r2->energy_uj == 500 + 1000, "r2 %" PRIu64 " %" PRId64,
	      r2->machine_ns, r2->energy_uj);
	cost_attr_request(a, 5, 3, 1500);
	cost_attr_interval(a, 3000, 1);
	cost_attr_settle(a, 3000, false);
	cost_attr_drain(a, 3000, on_iv, on_rq, NULL);
	CHECK(rq(5, 3) && rq(5, 3)->machine_ns == 200 && rq(5, 3)->energy_uj == 2000, "r3");
	CHECK(w.iv[1].idle_ns == 1000 && w.iv[1].idle_energy_uj == 7000, "an idle interval");
	cost_attr_free(a);
}

/* The prefill and decode weights are applied per token. */
static void weights_apply(void)
{
	struct cost_attr *a = cost_attr_new(1, 3);
	memset(&w, 0, sizeof(w));
	struct kpi_step_seq s[] = { { 1, 3, 1 }, { 2, 1, 0 } };
	cost_attr_interval(a, 0, 0);
	seqs(a, 1, 9, s, 2, 0);
	cost_attr_step(a, 1, 9, 0, 600);
	cost_attr_request(a, 1, 1, 700);
	cost_attr_request(a, 1, 2, 700);
	cost_attr_interval(a, 1000, 1000);
	cost_attr_settle(a, 1000, true);
	cost_attr_drain(a, 1000, on_iv, on_rq, NULL);
	CHECK(rq(1, 1)->machine_ns == 300 && rq(1, 2)->machine_ns == 300, "3 x 1 = 1 x 3");
	CHECK(rq(1, 1)->energy_uj == 300 && rq(1, 2)->energy_uj == 300, "energy likewise");
	cost_attr_free(a);
}

/* A step across a sample splits at it; a step still open at a sample holds
 * the interval back until it ends; final counts an open one to the end. */
static void steps_across_samples_and_open(void)
{
	struct cost_attr *a = cost_attr_new(1, 1);
	memset(&w, 0, sizeof(w));
	struct kpi_step_seq s[] = { { 4, 1, 0 } };
	cost_attr_interval(a, 1000, 0);
	seqs(a, 2, 1, s, 1, 1800);          /* open across 2000 */
	cost_attr_interval(a, 2000, 500);
	cost_attr_interval(a, 3000, 500);
	cost_attr_settle(a, 3000, false);
	cost_attr_drain(a, 3000, on_iv, on_rq, NULL);
	CHECK(w.n_iv == 0, "held back by the open step");
	cost_attr_step(a, 2, 1, 1800, 2300);
	cost_attr_settle(a, 3001, false);
	cost_attr_drain(a, 3001, on_iv, on_rq, NULL);
	CHECK(w.n_iv == 1 && w.iv[0].busy_ns == 200 && w.iv[0].idle_energy_uj == 400, "first part");
	seqs(a, 2, 2, s, 1, 2900);          /* still open when the run ends */
	cost_attr_request(a, 2, 4, 2950);
	cost_attr_settle(a, 3100, true);
	cost_attr_drain(a, 3100, on_iv, on_rq, NULL);
	CHECK(w.n_iv == 2 && w.iv[1].busy_ns == 300 + 100, "busy %" PRIu64, w.iv[1].busy_ns);
	CHECK(rq(2, 4) && rq(2, 4)->machine_ns == 200 + 300 + 100, "r4 %" PRIu64, rq(2, 4)->machine_ns);
	CHECK(rq(2, 4)->energy_uj == 100 + 150 + 50, "r4 energy %" PRId64, rq(2, 4)->energy_uj);
	cost_attr_free(a);
}

/* A step with no (or an incomplete) list is unattributed, not spread. */
static void unlisted_steps_are_their_own_line(void)
{
	struct cost_attr *a = cost_attr_new(1, 1);
	memset(&w, 0, sizeof(w));
	struct kpi_step_seq s[] = { { 1, 1, 0 }, { 2, 1, 0 } };
	cost_attr_interval(a, 0, 0);
	cost_attr_step(a, 3, 1, 0, 250);
	cost_attr_step_seqs(a, 3, 2, 2, 0, s, 1, 300); /* one chunk of two: incomplete */
	cost_attr_step(a, 3, 2, 300, 500);
	cost_attr_interval(a, 1000, 1000);
	cost_attr_settle(a, 1000, true);
	cost_attr_drain(a, 1000, on_iv, on_rq, NULL);
	CHECK(w.iv[0].unattributed_ns == 450 && w.iv[0].unattributed_energy_uj == 450 &&
	      w.iv[0].idle_ns == 550, "unattributed %" PRIu64, w.iv[0].unattributed_ns);
	struct cost_attr_stats st;
	cost_attr_stats(a, &st);
	CHECK(st.unlisted_steps == 2 && st.attributed_ns == 0, "stats");
	cost_attr_free(a);
}

/* Two targets' steps at once share the union by their time in it; no
 * energy counter leaves energy -1, time still splits. */
static void two_targets_and_no_energy(void)
{
	struct cost_attr *a = cost_attr_new(1, 1);
	memset(&w, 0, sizeof(w));
	struct kpi_step_seq s[] = { { 1, 1, 0 } };
	cost_attr_interval(a, 0, -1);
	seqs(a, 1, 1, s, 1, 0);
	cost_attr_step(a, 1, 1, 0, 400);
	seqs(a, 2, 1, s, 1, 200);
	cost_attr_step(a, 2, 1, 200, 600);
	cost_attr_request(a, 1, 1, 700);
	cost_attr_request(a, 2, 1, 700);
	cost_attr_interval(a, 1000, -1);
	cost_attr_settle(a, 1000, true);
	cost_attr_drain(a, 1000, on_iv, on_rq, NULL);
	CHECK(w.iv[0].busy_ns == 600 && w.iv[0].energy_uj < 0 && w.iv[0].idle_energy_uj < 0, "union");
	CHECK(rq(1, 1)->machine_ns == 300 && rq(2, 1)->machine_ns == 300, "shared by time in it");
	CHECK(rq(1, 1)->energy_uj < 0, "not measured");
	cost_attr_free(a);
}

/* Many random steps and samples: requests + idle + unattributed = counters,
 * to the µJ and the ns; the split's 64-bit weights. */
static void random_run_is_exact(void)
{
	struct cost_attr *a = cost_attr_new(2, 5);
	uint64_t t = 1000000, e_total = 0, rnd = 88172645463325252ull;
	memset(&w, 0, sizeof(w));
	cost_attr_interval(a, t, 0);
	uint64_t start = t, step = 1;
	for (int k = 0; k < 40; k++) {
		uint64_t end = t + 1000000000ull;
		while (t < end - 50000000ull) {
			rnd ^= rnd << 13, rnd ^= rnd >> 7, rnd ^= rnd << 17;
			uint64_t len = 100000 + rnd % 30000000;
			struct kpi_step_seq s[3] = { { step % 7, 1 + rnd % 40, (int)(rnd & 1) },
						     { 100 + step % 5, 1, 0 }, { 200 + step % 3, 3, 1 } };
			seqs(a, 9, step, s, 1 + rnd % 3, t);
			cost_attr_step(a, 9, step, t, t + len); /* may cross the sample */
			t += len + rnd % 2000000;
			step++;
		}
		uint64_t e = rnd % 5000000000ull;
		e_total += e;
		cost_attr_interval(a, end, (int64_t)e);
		cost_attr_settle(a, end, false);
		cost_attr_drain(a, end, on_iv, on_rq, NULL);
		t = end;
	}
	for (uint64_t id = 0; id < 300; id++)
		cost_attr_request(a, 9, id, 2);
	cost_attr_settle(a, t + 1, true);
	cost_attr_drain(a, t + 1, on_iv, on_rq, NULL);
	uint64_t ns = 0, uj = 0, span = 0;
	for (int i = 0; i < w.n_iv; i++) {
		ns += w.iv[i].idle_ns + w.iv[i].unattributed_ns;
		uj += (uint64_t)(w.iv[i].idle_energy_uj + w.iv[i].unattributed_energy_uj);
		span += w.iv[i].interval_ns;
	}
	for (int i = 0; i < w.n_rq; i++) {
		ns += w.rq[i].machine_ns;
		uj += (uint64_t)w.rq[i].energy_uj;
	}
	CHECK(span == t - start && ns == span, "ns %" PRIu64 " span %" PRIu64, ns, span);
	CHECK(uj == e_total, "µJ %" PRIu64 " vs %" PRIu64, uj, e_total);
	uint64_t big[3] = { 1ull << 40, 3ull << 40, 0 }, out[3];
	cost_split(1000, big, 3, out);
	CHECK(out[0] == 250 && out[1] == 750 && out[2] == 0, "64-bit weights");
	cost_attr_free(a);
}

/* RAPL counts modulo max_energy_range_uj. */
/* Requests of a target with no steps, one interval (0, 1000], 8000 µJ: A in
 * flight [100, 500), B [300, 900), so busy 800, idle 200, and by processor
 * sharing A 200 + 200/2 = 300 ns, B 200/2 + 400 = 500 ns (not 400:600 by
 * their times in it); the energy the same way, exactly.  A span held by
 * cost_attr_hold waits; one whose interval already settled gets no share. */
static void http_requests_share_the_instants(void)
{
	struct cost_attr *a = cost_attr_new(1, 1);
	memset(&w, 0, sizeof(w));
	cost_attr_interval(a, 0, 0);
	cost_attr_interval(a, 1000, 8000);
	cost_attr_interval(a, 2000, 0);
	cost_attr_hold(a, true);        /* B is still in flight at the sample */
	cost_attr_http_request(a, 7, 100, 100, 0, 500);
	cost_attr_settle(a, 2000, false);
	cost_attr_drain(a, 2000, on_iv, on_rq, NULL);
	CHECK(w.n_iv == 0 && w.n_rq == 0, "settled while a request was in flight: %d", w.n_iv);
	cost_attr_http_request(a, 7, 300, 300, 0, 900);
	cost_attr_hold(a, false);
	cost_attr_settle(a, 2000, false);
	cost_attr_drain(a, 2000, on_iv, on_rq, NULL);
	CHECK(w.n_iv == 1, "%d intervals", w.n_iv);
	const struct cost_interval *i = &w.iv[0];
	CHECK(i->busy_ns == 800 && i->idle_ns == 200 && i->idle_energy_uj == 1600 &&
	      i->unattributed_energy_uj == 0, "busy %" PRIu64 " idle %" PRIu64 " idle energy %" PRId64,
	      i->busy_ns, i->idle_ns, i->idle_energy_uj);
	const struct cost_req *ra = rq(7, COST_HTTP_KEY(100)), *rb = rq(7, COST_HTTP_KEY(300));
	CHECK(ra && rb && ra->machine_ns == 300 && rb->machine_ns == 500 && ra->energy_uj == 2400 &&
	      rb->energy_uj == 4000, "A %" PRIu64 " ns %" PRId64 " uJ, B %" PRIu64 " ns %" PRId64 " uJ",
	      ra ? ra->machine_ns : 0, ra ? ra->energy_uj : 0, rb ? rb->machine_ns : 0,
	      rb ? rb->energy_uj : 0);
	CHECK(ra->http && ra->t_arrive == 100 && ra->stream == 0 && COST_KEY_IS_HTTP(ra->seq_id),
	      "key %" PRIx64, ra->seq_id);
	cost_attr_http_request(a, 7, 50, 50, 0, 950);  /* its time was split without it */
	struct cost_attr_stats st;
	cost_attr_stats(a, &st);
	CHECK(st.http_requests == 2 && st.http_late == 1, "%" PRIu64 " spans, %" PRIu64 " late",
	      st.http_requests, st.http_late);
	cost_attr_free(a);
}

/* A gateway's request in flight [100, 900) while a model server's step runs
 * [300, 500) (its one sequence, seq 4): the step keeps its 200 ns, the
 * gateway's request gets the 600 ns no step covers, not half of the step. */
/* Two HTTP/2 streams opened in one read (the same arrival), in flight
 * [100, 500) and [100, 900): two requests, each its own share, each found by
 * its stream: 200 + 0 and 200 + 400 ns of the 800 busy. */
static void http2_streams_of_one_read(void)
{
	struct cost_attr *a = cost_attr_new(1, 1);
	memset(&w, 0, sizeof(w));
	cost_attr_interval(a, 0, 0);
	cost_attr_http_request(a, 7, 100, 100, 1, 500);
	cost_attr_http_request(a, 7, 100, 100, 3, 900);
	cost_attr_interval(a, 1000, 0);
	cost_attr_interval(a, 2000, 0);
	cost_attr_settle(a, 2000, false);
	cost_attr_drain(a, 2000, on_iv, on_rq, NULL);
	CHECK(w.n_rq == 2, "%d requests", w.n_rq);
	const struct cost_req *s1 = w.rq[0].stream == 1 ? &w.rq[0] : &w.rq[1], *s3 = s1 == &w.rq[0] ? &w.rq[1] : &w.rq[0];
	CHECK(s1->stream == 1 && s3->stream == 3 && s1->t_arrive == 100 && s3->t_arrive == 100 &&
	      s1->machine_ns == 200 && s3->machine_ns == 600, "stream %" PRId64 " %" PRIu64 " ns, stream %" PRId64
	      " %" PRIu64 " ns", s1->stream, s1->machine_ns, s3->stream, s3->machine_ns);
	cost_attr_free(a);
}

/* 40 random requests in flight in one interval of 100000 ns, against the
 * sharing worked out instant by instant (every ns: 1/k to each of the k in
 * flight): each request's machine time within 2 ns of it. */
static void http_sharing_random(void)
{
	enum { N = 40, T = 100000 };
	struct cost_attr *a = cost_attr_new(1, 1);
	uint64_t rnd = 2463534242ull, s[N], e[N];
	static double want[N];
	memset(&w, 0, sizeof(w));
	cost_attr_interval(a, 0, 0);
	for (int i = 0; i < N; i++) {
		rnd ^= rnd << 13, rnd ^= rnd >> 7, rnd ^= rnd << 17;
		s[i] = 1 + rnd % (T - 2000);
		e[i] = s[i] + 1 + (rnd >> 20) % 20000;
		if (e[i] > T)
			e[i] = T;
		cost_attr_http_request(a, 7, s[i], s[i], 0, e[i]);
		want[i] = 0;
	}
	for (uint64_t ns = 0; ns < T; ns++) {
		int k = 0;
		for (int i = 0; i < N; i++)
			k += s[i] <= ns && ns < e[i];
		for (int i = 0; k && i < N; i++)
			if (s[i] <= ns && ns < e[i])
				want[i] += 1.0 / k;
	}
	cost_attr_interval(a, T, 0);
	cost_attr_interval(a, 2 * T, 0);
	cost_attr_settle(a, 2 * T, false);
	cost_attr_drain(a, 2 * T, on_iv, on_rq, NULL);
	int bad = 0;
	for (int i = 0; i < w.n_rq; i++) {
		const struct cost_req *r = &w.rq[i];
		int j = 0;
		while (j < N && (int64_t)s[j] != r->t_arrive)
			j++;
		bad += j == N || r->machine_ns + 2 < want[j] || r->machine_ns > want[j] + 2;
	}
	CHECK(w.n_rq == N && !bad, "%d requests, %d off their share", w.n_rq, bad);
	cost_attr_free(a);
}

/* A request read at 100 whose inferred split starts it on the engine at 400
 * (a queue wait of 300), done at 900, beside one in flight [200, 600): the
 * queued one is charged from 400, so busy is [200, 900) = 700 ns, B alone
 * [200, 400) and half of [400, 600), A half of that and [600, 900) alone:
 * A 400, B 300 (by arrival it would be 500 and 200 of a busy 800). Its row
 * is still found by its arrival. C's start lies past its end: it is charged
 * from its arrival, [950, 980), and not counted as inferred. */
static void http_inferred_start_skips_the_queue(void)
{
	struct cost_attr *a = cost_attr_new(1, 1);
	memset(&w, 0, sizeof(w));
	cost_attr_interval(a, 0, 0);
	cost_attr_http_request(a, 7, 100, 400, 0, 900);
	cost_attr_http_request(a, 7, 200, 200, 0, 600);
	cost_attr_http_request(a, 8, 950, 999, 0, 980);      /* a start past its end */
	cost_attr_interval(a, 1000, 1000);
	cost_attr_interval(a, 2000, 0);
	cost_attr_settle(a, 2000, false);
	cost_attr_drain(a, 2000, on_iv, on_rq, NULL);
	const struct cost_req *ra = rq(7, COST_HTTP_KEY(100)), *rb = rq(7, COST_HTTP_KEY(200)),
			      *rc = rq(8, COST_HTTP_KEY(950));
	CHECK(w.n_iv == 1 && w.iv[0].busy_ns == 730 && ra && rb && rc && ra->machine_ns == 400 &&
	      rb->machine_ns == 300 && rc->machine_ns == 30 && ra->t_arrive == 100,
	      "busy %" PRIu64 ", A %" PRIu64 " ns, B %" PRIu64 " ns, C %" PRIu64 " ns",
	      w.n_iv ? w.iv[0].busy_ns : 0, ra ? ra->machine_ns : 0, rb ? rb->machine_ns : 0,
	      rc ? rc->machine_ns : 0);
	struct cost_attr_stats st;
	cost_attr_stats(a, &st);
	CHECK(st.http_requests == 3 && st.http_inferred == 1, "%" PRIu64 " spans, %" PRIu64 " inferred",
	      st.http_requests, st.http_inferred);
	cost_attr_free(a);
}

static void http_spans_yield_to_steps(void)
{
	struct cost_attr *a = cost_attr_new(1, 1);
	struct kpi_step_seq e[] = { { 4, 1, 0 } };
	memset(&w, 0, sizeof(w));
	cost_attr_interval(a, 0, 0);
	seqs(a, 5, 1, e, 1, 300);
	cost_attr_step(a, 5, 1, 300, 500);
	cost_attr_request(a, 5, 4, 500);
	cost_attr_http_request(a, 7, 100, 100, 0, 900);
	cost_attr_interval(a, 1000, 1000);
	cost_attr_interval(a, 2000, 0);
	cost_attr_settle(a, 2000, false);
	cost_attr_drain(a, 2000, on_iv, on_rq, NULL);
	const struct cost_req *step = rq(5, 4), *gw = rq(7, COST_HTTP_KEY(100));
	CHECK(w.n_iv == 1 && w.iv[0].busy_ns == 800 && step && gw && step->machine_ns == 200 &&
	      gw->machine_ns == 600 && step->energy_uj == 200 && gw->energy_uj == 600,
	      "busy %" PRIu64 ", step %" PRIu64 " ns, gateway %" PRIu64 " ns", w.n_iv ? w.iv[0].busy_ns : 0,
	      step ? step->machine_ns : 0, gw ? gw->machine_ns : 0);
	cost_attr_free(a);
}


static void energy_wraps(void)
{
	CHECK(energy_delta(100, 250, 1000) == 150, "plain");
	CHECK(energy_delta(900, 50, 1000) == 150, "wrapped");
	CHECK(energy_delta(900, 50, 0) == 0, "no range: a counter going back is no energy");
}

int main(void)
{
	RUN(splits_by_time_then_tokens);
	RUN(weights_apply);
	RUN(steps_across_samples_and_open);
	RUN(unlisted_steps_are_their_own_line);
	RUN(two_targets_and_no_energy);
	RUN(random_run_is_exact);
	RUN(energy_wraps);
	RUN(http_requests_share_the_instants);
	RUN(http_inferred_start_skips_the_queue);
	RUN(http_spans_yield_to_steps);
	RUN(http2_streams_of_one_read);
	RUN(http_sharing_random);
	return CHECK_DONE();
}
