/* test_engine_sched.c - the scheduler through the public engine API on the
 * tiny preset: token budget and sequence limit every step, preemption by
 * recompute gives the same greedy tokens, static batching, cancellation,
 * determinism of seeded sampling, no leaked KV blocks, submit errors. */
#include <errno.h>

#include "tests/unit/check.h"
#include "tests/unit/test_engine_util.h"
#include "daemon/engine.h"

static char err[512];

enum { MAXR = 64, MAXOUT = 48 };

struct run {
	int32_t out[MAXR][MAXOUT];
	int n_out[MAXR];
	enum kpi_finish_reason reason[MAXR];
	int scheduled[MAXR], preempted[MAXR], firsts[MAXR], finished[MAXR];
	int max_step_tokens, max_step_seqs;
	struct engine_stats end;
};

/* Reference runs use one thread, the others two: results must not depend on it. */
static int threads = 2;

static struct engine *open_tiny(int max_seqs, int max_tokens, int kv_blocks, enum engine_batching b)
{
	struct engine_config c = { .model_path = preset_path("tiny"), .max_seqs = max_seqs,
				   .max_batched_tokens = max_tokens, .kv_blocks = kv_blocks, .threads = threads,
				   .batching = b };
	struct engine *e = engine_create(&c, err, sizeof(err));
	CHECK(e != NULL, "%s", err);
	return e;
}

static void prompt_of(int r, int32_t *p, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = 3 + (r * 7 + i * 13) % 256;
}

/* Submits n requests (prompt lengths and output lengths vary with r) and
 * steps to the end, checking the limits after every step. */
static void run_all(struct engine *e, int n, int max_seqs, int budget, float temp, struct run *R)
{
	memset(R, 0, sizeof(*R));
	for (int r = 0; r < n; r++) {
		int32_t p[200];
		int np = 5 + (r * 37) % 90;
		prompt_of(r, p, np);
		struct sampling_params sp = { .temperature = temp, .top_p = 0.9f, .seed = 1000 + r,
					      .max_tokens = 8 + (r * 11) % (MAXOUT - 8), .ignore_eos = true };
		CHECK(engine_submit(e, r, p, np, &sp, err, sizeof(err)) == 0, "submit %d: %s", r, err);
	}
	struct engine_event ev[1024];
	while (engine_has_work(e)) {
		CHECK(engine_events_max(e) <= 1024, "events_max %d", engine_events_max(e));
		int k = engine_step(e, ev, 1024);
		struct engine_stats st;
		engine_stats(e, &st);
		CHECK(st.last_step_tokens <= budget, "step %llu ran %d tokens, budget %d",
		      (unsigned long long)st.steps, st.last_step_tokens, budget);
		CHECK(st.last_step_seqs <= max_seqs, "step ran %d sequences, max %d", st.last_step_seqs, max_seqs);
		CHECK(st.running <= max_seqs, "running %d", st.running);
		CHECK(st.kv_blocks_used + st.kv_blocks_free == st.kv_blocks_total, "block accounting");
		R->max_step_tokens = st.last_step_tokens > R->max_step_tokens ? st.last_step_tokens : R->max_step_tokens;
		R->max_step_seqs = st.last_step_seqs > R->max_step_seqs ? st.last_step_seqs : R->max_step_seqs;
		for (int i = 0; i < k; i++) {
			int id = (int)ev[i].id;
			CHECK(id >= 0 && id < n, "event for unknown id %d", id);
			CHECK(!R->finished[id], "event after finish for %d", id);
			switch (ev[i].kind) {
			case ENGINE_EV_SCHEDULED: R->scheduled[id]++; break;
			case ENGINE_EV_PREEMPTED: R->preempted[id]++; break;
			case ENGINE_EV_TOKEN:
				CHECK(R->n_out[id] < MAXOUT, "too many tokens");
				CHECK(ev[i].first == (R->n_out[id] == 0), "first flag on token %d", R->n_out[id]);
				R->firsts[id] += ev[i].first;
				R->out[id][R->n_out[id]++] = ev[i].token;
				break;
			case ENGINE_EV_FINISHED:
				R->finished[id] = 1;
				R->reason[id] = ev[i].reason;
				CHECK(ev[i].n_output == R->n_out[id], "n_output %d vs %d tokens", ev[i].n_output, R->n_out[id]);
				break;
			}
		}
	}
	engine_stats(e, &R->end);
	for (int r = 0; r < n; r++)
		CHECK(R->finished[r] && R->firsts[r] == 1, "request %d finished %d firsts %d", r, R->finished[r], R->firsts[r]);
	CHECK(R->end.kv_blocks_used == 0, "%d KV blocks leaked", R->end.kv_blocks_used);
	CHECK(R->end.running == 0 && R->end.waiting == 0, "queues empty");
}

static struct run base, other;

static void test_budget_and_limits(void)
{
	struct engine *e = open_tiny(6, 40, 0, ENGINE_BATCH_CONTINUOUS);
	run_all(e, 16, 6, 40, 0, &base);
	CHECK(base.max_step_tokens == 40, "chunked prefill fills the budget (max seen %d)", base.max_step_tokens);
	CHECK(base.max_step_seqs == 6, "max seqs reached (%d)", base.max_step_seqs);
	CHECK(base.end.preemptions == 0, "no preemption with a big pool");
	for (int r = 0; r < 16; r++) {
		CHECK(base.reason[r] == KPI_FINISH_LENGTH, "ignore_eos runs to max_tokens");
		CHECK(base.n_out[r] == 8 + (r * 11) % (MAXOUT - 8), "request %d: %d tokens", r, base.n_out[r]);
	}
	engine_destroy(e);
}

static void test_preemption_keeps_greedy_output(void)
{
	/* reference: one sequence at a time, big pool */
	threads = 1;
	struct engine *e = open_tiny(1, 64, 0, ENGINE_BATCH_CONTINUOUS);
	run_all(e, 16, 1, 64, 0, &base);
	engine_destroy(e);
	threads = 2;
	/* 8 at a time in a pool of 14 blocks of 16: preemption is certain */
	e = open_tiny(8, 128, 14, ENGINE_BATCH_CONTINUOUS);
	run_all(e, 16, 8, 128, 0, &other);
	CHECK(other.end.preemptions > 0, "no preemption happened: the test lost its point");
	int preempted = 0;
	for (int r = 0; r < 16; r++) {
		preempted += other.preempted[r] > 0;
		CHECK(other.scheduled[r] == other.preempted[r] + 1, "request %d scheduled %d preempted %d", r,
		      other.scheduled[r], other.preempted[r]);
		CHECK(other.n_out[r] == base.n_out[r] && !memcmp(other.out[r], base.out[r], sizeof(int32_t) * base.n_out[r]),
		      "request %d (preempted %d times) differs from the unbatched run", r, other.preempted[r]);
	}
	printf("     %llu preemptions over %d requests\n", (unsigned long long)other.end.preemptions, preempted);
	engine_destroy(e);
}

static void test_static_batching_same_output(void)
{
	struct engine *e = open_tiny(8, 256, 0, ENGINE_BATCH_STATIC);
	run_all(e, 16, 8, 256, 0, &other);
	for (int r = 0; r < 16; r++)
		CHECK(other.n_out[r] == base.n_out[r] && !memcmp(other.out[r], base.out[r], sizeof(int32_t) * base.n_out[r]),
		      "request %d differs under static batching", r);
	engine_destroy(e);
}

static void test_static_batch_admits_nothing_mid_batch(void)
{
	struct engine *e = open_tiny(4, 512, 0, ENGINE_BATCH_STATIC);
	int32_t p[8];
	prompt_of(0, p, 8);
	for (int r = 0; r < 6; r++) {
		struct sampling_params sp = { .top_p = 1, .max_tokens = r == 0 ? 40 : 2, .ignore_eos = true };
		CHECK(engine_submit(e, r, p, 8, &sp, err, sizeof(err)) == 0, "%s", err);
	}
	struct engine_event ev[256];
	int sched_step[6] = { 0 }, fin_step[6] = { 0 }, step = 0, narrow = 0;
	while (engine_has_work(e)) {
		int k = engine_step(e, ev, 256);
		step++;
		struct engine_stats st;
		engine_stats(e, &st);
		/* fixed shape: the first batch computes 4 rows until its last member ends */
		if (!fin_step[0] && st.last_step_seqs != 4)
			narrow++;
		for (int i = 0; i < k; i++) {
			if (ev[i].kind == ENGINE_EV_SCHEDULED)
				sched_step[ev[i].id] = step;
			if (ev[i].kind == ENGINE_EV_FINISHED)
				fin_step[ev[i].id] = step;
		}
	}
	CHECK(sched_step[4] > fin_step[0] && sched_step[5] > fin_step[0],
	      "requests 4, 5 joined at step %d/%d before the batch's last finished at %d", sched_step[4],
	      sched_step[5], fin_step[0]);
	CHECK(narrow == 0, "%d steps of the first static batch ran fewer than its 4 rows", narrow);
	struct engine_stats st;
	engine_stats(e, &st);
	CHECK(st.kv_blocks_used == 0, "%d blocks held after the last batch (padding not released)",
	      st.kv_blocks_used);
	engine_destroy(e);
}

static void test_seeded_sampling_deterministic(void)
{
	threads = 1;
	struct engine *e = open_tiny(4, 64, 0, ENGINE_BATCH_CONTINUOUS);
	run_all(e, 12, 4, 64, 0.8f, &base);
	threads = 2;
	engine_destroy(e);
	/* different batching, same seeds: same tokens */
	e = open_tiny(12, 512, 0, ENGINE_BATCH_CONTINUOUS);
	run_all(e, 12, 12, 512, 0.8f, &other);
	engine_destroy(e);
	int differs_from_greedy = 0;
	for (int r = 0; r < 12; r++)
		CHECK(other.n_out[r] == base.n_out[r] && !memcmp(other.out[r], base.out[r], sizeof(int32_t) * base.n_out[r]),
		      "request %d: same seed, different tokens", r);
	e = open_tiny(4, 64, 0, ENGINE_BATCH_CONTINUOUS);
	run_all(e, 12, 4, 64, 0, &other);
	engine_destroy(e);
	for (int r = 0; r < 12; r++)
		differs_from_greedy += memcmp(other.out[r], base.out[r], sizeof(int32_t) * base.n_out[r]) != 0;
	CHECK(differs_from_greedy > 0, "temperature 0.8 sampled exactly the greedy tokens every time");
}

static void test_cancel_frees_blocks(void)
{
	struct engine *e = open_tiny(4, 64, 0, ENGINE_BATCH_CONTINUOUS);
	int32_t p[100];
	prompt_of(3, p, 100);
	struct sampling_params sp = { .top_p = 1, .max_tokens = 500, .ignore_eos = true };
	CHECK(engine_submit(e, 1, p, 100, &sp, err, sizeof(err)) == 0, "%s", err);
	CHECK(engine_submit(e, 2, p, 100, &sp, err, sizeof(err)) == 0, "%s", err);
	struct engine_event ev[64];
	engine_step(e, ev, 64); /* 64 prompt tokens of request 1 */
	struct engine_stats st;
	engine_stats(e, &st);
	CHECK(st.kv_blocks_used == 4 && st.running == 1 && st.waiting == 1, "used %d running %d waiting %d",
	      st.kv_blocks_used, st.running, st.waiting);
	engine_finish(e, 1, KPI_FINISH_CANCELLED);
	engine_finish(e, 2, KPI_FINISH_CANCELLED);
	engine_finish(e, 99, KPI_FINISH_CANCELLED); /* unknown: ignored */
	engine_stats(e, &st);
	CHECK(st.kv_blocks_used == 0 && st.running == 0 && st.waiting == 0, "blocks freed at once");
	CHECK(engine_has_work(e), "the finish events are still to be reported");
	int k = engine_step(e, ev, 64);
	CHECK(k == 2 && ev[0].kind == ENGINE_EV_FINISHED && ev[0].reason == KPI_FINISH_CANCELLED && ev[1].id == 2,
	      "%d events", k);
	CHECK(!engine_has_work(e), "idle");
	engine_destroy(e);
}

static void test_events_split_across_calls(void)
{
	struct engine *e = open_tiny(8, 256, 0, ENGINE_BATCH_CONTINUOUS);
	int32_t p[4] = { 10, 11, 12, 13 };
	struct sampling_params sp = { .top_p = 1, .max_tokens = 3, .ignore_eos = true };
	for (int r = 0; r < 8; r++)
		CHECK(engine_submit(e, r, p, 4, &sp, err, sizeof(err)) == 0, "%s", err);
	struct engine_event ev[3];
	int tokens = 0, fins = 0;
	while (engine_has_work(e)) {
		int k = engine_step(e, ev, 3);
		CHECK(k <= 3, "%d", k);
		for (int i = 0; i < k; i++) {
			tokens += ev[i].kind == ENGINE_EV_TOKEN;
			fins += ev[i].kind == ENGINE_EV_FINISHED;
		}
	}
	CHECK(tokens == 24 && fins == 8, "tokens %d finishes %d", tokens, fins);
	engine_destroy(e);
}

static void test_submit_errors(void)
{
	struct engine *e = open_tiny(4, 64, 20, ENGINE_BATCH_CONTINUOUS);
	int32_t p[4] = { 5, 6, 7, 8 }, bad[2] = { 5, 259 };
	struct sampling_params sp = { .top_p = 1, .max_tokens = 10 };
	CHECK(engine_submit(e, 1, p, 0, &sp, err, sizeof(err)) == -EINVAL, "empty prompt");
	CHECK(engine_submit(e, 1, bad, 2, &sp, err, sizeof(err)) == -EINVAL && strstr(err, "259"), "%s", err);
	sp.max_tokens = 2045;
	CHECK(engine_submit(e, 1, p, 4, &sp, err, sizeof(err)) == -E2BIG && strstr(err, "2048"), "%s", err);
	sp.max_tokens = 400; /* 404 tokens = 26 blocks > 20 */
	CHECK(engine_submit(e, 1, p, 4, &sp, err, sizeof(err)) == -E2BIG && strstr(err, "kv-blocks"), "%s", err);
	sp.max_tokens = 10;
	sp.top_p = 2;
	CHECK(engine_submit(e, 1, p, 4, &sp, err, sizeof(err)) == -EINVAL, "top_p");
	engine_destroy(e);
	struct engine_config c = { .model_path = preset_path("tiny"), .max_seqs = 64, .max_batched_tokens = 16 };
	CHECK(engine_create(&c, err, sizeof(err)) == NULL && strstr(err, "--max-batched-tokens"), "%s", err);
	c = (struct engine_config){ .model_path = tpath("nope.gguf") };
	CHECK(engine_create(&c, err, sizeof(err)) == NULL && strstr(err, "nope.gguf"), "%s", err);
}

static void test_eos_stops(void)
{
	/* with EOS honoured every request ends by STOP or LENGTH, tokens after EOS never appear */
	struct engine *e = open_tiny(8, 256, 0, ENGINE_BATCH_CONTINUOUS);
	for (int r = 0; r < 16; r++) {
		int32_t p[16];
		prompt_of(r, p, 16);
		struct sampling_params sp = { .temperature = 1.5f, .top_p = 1, .seed = r, .max_tokens = 64 };
		CHECK(engine_submit(e, r, p, 16, &sp, err, sizeof(err)) == 0, "%s", err);
	}
	struct engine_event ev[256];
	int32_t last[16] = { 0 };
	while (engine_has_work(e)) {
		int k = engine_step(e, ev, 256);
		for (int i = 0; i < k; i++) {
			if (ev[i].kind == ENGINE_EV_TOKEN)
				last[ev[i].id] = ev[i].token;
			if (ev[i].kind == ENGINE_EV_FINISHED)
				CHECK(ev[i].reason == (last[ev[i].id] == 2 ? KPI_FINISH_STOP : KPI_FINISH_LENGTH),
				      "request %llu: reason %d after token %d", (unsigned long long)ev[i].id, ev[i].reason,
				      last[ev[i].id]);
		}
	}
	engine_destroy(e);
}

int main(void)
{
	RUN(test_budget_and_limits);
	RUN(test_preemption_keeps_greedy_output);
	RUN(test_static_batching_same_output);
	RUN(test_static_batch_admits_nothing_mid_batch);
	RUN(test_seeded_sampling_deterministic);
	RUN(test_cancel_frees_blocks);
	RUN(test_events_split_across_calls);
	RUN(test_submit_errors);
	RUN(test_eos_stops);
	return CHECK_DONE();
}
