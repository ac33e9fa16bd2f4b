/* test_agent_llama_join.c - agent/track/llama_join.c with hand-made llama_decode
 * calls and HTTP records: steps, generations (a reused sequence id, a cut
 * prefix), the read-order join and its check, ties broken by usage or left as ties; and the
 * ELF look-ups agent/sources/llama.c's attach and ABI check rest on. */
#include <unistd.h>
#include "tests/unit/check.h"
#include "agent/host/elf.h"
#include "agent/sources/llama.h"
#include "agent/track/llama_join.h"

#define MS 1000000ull

static struct kpi_request_record out[16];
static int n_out;

static void collect(void *ctx, const struct kpi_request_record *r)
{
	(void)ctx;
	if (n_out < 16)
		out[n_out++] = *r;
}

/* One call at [t0, t1] ms holding (seq, n_tokens, pos_first, n_logits) x n. */
static void call(struct llama_join *j, uint64_t t0, uint64_t t1, int n, const int (*s)[4],
		 struct kpi_step_record *step)
{
	struct kpi_llama_ev e = { .pid = 7, .t_start = t0 * MS, .t_end = t1 * MS, .ctx = 0x1000 };
	struct kpi_step_record ignored;

	for (int i = 0; i < n; i++) {
		e.seqs[i] = (struct kpi_llama_seq){ .seq_id = s[i][0], .n_tokens = s[i][1],
						    .pos_first = s[i][2], .pos_last = s[i][2] + s[i][1] - 1,
						    .n_logits = s[i][3] };
		e.n_tokens += s[i][1];
	}
	e.n_seqs = (uint32_t)n;
	llama_join_call(j, &e, step ? step : &ignored);
}

/* An http record read at `read`, first content at `first`, done at `done` (ms). */
static struct kpi_request_record req(const char *id, int64_t read, int64_t first, int64_t done,
				     int64_t prompt, int64_t output)
{
	struct kpi_request_record r = { .pid = 7, .seq_id = KPI_NULL, .source = "http" };

	snprintf(r.request_id, sizeof(r.request_id), "%s", id);
	r.t_arrive = (read - 1) * (int64_t)MS;
	r.t_req_read = read * (int64_t)MS;
	r.t_first_write = first * (int64_t)MS;
	r.t_done = done * (int64_t)MS;
	r.net_in = (int64_t)MS;
	r.server_wait = (first - read) * (int64_t)MS;
	r.queue = r.prefill = r.t_sched = r.t_first = r.t_last = KPI_NULL;
	r.e2e = r.t_done - r.t_arrive;
	r.prompt_tokens = prompt;
	r.output_tokens = output;
	return r;
}

static void decode(struct llama_join *j, uint64_t t0, int seq, int pos)
{
	call(j, t0, t0 + 1, 1, (const int[][4]){ { seq, 1, pos, 1 } }, NULL);
}

/* A prompt of 10 in two prefill steps, 3 tokens out; then the same sequence
 * id reused with 6 of its positions cached: two generations, both joined. */
static void generations_and_marks(void)
{
	struct llama_join *j = llama_join_new(7);
	struct kpi_step_record st;

	n_out = 0;
	call(j, 10, 12, 1, (const int[][4]){ { 0, 6, 0, 0 } }, &st);
	CHECK(st.prefill_tokens == 6 && st.decode_seqs == 0 && !strcmp(st.source, "libllama") &&
	      st.step_id == 1, "step %d %d", st.prefill_tokens, st.decode_seqs);
	call(j, 12, 14, 1, (const int[][4]){ { 0, 4, 6, 1 } }, NULL);
	decode(j, 15, 0, 10);
	decode(j, 17, 0, 11);
	struct kpi_request_record a = req("a", 9, 15, 20, 10, 3);
	llama_join_hold(j, &a);
	/* reused: positions go back to 6 */
	call(j, 30, 31, 1, (const int[][4]){ { 0, 3, 6, 1 } }, NULL);
	decode(j, 32, 0, 9);
	struct kpi_request_record b = req("b", 29, 32, 40, 9, 2);
	llama_join_hold(j, &b);

	llama_join_release(j, 20 * MS + LLAMA_JOIN_SETTLE_NS - 1, false, collect, NULL);
	CHECK(n_out == 0, "released %d before it settled", n_out);
	llama_join_release(j, 100 * MS, true, collect, NULL);
	CHECK(n_out == 2, "released %d", n_out);
	struct kpi_request_record *r = &out[0];
	CHECK(!strcmp(r->request_id, "a") && !strcmp(r->source, "http+libllama") &&
	      !strcmp(r->engine_join, "read-order"), "%s %s", r->request_id, r->source);
	CHECK(r->t_sched == 10 * (int64_t)MS && r->t_first == 14 * (int64_t)MS &&
	      r->t_last == 18 * (int64_t)MS, "%lld %lld %lld", (long long)r->t_sched,
	      (long long)r->t_first, (long long)r->t_last);
	CHECK(r->queue == 1 * (int64_t)MS && r->prefill == 4 * (int64_t)MS &&
	      r->decode == 4 * (int64_t)MS && r->net_out == 2 * (int64_t)MS &&
	      r->server_wait == KPI_NULL, "phases");
	CHECK(r->net_in + r->queue + r->prefill + r->decode + r->net_out == r->e2e, "sum");
	CHECK(r->cached_prompt_tokens == 0 && r->engine_prompt_tokens == 10 && r->prefill_steps == 2,
	      "%lld %lld %lld", (long long)r->cached_prompt_tokens, (long long)r->engine_prompt_tokens,
	      (long long)r->prefill_steps);
	r = &out[1];
	CHECK(!strcmp(r->request_id, "b") && r->cached_prompt_tokens == 6 &&
	      r->engine_prompt_tokens == 9 && r->t_sched == 30 * (int64_t)MS, "b: %lld %lld",
	      (long long)r->cached_prompt_tokens, (long long)r->t_sched);
	CHECK(llama_join_stats(j)->generations == 2 && llama_join_stats(j)->joined == 2, "stats");
	llama_join_free(j);
}

/* A request whose first content was written before its generation's first
 * token: no engine marks, counted; one with no generation left: counted. */
static void failed_check_leaves_marks_out(void)
{
	struct llama_join *j = llama_join_new(7);

	n_out = 0;
	call(j, 10, 20, 1, (const int[][4]){ { 1, 5, 0, 1 } }, NULL);
	struct kpi_request_record a = req("a", 9, 15, 25, KPI_NULL, KPI_NULL);
	struct kpi_request_record b = req("b", 9, 26, 30, KPI_NULL, KPI_NULL);
	llama_join_hold(j, &a);
	llama_join_hold(j, &b);
	llama_join_release(j, 0, true, collect, NULL);
	CHECK(n_out == 2, "released %d", n_out);
	for (int i = 0; i < 2; i++)
		CHECK(!strcmp(out[i].source, "http") && out[i].queue == KPI_NULL &&
		      out[i].server_wait != KPI_NULL && !out[i].engine_join, "%s: %s", out[i].request_id,
		      out[i].source);
	CHECK(llama_join_stats(j)->check_failed == 1 && llama_join_stats(j)->no_generation == 1,
	      "failed %llu, none %llu", (unsigned long long)llama_join_stats(j)->check_failed,
	      (unsigned long long)llama_join_stats(j)->no_generation);
	llama_join_free(j);
}

/* Two generations in one step, in the batch's order (seq 1 first): the
 * request read first takes the one whose counts fit its usage. A generation
 * still running after a request ended is not that request's. */
static void ties_and_running_generations(void)
{
	struct llama_join *j = llama_join_new(7);

	n_out = 0;
	call(j, 10, 12, 2, (const int[][4]){ { 1, 7, 0, 1 }, { 0, 4, 0, 1 } }, NULL);
	call(j, 13, 14, 2, (const int[][4]){ { 1, 1, 7, 1 }, { 0, 1, 4, 1 } }, NULL);
	struct kpi_request_record s = req("short", 8, 13, 15, 4, 2);
	struct kpi_request_record l = req("long", 9, 13, 16, 7, 2);
	/* seq 2 runs 20..31 for "d", seq 3 runs 21..24 for "c" */
	call(j, 20, 21, 1, (const int[][4]){ { 2, 3, 0, 1 } }, NULL);
	call(j, 21, 22, 2, (const int[][4]){ { 2, 1, 3, 1 }, { 3, 2, 0, 1 } }, NULL);
	decode(j, 23, 3, 2);
	decode(j, 30, 2, 4);
	struct kpi_request_record c = req("c", 18, 23, 25, KPI_NULL, KPI_NULL);
	struct kpi_request_record d = req("d", 19, 22, 35, KPI_NULL, KPI_NULL);
	llama_join_hold(j, &l);
	llama_join_hold(j, &s);
	llama_join_hold(j, &d);
	llama_join_hold(j, &c);
	llama_join_release(j, 0, true, collect, NULL);
	CHECK(n_out == 4 && !strcmp(out[0].request_id, "short") && !strcmp(out[2].request_id, "c"),
	      "order");
	CHECK(out[0].engine_prompt_tokens == 4 && !strcmp(out[0].engine_join, "read-order+usage") &&
	      out[0].seq_id == 0, "short: %lld %s", (long long)out[0].engine_prompt_tokens,
	      out[0].engine_join);
	CHECK(out[1].engine_prompt_tokens == 7 && out[1].seq_id == 1 &&
	      !strcmp(out[1].engine_join, "read-order"), "long: %lld", (long long)out[1].engine_prompt_tokens);
	CHECK(out[2].seq_id == 3 && out[2].t_last == 24 * (int64_t)MS, "c: seq %lld", (long long)out[2].seq_id);
	CHECK(out[3].seq_id == 2 && out[3].t_last == 31 * (int64_t)MS, "d: seq %lld", (long long)out[3].seq_id);
	llama_join_free(j);
}

/* Two sequences freed in one step start two equal requests in the batch's
 * order (seq 3 before seq 1): nothing tells them apart, the first read takes
 * the first in the batch, the other the one left, and both rows say so; their
 * marks are the same. */
static void equal_generations_are_a_tie(void)
{
	struct llama_join *j = llama_join_new(7);

	n_out = 0;
	call(j, 10, 12, 2, (const int[][4]){ { 3, 5, 0, 1 }, { 1, 5, 0, 1 } }, NULL);
	call(j, 12, 13, 2, (const int[][4]){ { 3, 1, 5, 1 }, { 1, 1, 5, 1 } }, NULL);
	struct kpi_request_record a = req("a", 8, 12, 14, 5, 2);
	struct kpi_request_record b = req("b", 9, 12, 14, 5, 2);
	llama_join_hold(j, &b);
	llama_join_hold(j, &a);
	llama_join_release(j, 0, true, collect, NULL);
	CHECK(n_out == 2 && !strcmp(out[0].request_id, "a") && out[0].seq_id == 3 &&
	      !strcmp(out[0].engine_join, "read-order+tie"), "a: seq %lld %s",
	      (long long)out[0].seq_id, out[0].engine_join);
	/* the one left to b is what a's choice left: as uncertain */
	CHECK(out[1].seq_id == 1 && !strcmp(out[1].engine_join, "read-order+tie") &&
	      out[0].t_first == out[1].t_first && out[0].t_last == out[1].t_last, "b: seq %lld %s",
	      (long long)out[1].seq_id, out[1].engine_join);
	CHECK(llama_join_stats(j)->ties == 2 && llama_join_stats(j)->joined == 2, "ties %llu",
	      (unsigned long long)llama_join_stats(j)->ties);
	llama_join_free(j);
}

/* Defined functions are found in the symbol tables, undefined ones are not;
 * in node-llama-cpp's build (make node-llama) libllama defines llama_decode
 * and the ABI marker, libllama-common neither. */
static void elf_symbols(void)
{
	CHECK(elf_defines("/proc/self/exe", "main"), "main");
	CHECK(!elf_defines("/proc/self/exe", "llama_decode"), "llama_decode here");
	CHECK(!elf_defines("/nonexistent", "main"), "a missing file");
	char lib[4096];
	CHECK(llama_lib_path(getpid(), lib, sizeof(lib)) == -1, "this process maps no llama.cpp");
	const char *dir = "build/node-llama/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64";
	char a[512], b[512];
	snprintf(a, sizeof(a), "%s/libllama.v0.5.0.so", dir);
	snprintf(b, sizeof(b), "%s/libllama-common.so", dir);
	if (access(a, R_OK))
		SKIP("node-llama-cpp is not installed in build/node-llama (make node-llama)");
	CHECK(elf_defines(a, "llama_decode") && elf_defines(a, "llama_model_load_from_file"),
	      "%s", a);
	CHECK(!elf_defines(b, "llama_decode"), "%s", b);
}

int main(void)
{
	RUN(generations_and_marks);
	RUN(failed_check_leaves_marks_out);
	RUN(ties_and_running_generations);
	RUN(equal_generations_are_a_tie);
	RUN(elf_symbols);
	return CHECK_DONE();
}
