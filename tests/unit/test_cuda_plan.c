/* test_cuda_plan.c - how the CUDA backend splits a step's tokens between the
 * paged decode kernel and the prefill kernel's tiles, and the documented
 * partition rule (daemon/cuda/kernels.h; pure host code, no GPU). */
#include <stdint.h>

#include "tests/unit/check.h"
#include "daemon/cuda/kernels.h"

/* Continuous batching: a long prompt chunk, three decodes, a short chunk. */
static void test_plan_mixed_step(void)
{
	int seq_start[] = { 0, 70, 71, 72, 73, 78 };
	int32_t dec[78], tiles[2 * (78 + 5)];
	int nd, nt;
	kpi_cuda_plan_attention(seq_start, 5, 2, dec, &nd, tiles, &nt); /* group 2: 16 tokens a tile */
	CHECK(nd == 3 && dec[0] == 70 && dec[1] == 71 && dec[2] == 72, "decodes %d", nd);
	CHECK(nt == 5 + 1, "tiles %d", nt);
	int covered = 0;
	for (int i = 0; i < 5; i++) {
		CHECK(tiles[2 * i] == 16 * i, "tile %d starts at %d", i, tiles[2 * i]);
		covered += tiles[2 * i + 1];
	}
	CHECK(covered == 70 && tiles[9] == 6, "first sequence tiled whole, last tile %d", tiles[9]);
	CHECK(tiles[10] == 73 && tiles[11] == 5, "chunk of 5 in one tile");
}

/* Every token lands in exactly one place, tiles never cross sequences and
 * hold at most 32 query rows, for every GQA group size. */
static void test_plan_covers_every_token_once(void)
{
	uint64_t r = 7;
	for (int round = 0; round < 500; round++) {
		int n = 1 + (int)((r = r * 6364136223846793005ull + 1) >> 60), seq_start[17] = { 0 };
		for (int s = 0; s < n; s++)
			seq_start[s + 1] = seq_start[s] + ((r = r * 6364136223846793005ull + 1) >> 62 ? 1 : 1 + (int)((r >> 20) % 300));
		int T = seq_start[n], group = 1 << (round % 4);
		int32_t dec[16 * 301], tiles[2 * (16 * 301 + 16)];
		int seen[16 * 301] = { 0 }, nd, nt;
		kpi_cuda_plan_attention(seq_start, n, group, dec, &nd, tiles, &nt);
		for (int i = 0; i < nd; i++)
			seen[dec[i]]++;
		for (int i = 0; i < nt; i++) {
			int a = tiles[2 * i], c = tiles[2 * i + 1];
			CHECK(c >= 1 && c * group <= KPI_CUDA_TILE_ROWS, "tile of %d tokens, group %d", c, group);
			int s = 0;
			while (seq_start[s + 1] <= a)
				s++;
			CHECK(a + c <= seq_start[s + 1], "tile crosses sequence %d", s);
			for (int t = a; t < a + c; t++)
				seen[t]++;
		}
		for (int t = 0; t < T; t++)
			CHECK(seen[t] == 1, "round %d: token %d planned %d times", round, t, seen[t]);
	}
}

static void test_partition_rule(void)
{
	/* 132 SMs (H100 SXM): a few long decodes partition, a full batch does not */
	CHECK(kpi_cuda_attn_use_partitions(4, 8, 4096, 132), "small batch, long context");
	CHECK(!kpi_cuda_attn_use_partitions(64, 8, 4096, 132), "64 x 8 = 512 CTAs fill the GPU");
	CHECK(!kpi_cuda_attn_use_partitions(1, 8, 512, 132), "one partition is no split");
	CHECK(kpi_cuda_attn_use_partitions(1, 8, 513, 132), "513 tokens: two partitions");
}

int main(void)
{
	RUN(test_plan_mixed_step);
	RUN(test_plan_covers_every_token_once);
	RUN(test_partition_rule);
	return CHECK_DONE();
}
