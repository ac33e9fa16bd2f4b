/* test_agent_gpu_attr.c - the agent's GPU attribution (agent/track/gpu_attr.c) on
 * synthetic kpi_gpu_rec records and step__seqs lists: per-step busy time,
 * the token-share split, late and early records, chunked lists, retries of
 * rows not yet written, expiry; per-request GPU time sums to the kernels'. */
#include <inttypes.h>
#include "tests/unit/check.h"
#include "agent/track/gpu_attr.h"

#define MS 1000000ull

/* What the drain callbacks saw: the last values per step and request. */
#define MAXO 4096
struct seen {
	struct gpu_attr_step steps[MAXO];
	int n_steps;
	struct gpu_attr_req reqs[MAXO];
	int n_reqs;
	bool accept;           /* callbacks return this */
	int calls;
};

static bool on_step(void *ctx, const struct gpu_attr_step *s)
{
	struct seen *w = ctx;
	w->calls++;
	for (int i = 0; i < w->n_steps; i++)
		if (w->steps[i].pid == s->pid && w->steps[i].step == s->step) {
			w->steps[i] = *s;
			return w->accept;
		}
	if (w->n_steps < MAXO)
		w->steps[w->n_steps++] = *s;
	return w->accept;
}

static bool on_req(void *ctx, const struct gpu_attr_req *r)
{
	struct seen *w = ctx;
	w->calls++;
	for (int i = 0; i < w->n_reqs; i++)
		if (w->reqs[i].pid == r->pid && w->reqs[i].id == r->id) {
			w->reqs[i] = *r;
			return w->accept;
		}
	if (w->n_reqs < MAXO)
		w->reqs[w->n_reqs++] = *r;
	return w->accept;
}

static const struct gpu_attr_req *req_of(const struct seen *w, uint32_t pid, uint64_t id)
{
	for (int i = 0; i < w->n_reqs; i++)
		if (w->reqs[i].pid == pid && w->reqs[i].id == id)
			return &w->reqs[i];
	return NULL;
}

static uint64_t step_busy(const struct seen *w, uint32_t pid, uint64_t step)
{
	for (int i = 0; i < w->n_steps; i++)
		if (w->steps[i].pid == pid && w->steps[i].step == step)
			return w->steps[i].busy_ns;
	return UINT64_MAX;
}

static void rec(struct gpu_attr *a, uint32_t pid, uint64_t step, uint64_t start, uint64_t end,
		uint32_t stream, uint64_t now)
{
	struct kpi_gpu_rec r = { .step = step, .start_ns = start, .end_ns = end, .stream_id = stream,
				 .kind = KPI_GPU_REC_KERNEL, .name_id = 1 };
	gpu_attr_record(a, pid, &r, now);
}

static void seqs(struct gpu_attr *a, uint32_t pid, uint64_t step, const struct kpi_step_seq *e,
		 uint32_t n, uint64_t now)
{
	gpu_attr_step_seqs(a, pid, step, n, 0, e, n, now);
}

static struct seen w; /* large: not on the stack */

/* Two prefills (24 and 10 tokens) then both decoding alongside a third
 * prefill: shares follow the tokens, phases go where they belong. */
static void splits_by_token_share_into_phases(void)
{
	struct gpu_attr *a = gpu_attr_new();
	memset(&w, 0, sizeof(w));
	w.accept = true;
	struct kpi_step_seq s1[] = { { 1, 24, 1 }, { 2, 10, 1 } };
	struct kpi_step_seq s2[] = { { 1, 1, 0 }, { 2, 1, 0 }, { 3, 30, 1 } };
	seqs(a, 7, 1, s1, 2, 1);
	rec(a, 7, 1, 1000, 2000, 1, 2);  /* 1000 */
	rec(a, 7, 1, 2000, 4400, 1, 2);  /* 2400: step 1 busy 3400 */
	seqs(a, 7, 2, s2, 3, 3);
	rec(a, 7, 2, 5000, 8200, 1, 4);  /* 3200 */
	gpu_attr_settle(a);
	gpu_attr_drain(a, 5, on_step, on_req, &w);
	CHECK(step_busy(&w, 7, 1) == 3400, "step 1 busy %" PRIu64, step_busy(&w, 7, 1));
	CHECK(step_busy(&w, 7, 2) == 3200, "step 2 busy %" PRIu64, step_busy(&w, 7, 2));
	const struct gpu_attr_req *r1 = req_of(&w, 7, 1), *r2 = req_of(&w, 7, 2), *r3 = req_of(&w, 7, 3);
	CHECK(r1 && r2 && r3, "three requests");
	/* step 1: 3400 * 24/34 = 2400, 3400 * 10/34 = 1000; step 2: 3200 / 32 = 100 a token */
	CHECK(r1->prefill_ns == 2400 && r1->decode_ns == 100, "r1 %" PRIu64 " %" PRIu64, r1->prefill_ns,
	      r1->decode_ns);
	CHECK(r2->prefill_ns == 1000 && r2->decode_ns == 100, "r2 %" PRIu64 " %" PRIu64, r2->prefill_ns,
	      r2->decode_ns);
	CHECK(r3->prefill_ns == 3000 && r3->decode_ns == 0, "r3 %" PRIu64 " %" PRIu64, r3->prefill_ns,
	      r3->decode_ns);
	struct gpu_attr_stats st;
	gpu_attr_stats(a, &st);
	CHECK(st.attributed_ns == 3400 + 3200 && st.records == 3, "stats %" PRIu64, st.attributed_ns);
	gpu_attr_free(a);
}

/* Kernels overlapping on two streams count once in the busy time. */
static void overlapping_streams_count_once(void)
{
	struct gpu_attr *a = gpu_attr_new();
	memset(&w, 0, sizeof(w));
	w.accept = true;
	struct kpi_step_seq s[] = { { 5, 1, 0 } };
	seqs(a, 9, 4, s, 1, 1);
	rec(a, 9, 4, 100, 600, 1, 1);
	rec(a, 9, 4, 300, 900, 2, 1); /* overlaps: union [100, 900] */
	rec(a, 9, 4, 1000, 1100, 1, 1);
	gpu_attr_settle(a);
	gpu_attr_drain(a, 2, on_step, on_req, &w);
	CHECK(step_busy(&w, 9, 4) == 900, "busy %" PRIu64, step_busy(&w, 9, 4));
	CHECK(req_of(&w, 9, 5)->decode_ns == 900, "decode %" PRIu64, req_of(&w, 9, 5)->decode_ns);
	gpu_attr_free(a);
}

/* Records that arrive after their step was settled and written add to it;
 * records that arrive before the step's list wait for it. */
static void late_and_early_records(void)
{
	struct gpu_attr *a = gpu_attr_new();
	memset(&w, 0, sizeof(w));
	w.accept = true;
	struct kpi_step_seq s[] = { { 1, 3, 1 }, { 2, 1, 0 } };
	rec(a, 1, 10, 0, 400, 1, 1);   /* before the list */
	gpu_attr_settle(a);
	gpu_attr_drain(a, 1, on_step, on_req, &w);
	CHECK(step_busy(&w, 1, 10) == 400, "busy known before the list");
	CHECK(w.n_reqs == 0, "nothing split without a list");
	seqs(a, 1, 10, s, 2, 2);
	gpu_attr_settle(a);
	gpu_attr_drain(a, 2, on_step, on_req, &w);
	CHECK(req_of(&w, 1, 1)->prefill_ns == 300 && req_of(&w, 1, 2)->decode_ns == 100, "split on list");
	rec(a, 1, 10, 1000, 1800, 1, 3); /* late: +800 */
	int calls = w.calls;
	gpu_attr_settle(a);
	gpu_attr_drain(a, 3, on_step, on_req, &w);
	CHECK(w.calls > calls, "late record rewrites");
	CHECK(step_busy(&w, 1, 10) == 1200, "busy %" PRIu64, step_busy(&w, 1, 10));
	CHECK(req_of(&w, 1, 1)->prefill_ns == 900 && req_of(&w, 1, 2)->decode_ns == 300,
	      "late split %" PRIu64 " %" PRIu64, req_of(&w, 1, 1)->prefill_ns, req_of(&w, 1, 2)->decode_ns);
	calls = w.calls;
	gpu_attr_settle(a);
	gpu_attr_drain(a, 4, on_step, on_req, &w);
	CHECK(w.calls == calls, "nothing new: nothing written (%d calls)", w.calls - calls);
	gpu_attr_free(a);
}

/* A list of 600 sequences in three chunks is split only once complete. */
static void chunked_lists(void)
{
	static struct kpi_step_seq s[600];
	struct gpu_attr *a = gpu_attr_new();
	memset(&w, 0, sizeof(w));
	w.accept = true;
	for (int i = 0; i < 600; i++)
		s[i] = (struct kpi_step_seq){ 1000 + i, 1 + i % 7, i % 3 == 0 };
	rec(a, 3, 2, 0, 999983, 1, 1);  /* a prime: shares do not divide evenly */
	gpu_attr_step_seqs(a, 3, 2, 600, 0, s, 256, 1);
	gpu_attr_step_seqs(a, 3, 2, 600, 256, s + 256, 256, 1);
	gpu_attr_settle(a);
	gpu_attr_drain(a, 1, on_step, on_req, &w);
	CHECK(w.n_reqs == 0, "split before the last chunk");
	gpu_attr_step_seqs(a, 3, 2, 600, 512, s + 512, 88, 1);
	gpu_attr_settle(a);
	gpu_attr_drain(a, 1, on_step, on_req, &w);
	CHECK(w.n_reqs == 600, "%d requests", w.n_reqs);
	uint64_t sum = 0, tok = 0;
	for (int i = 0; i < 600; i++)
		tok += s[i].n_tokens;
	for (int i = 0; i < w.n_reqs; i++) {
		const struct gpu_attr_req *r = &w.reqs[i];
		const struct kpi_step_seq *e = &s[r->id - 1000];
		uint64_t mine = e->is_prefill ? r->prefill_ns : r->decode_ns;
		CHECK((e->is_prefill ? r->decode_ns : r->prefill_ns) == 0, "wrong phase for %" PRIu64, r->id);
		double exact = 999983.0 * e->n_tokens / (double)tok;
		CHECK(mine + 1 >= exact && mine <= exact + 1, "share %" PRIu64 " vs %f", mine, exact);
		sum += r->prefill_ns + r->decode_ns;
	}
	CHECK(sum == 999983, "sum %" PRIu64, sum);
	gpu_attr_free(a);
}

/* A callback that cannot write yet (the row is not in the store) is asked
 * again; entries idle past GPU_ATTR_KEEP_NS go, counted when unwritten. */
static void retries_and_expiry(void)
{
	struct gpu_attr *a = gpu_attr_new();
	struct gpu_attr_stats st;
	memset(&w, 0, sizeof(w));
	struct kpi_step_seq s[] = { { 1, 1, 1 } };
	seqs(a, 2, 1, s, 1, 100);
	rec(a, 2, 1, 0, 50, 1, 100);
	gpu_attr_settle(a);
	w.accept = false;
	gpu_attr_drain(a, 200, on_step, on_req, &w);
	CHECK(w.calls == 2, "offered once each (%d)", w.calls);
	gpu_attr_drain(a, 300, on_step, on_req, &w);
	CHECK(w.calls == 4, "offered again (%d)", w.calls);
	w.accept = true;
	gpu_attr_drain(a, 400, on_step, on_req, &w);
	gpu_attr_drain(a, 500, on_step, on_req, &w);
	CHECK(w.calls == 6, "written once accepted (%d)", w.calls);
	/* a second step never written, then everything expires */
	seqs(a, 2, 2, s, 1, 600);
	rec(a, 2, 2, 100, 150, 1, 600);
	gpu_attr_settle(a);
	w.accept = false;
	gpu_attr_drain(a, 600 + GPU_ATTR_KEEP_NS + 1, on_step, on_req, &w);
	gpu_attr_stats(a, &st);
	CHECK(st.unwritten == 2, "unwritten %" PRIu64, st.unwritten);
	int calls = w.calls;
	gpu_attr_drain(a, 600 + 2 * GPU_ATTR_KEEP_NS, on_step, on_req, &w);
	CHECK(w.calls == calls, "expired entries are gone");
	gpu_attr_free(a);
}

/* Records of step 0 (between steps, or a host without a step slot) are
 * counted, never attributed; another pid's steps are its own; a pid that
 * exited is forgotten. */
static void step_zero_pids_and_forget(void)
{
	struct gpu_attr *a = gpu_attr_new();
	struct gpu_attr_stats st;
	memset(&w, 0, sizeof(w));
	w.accept = true;
	struct kpi_step_seq s[] = { { 1, 1, 0 } };
	seqs(a, 10, 1, s, 1, 1);
	seqs(a, 11, 1, s, 1, 1);
	rec(a, 10, 0, 0, 1000, 1, 1);
	rec(a, 10, 1, 0, 100, 1, 1);
	rec(a, 11, 1, 0, 300, 1, 1);
	gpu_attr_settle(a);
	gpu_attr_drain(a, 2, on_step, on_req, &w);
	gpu_attr_stats(a, &st);
	CHECK(st.no_step == 1 && st.records == 2, "counts %" PRIu64 " %" PRIu64, st.no_step, st.records);
	CHECK(req_of(&w, 10, 1)->decode_ns == 100 && req_of(&w, 11, 1)->decode_ns == 300, "per pid");
	gpu_attr_forget_pid(a, 10);
	rec(a, 11, 1, 1000, 1100, 1, 3);
	int n = w.n_reqs;
	gpu_attr_settle(a);
	gpu_attr_drain(a, 3, on_step, on_req, &w);
	CHECK(w.n_reqs == n && req_of(&w, 11, 1)->decode_ns == 400, "pid 11 goes on");
	gpu_attr_free(a);
}

static uint64_t rnd_state = 88172645463325252ull;
static uint64_t rnd(uint64_t n)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state % n;
}

/* A continuous-batching run: 200 steps, requests joining and leaving, one
 * stream, records delivered in shuffled batches with settles in between.
 * Per-request GPU time sums exactly to the total kernel time. */
static void random_run_sums_to_total(void)
{
	enum { STEPS = 200, MAXR = 64 };
	static struct kpi_gpu_rec all[STEPS * 40];
	int n_all = 0;
	struct gpu_attr *a = gpu_attr_new();
	memset(&w, 0, sizeof(w));
	w.accept = true;
	uint64_t t = 1000, total = 0, next_id = 1;
	uint64_t live[MAXR];
	int left[MAXR], n_live = 0;

	for (uint64_t step = 1; step <= STEPS; step++) {
		while (n_live < MAXR && rnd(3) == 0) {
			live[n_live] = next_id++;
			left[n_live++] = -(int)(1 + rnd(300)); /* negative: prompt tokens to go */
		}
		if (!n_live)
			continue;
		struct kpi_step_seq s[MAXR];
		for (int i = 0; i < n_live; i++) {
			int take = left[i] < 0 ? (int)(1 + rnd(-left[i])) : 1;
			s[i] = (struct kpi_step_seq){ live[i], take, left[i] < 0 };
			left[i] = left[i] < 0 ? (left[i] + take == 0 ? (int)(1 + rnd(20)) : left[i] + take)
					      : left[i] - 1;
		}
		seqs(a, 42, step, s, n_live, t);
		int k = 1 + (int)rnd(40);
		for (int i = 0; i < k; i++) {
			uint64_t d = 1 + rnd(50000);
			all[n_all++] = (struct kpi_gpu_rec){ .step = step, .start_ns = t, .end_ns = t + d,
							     .kind = KPI_GPU_REC_KERNEL };
			total += d;
			t += d + rnd(3);
		}
		for (int i = n_live - 1; i >= 0; i--)
			if (left[i] == 0)
				live[i] = live[--n_live], left[i] = left[n_live];
		t += 10000;
	}
	/* shuffle, then deliver in batches of up to 64, settling now and then */
	for (int i = n_all - 1; i > 0; i--) {
		int j = (int)rnd(i + 1);
		struct kpi_gpu_rec x = all[i];
		all[i] = all[j];
		all[j] = x;
	}
	for (int i = 0; i < n_all; i++) {
		gpu_attr_record(a, 42, &all[i], t);
		if (i % 64 == 63 && rnd(4) == 0) {
			gpu_attr_settle(a);
			gpu_attr_drain(a, t, on_step, on_req, &w);
		}
	}
	gpu_attr_settle(a);
	gpu_attr_drain(a, t, on_step, on_req, &w);
	uint64_t sum = 0, busy = 0;
	for (int i = 0; i < w.n_reqs; i++)
		sum += w.reqs[i].prefill_ns + w.reqs[i].decode_ns;
	for (int i = 0; i < w.n_steps; i++)
		busy += w.steps[i].busy_ns;
	CHECK(busy == total, "steps' busy %" PRIu64 " vs kernels %" PRIu64, busy, total);
	CHECK(sum == total, "requests' GPU %" PRIu64 " vs kernels %" PRIu64, sum, total);
	struct gpu_attr_stats st;
	gpu_attr_stats(a, &st);
	CHECK(st.attributed_ns == total && st.records == (uint64_t)n_all, "stats");
	gpu_attr_free(a);
}

int main(void)
{
	RUN(splits_by_token_share_into_phases);
	RUN(overlapping_streams_count_once);
	RUN(late_and_early_records);
	RUN(chunked_lists);
	RUN(retries_and_expiry);
	RUN(step_zero_pids_and_forget);
	RUN(random_run_sums_to_total);
	return CHECK_DONE();
}
