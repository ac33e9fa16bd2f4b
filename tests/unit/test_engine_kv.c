/* test_engine_kv.c - the block manager: alloc until empty, free, reference
 * counts, all-or-nothing table growth, and no leaked or doubly owned block
 * after 10k random operations. */
#include "tests/unit/check.h"
#include <stdbool.h>

#include "daemon/engine/kv.h"

static uint64_t rs = 7;
static int irand(int n)
{
	rs = rs * 6364136223846793005ull + 1442695040888963407ull;
	return (int)((rs >> 33) % n);
}

static void test_alloc_until_empty_and_free(void)
{
	struct kv_pool p;
	CHECK(kv_pool_init(&p, 10) == 0, "init");
	int32_t ids[10];
	int seen[10] = { 0 };
	for (int i = 0; i < 10; i++) {
		ids[i] = kv_block_alloc(&p);
		CHECK(ids[i] >= 0 && ids[i] < 10 && !seen[ids[i]], "alloc %d gave %d", i, ids[i]);
		seen[ids[i]] = 1;
	}
	CHECK(kv_block_alloc(&p) == -1 && p.n_free == 0, "empty pool");
	kv_block_ref(&p, ids[3]);
	kv_block_unref(&p, ids[3]);
	CHECK(p.n_free == 0, "still referenced once");
	kv_block_unref(&p, ids[3]);
	CHECK(p.n_free == 1 && kv_block_alloc(&p) == ids[3], "freed block comes back");
	for (int i = 0; i < 10; i++)
		kv_block_unref(&p, ids[i]);
	CHECK(p.n_free == 10, "all free");
	kv_pool_free(&p);
}

static void test_table_reserve_all_or_nothing(void)
{
	struct kv_pool p;
	kv_pool_init(&p, 4);
	int32_t a_ids[8], b_ids[8];
	struct block_table a = { a_ids, 0, 8 }, b = { b_ids, 0, 8 };
	CHECK(kv_table_reserve(&p, &a, 33, 16) == 0 && a.n == 3, "33 positions = 3 blocks of 16");
	CHECK(kv_table_reserve(&p, &a, 48, 16) == 0 && a.n == 3, "48 still fits in 3");
	CHECK(kv_table_reserve(&p, &b, 32, 16) == -1 && b.n == 0 && p.n_free == 1, "no partial growth");
	CHECK(kv_blocks_needed(&b, 32, 16) == 2, "needed");
	kv_table_release(&p, &a);
	CHECK(a.n == 0 && p.n_free == 4, "release frees all");
	struct block_table small = { a_ids, 0, 2 };
	CHECK(kv_table_reserve(&p, &small, 48, 16) == -1, "table capacity is a limit too");
	kv_pool_free(&p);
}

/* Random alloc / grow / share / preempt (release) / finish over 16 tables:
 * the owned blocks plus the free stack always partition the pool. */
static void test_10k_random_ops_no_leak(void)
{
	enum { NB = 48, NT = 16, CAP = 40, BS = 4 };
	struct kv_pool p;
	kv_pool_init(&p, NB);
	int32_t ids[NT][CAP];
	struct block_table t[NT];
	int pos[NT] = { 0 };
	for (int i = 0; i < NT; i++)
		t[i] = (struct block_table){ ids[i], 0, CAP };
	int32_t held[64]; /* extra references taken with kv_block_ref */
	int n_held = 0;
	int grown = 0, refused = 0, released = 0;
	for (int op = 0; op < 10000; op++) {
		int i = irand(NT);
		switch (irand(7)) {
		case 0: case 1: case 2: case 3: { /* grow by 1..10 positions, as a step would */
			int want = pos[i] + 1 + irand(10);
			if (kv_table_reserve(&p, &t[i], want, BS) == 0) {
				pos[i] = want;
				grown++;
			} else {
				refused++;
			}
			break;
		}
		case 4: case 5: /* preempt or finish */
			released += t[i].n > 0;
			kv_table_release(&p, &t[i]);
			pos[i] = 0;
			break;
		case 6: /* share: an extra holder takes a reference, or one drops it */
			if (n_held && irand(2)) {
				int k = irand(n_held);
				kv_block_unref(&p, held[k]);
				held[k] = held[--n_held];
			} else if (t[i].n && n_held < 64) {
				held[n_held] = t[i].ids[irand(t[i].n)];
				kv_block_ref(&p, held[n_held++]);
			}
			break;
		}
		/* invariant: refs match owners, free stack holds exactly the rest */
		int refs[NB] = { 0 }, in_free[NB] = { 0 };
		for (int k = 0; k < NT; k++)
			for (int j = 0; j < t[k].n; j++)
				refs[t[k].ids[j]]++;
		for (int k = 0; k < n_held; k++)
			refs[held[k]]++;
		for (int j = 0; j < p.n_clean; j++) {
			CHECK(!in_free[p.free_ids[j]], "op %d: block %d twice in the free stack", op, p.free_ids[j]);
			in_free[p.free_ids[j]] = 1;
		}
		for (int b = 0; b < NB; b++) {
			CHECK(p.refs[b] == refs[b], "op %d: block %d has %d refs, want %d", op, b, p.refs[b], refs[b]);
			CHECK(in_free[b] == (refs[b] == 0), "op %d: block %d free=%d with %d refs", op, b, in_free[b], refs[b]);
		}
	}
	CHECK(grown > 2000 && refused > 200 && released > 1000, "ops: %d grown, %d refused, %d released",
	      grown, refused, released);
	printf("     %d grows, %d refused (pool dry), %d releases\n", grown, refused, released);
	for (int i = 0; i < NT; i++)
		kv_table_release(&p, &t[i]);
	while (n_held)
		kv_block_unref(&p, held[--n_held]);
	CHECK(p.n_free == NB, "leak: %d of %d free at the end", p.n_free, NB);
	kv_pool_free(&p);
}

/* The prefix cache under 20k random operations: every block is exactly one
 * of referenced, clean and free, or cached without a reference (in the LRU
 * list); a key finds the block that has it; a cached block comes back only
 * by its key until the pool needs it, and then oldest first. */
static void test_prefix_cache_random_ops(void)
{
	enum { NB = 40, NT = 8, CAP = 32 };
	struct kv_pool p;
	CHECK(kv_pool_init(&p, NB) == 0 && kv_pool_enable_cache(&p) == 0, "init");
	int32_t ids[NT][CAP];
	struct block_table t[NT];
	for (int i = 0; i < NT; i++)
		t[i] = (struct block_table){ ids[i], 0, CAP };
	int taken = 0, inserted = 0, evicted0 = 0;
	for (int op = 0; op < 20000; op++) {
		int i = irand(NT);
		uint64_t key = 1 + (uint64_t)irand(60) * 0x9E3779B97F4A7C15ull; /* 60 keys: repeats */
		switch (irand(5)) {
		case 0: { /* take a cached block by key, else allocate one and key it */
			if (t[i].n == CAP)
				break;
			int32_t id = kv_cache_find(&p, key);
			bool mine = false;
			for (int j = 0; j < t[i].n && id >= 0; j++)
				mine |= t[i].ids[j] == id;
			if (id >= 0 && !mine) {
				kv_cache_take(&p, &t[i], id);
				taken++;
			} else if (id < 0 && p.n_free > 0) {
				int32_t b = kv_block_alloc(&p);
				CHECK(b >= 0, "alloc with %d free", p.n_free);
				t[i].ids[t[i].n++] = b;
				CHECK(kv_cache_insert(&p, b, key), "insert a new key");
				CHECK(!kv_cache_insert(&p, b, key + 1), "a block has one key");
				inserted++;
			}
			break;
		}
		case 1: case 2: /* grow without keys */
			kv_table_reserve(&p, &t[i], (t[i].n + 1 + irand(3)) * 16, 16);
			break;
		case 3: case 4: /* release (finish or preempt) */
			kv_table_release(&p, &t[i]);
			break;
		}
		int refs[NB] = { 0 }, state[NB] = { 0 };
		for (int k = 0; k < NT; k++)
			for (int j = 0; j < t[k].n; j++)
				refs[t[k].ids[j]]++;
		for (int j = 0; j < p.n_clean; j++)
			state[p.free_ids[j]] |= 1;
		int n_lru = 0;
		for (int32_t b = p.lru_head; b >= 0; b = p.lru_next[b], n_lru++) {
			CHECK(n_lru <= NB, "op %d: LRU list loops", op);
			state[b] |= 2;
			CHECK(p.hash[b] != 0, "op %d: block %d in the LRU list has no key", op, b);
		}
		CHECK(p.n_free == p.n_clean + n_lru, "op %d: free %d = clean %d + cached %d", op, p.n_free,
		      p.n_clean, n_lru);
		int n_keyed = 0;
		for (int b = 0; b < NB; b++) {
			CHECK(p.refs[b] == refs[b], "op %d: block %d refs %d, want %d", op, b, p.refs[b], refs[b]);
			int want = refs[b] ? 0 : p.hash[b] ? 2 : 1;
			CHECK(state[b] == want, "op %d: block %d state %d, want %d", op, b, state[b], want);
			if (p.hash[b]) {
				n_keyed++;
				CHECK(kv_cache_find(&p, p.hash[b]) == b, "op %d: key of block %d finds another", op, b);
			}
		}
		CHECK(n_keyed == p.n_cached, "op %d: %d keyed, count says %d", op, n_keyed, p.n_cached);
		if (op == 10000)
			evicted0 = (int)p.evictions;
	}
	CHECK(taken > 1000 && inserted > 500 && p.evictions > (uint64_t)evicted0,
	      "%d taken, %d inserted, %llu evictions", taken, inserted, (unsigned long long)p.evictions);
	printf("     %d hits taken, %d keyed, %llu evicted\n", taken, inserted,
	       (unsigned long long)p.evictions);
	for (int i = 0; i < NT; i++)
		kv_table_release(&p, &t[i]);
	CHECK(p.n_free == NB, "leak: %d of %d free", p.n_free, NB);
	kv_pool_free(&p);
}

/* Eviction order: the cached block freed longest ago goes first, clean ones before any. */
static void test_prefix_cache_evicts_oldest(void)
{
	struct kv_pool p;
	kv_pool_init(&p, 4);
	kv_pool_enable_cache(&p);
	int32_t a = kv_block_alloc(&p), b = kv_block_alloc(&p), c = kv_block_alloc(&p);
	kv_cache_insert(&p, a, 11);
	kv_cache_insert(&p, b, 22);
	kv_block_unref(&p, b); /* b freed first, then a */
	kv_block_unref(&p, a);
	kv_block_unref(&p, c); /* c has no key: clean */
	CHECK(p.n_free == 4 && p.n_cached == 2, "free %d cached %d", p.n_free, p.n_cached);
	int32_t x = kv_block_alloc(&p), y = kv_block_alloc(&p);
	CHECK(x != a && x != b && y != a && y != b, "clean blocks first: %d %d", x, y);
	CHECK(kv_block_alloc(&p) == b && kv_cache_find(&p, 22) == -1, "then the oldest cached (b)");
	CHECK(kv_cache_find(&p, 11) == a, "a still cached");
	kv_pool_free(&p);
}

int main(void)
{
	RUN(test_prefix_cache_random_ops);
	RUN(test_prefix_cache_evicts_oldest);
	RUN(test_alloc_until_empty_and_free);
	RUN(test_table_reserve_all_or_nothing);
	RUN(test_10k_random_ops_no_leak);
	return CHECK_DONE();
}
