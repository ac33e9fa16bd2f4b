/* test_cupti_split.c - a step's GPU busy time and its token-share split across
 * the step's sequences (abi/kpi_gpu_split.h, used by the agent too). */
#include <math.h>
#include <stdint.h>

#include "tests/unit/check.h"
#include "abi/kpi_gpu_split.h"

static void test_busy_union(void)
{
	struct kpi_gpu_span s[] = {
		{ 100, 200 }, { 150, 250 }, /* overlap on two streams: 100..250 */
		{ 300, 300 },               /* empty */
		{ 400, 500 }, { 500, 600 }, /* touching: 400..600 */
		{ 420, 430 },               /* inside */
		{ 90, 80 },                 /* malformed: ignored */
	};
	CHECK(kpi_gpu_busy_ns(s, 7) == 150 + 200, "busy %llu", (unsigned long long)kpi_gpu_busy_ns(s, 7));
	CHECK(kpi_gpu_busy_ns(s, 0) == 0, "none");
}

static uint64_t sum(const uint64_t *v, int n)
{
	uint64_t t = 0;
	for (int i = 0; i < n; i++)
		t += v[i];
	return t;
}

/* One prefill chunk of 509 tokens and three decoding sequences. */
static void test_split_prefill_and_decode(void)
{
	uint32_t tok[] = { 509, 1, 1, 1 };
	uint64_t out[4];
	CHECK(kpi_gpu_split_by_tokens(1000000, tok, 4, out) == 0, "split");
	CHECK(sum(out, 4) == 1000000, "sum %llu", (unsigned long long)sum(out, 4));
	CHECK_NEAR(out[0], 1000000.0 * 509 / 512, 1.0);
	for (int i = 1; i < 4; i++)
		CHECK_NEAR(out[i], 1000000.0 / 512, 1.0);
}

/* Sums are exact and each share within 1 ns, for awkward numbers too. */
static void test_split_exact_sum_random(void)
{
	uint64_t seed = 42;
	for (int round = 0; round < 2000; round++) {
		uint32_t tok[256];
		uint64_t out[256], gpu;
		int n = 1 + (int)((seed = seed * 6364136223846793005ull + 1) >> 33) % 256;
		uint64_t total = 0;
		for (int i = 0; i < n; i++) {
			seed = seed * 6364136223846793005ull + 1;
			tok[i] = (seed >> 40) % 3 == 0 ? (uint32_t)((seed >> 20) % 2048) : 1;
			total += tok[i];
		}
		seed = seed * 6364136223846793005ull + 1;
		gpu = (seed >> 11) % 5000000000000ull;
		CHECK(kpi_gpu_split_by_tokens(gpu, tok, n, out) == 0, "split");
		CHECK(sum(out, n) == gpu, "round %d: sum %llu != %llu", round,
		      (unsigned long long)sum(out, n), (unsigned long long)gpu);
		for (int i = 0; i < n; i++)
			CHECK(fabs((double)out[i] - (double)gpu * tok[i] / (double)total) <= 1.0 + 1e-6 * (double)out[i],
			      "round %d seq %d: %llu vs %g", round, i, (unsigned long long)out[i],
			      (double)gpu * tok[i] / (double)total);
	}
}

static void test_split_no_tokens_is_even(void)
{
	uint32_t tok[3] = { 0, 0, 0 };
	uint64_t out[3];
	CHECK(kpi_gpu_split_by_tokens(10, tok, 3, out) == 0, "split");
	CHECK(sum(out, 3) == 10, "sum");
	for (int i = 0; i < 3; i++)
		CHECK(out[i] == 3 || out[i] == 4, "out[%d]=%llu", i, (unsigned long long)out[i]);
	CHECK(kpi_gpu_split_by_tokens(10, tok, 0, out) == -1, "n=0 must be refused");
}

int main(void)
{
	RUN(test_busy_union);
	RUN(test_split_prefill_and_decode);
	RUN(test_split_exact_sum_random);
	RUN(test_split_no_tokens_is_even);
	return CHECK_DONE();
}
