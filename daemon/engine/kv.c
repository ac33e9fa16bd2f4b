/* kv.c - KV block bookkeeping: a LIFO free stack (recently freed blocks are
 * the warmest in cache), reference counts, and the prefix cache's key table
 * (open addressing, linear probing, backward-shift deletion: nothing is
 * allocated after init) with its LRU list of unreferenced cached blocks. */
#include "daemon/engine/kv.h"

#include <assert.h>
#include <stdlib.h>
#include <xxhash.h>

int kv_pool_init(struct kv_pool *p, int n_blocks)
{
	*p = (struct kv_pool){ .n_blocks = n_blocks, .lru_head = -1, .lru_tail = -1 };
	p->free_ids = malloc(sizeof(int32_t) * n_blocks);
	p->refs = calloc(n_blocks, sizeof(uint16_t));
	p->gen = calloc(n_blocks, sizeof(uint32_t));
	if (!p->free_ids || !p->refs || !p->gen)
		return -1;
	/* pop order 0, 1, 2, ...: block ids grow with use, which reads well in traces */
	for (int i = 0; i < n_blocks; i++)
		p->free_ids[i] = n_blocks - 1 - i;
	p->n_clean = p->n_free = n_blocks;
	return 0;
}

int kv_pool_enable_cache(struct kv_pool *p)
{
	uint32_t cap = 16;
	while (cap < 2u * (uint32_t)p->n_blocks)
		cap *= 2;
	p->hash = calloc(p->n_blocks, sizeof(uint64_t));
	p->lru_prev = malloc(sizeof(int32_t) * p->n_blocks);
	p->lru_next = malloc(sizeof(int32_t) * p->n_blocks);
	p->slots = malloc(sizeof(int32_t) * cap);
	if (!p->hash || !p->lru_prev || !p->lru_next || !p->slots)
		return -1;
	for (uint32_t i = 0; i < cap; i++)
		p->slots[i] = -1;
	p->cap_mask = cap - 1;
	return 0;
}

void kv_pool_free(struct kv_pool *p)
{
	free(p->free_ids);
	free(p->refs);
	free(p->gen);
	free(p->hash);
	free(p->lru_prev);
	free(p->lru_next);
	free(p->slots);
	p->free_ids = p->lru_prev = p->lru_next = p->slots = NULL;
	p->refs = NULL;
	p->gen = NULL;
	p->hash = NULL;
}

/* ---- the key table ---- */

static uint32_t slot_of(const struct kv_pool *p, uint64_t key)
{
	return (uint32_t)(key ^ key >> 29) & p->cap_mask;
}

int32_t kv_cache_find(const struct kv_pool *p, uint64_t key)
{
	if (!p->hash || !key)
		return -1;
	for (uint32_t i = slot_of(p, key);; i = (i + 1) & p->cap_mask) {
		int32_t id = p->slots[i];
		if (id < 0)
			return -1;
		if (p->hash[id] == key)
			return id;
	}
}

bool kv_cache_insert(struct kv_pool *p, int32_t id, uint64_t key)
{
	if (!p->hash || p->hash[id] || kv_cache_find(p, key) >= 0)
		return false;
	uint32_t i = slot_of(p, key);
	while (p->slots[i] >= 0)
		i = (i + 1) & p->cap_mask;
	p->slots[i] = id;
	p->hash[id] = key;
	p->n_cached++;
	return true;
}

/* Forgets block id's key (backward-shift deletion keeps every probe chain whole). */
static void cache_forget(struct kv_pool *p, int32_t id)
{
	uint32_t i = slot_of(p, p->hash[id]);
	while (p->slots[i] != id)
		i = (i + 1) & p->cap_mask;
	for (uint32_t j = (i + 1) & p->cap_mask; p->slots[j] >= 0; j = (j + 1) & p->cap_mask) {
		uint32_t home = slot_of(p, p->hash[p->slots[j]]);
		/* slot j's entry may move to i when i lies cyclically in [home, j) */
		if (((j - home) & p->cap_mask) >= ((j - i) & p->cap_mask)) {
			p->slots[i] = p->slots[j];
			i = j;
		}
	}
	p->slots[i] = -1;
	p->hash[id] = 0;
	p->n_cached--;
}

static void lru_unlink(struct kv_pool *p, int32_t id)
{
	int32_t a = p->lru_prev[id], b = p->lru_next[id];
	if (a >= 0)
		p->lru_next[a] = b;
	else
		p->lru_head = b;
	if (b >= 0)
		p->lru_prev[b] = a;
	else
		p->lru_tail = a;
}

static void lru_push_tail(struct kv_pool *p, int32_t id)
{
	p->lru_prev[id] = p->lru_tail;
	p->lru_next[id] = -1;
	if (p->lru_tail >= 0)
		p->lru_next[p->lru_tail] = id;
	else
		p->lru_head = id;
	p->lru_tail = id;
}

uint64_t kv_block_key(uint64_t prev, const int32_t *tokens, int block_size)
{
	uint64_t k = XXH3_64bits_withSeed(tokens, sizeof(int32_t) * (size_t)block_size, prev);
	return k ? k : 1;
}

void kv_cache_take(struct kv_pool *p, struct block_table *t, int32_t id)
{
	if (p->refs[id] == 0) {
		lru_unlink(p, id);
		p->n_free--;
	}
	p->refs[id]++;
	t->ids[t->n++] = id;
}

/* ---- blocks ---- */

int32_t kv_block_alloc(struct kv_pool *p)
{
	int32_t id;
	if (p->n_clean > 0) {
		id = p->free_ids[--p->n_clean];
	} else if (p->hash && p->lru_head >= 0) {
		id = p->lru_head; /* the cached block freed longest ago */
		lru_unlink(p, id);
		cache_forget(p, id);
		p->evictions++;
	} else {
		return -1;
	}
	p->n_free--;
	p->refs[id] = 1;
	p->gen[id]++;
	return id;
}

void kv_block_ref(struct kv_pool *p, int32_t id)
{
	assert(p->refs[id] > 0 && p->refs[id] < UINT16_MAX);
	p->refs[id]++;
}

void kv_block_unref(struct kv_pool *p, int32_t id)
{
	assert(p->refs[id] > 0);
	if (--p->refs[id] > 0)
		return;
	if (p->hash && p->hash[id])
		lru_push_tail(p, id);
	else
		p->free_ids[p->n_clean++] = id;
	p->n_free++;
}

int kv_blocks_needed(const struct block_table *t, int n_pos, int block_size)
{
	int want = (n_pos + block_size - 1) / block_size;
	return want > t->n ? want - t->n : 0;
}

int kv_table_reserve(struct kv_pool *p, struct block_table *t, int n_pos, int block_size)
{
	int need = kv_blocks_needed(t, n_pos, block_size);
	if (need > p->n_free || t->n + need > t->cap)
		return -1;
	for (int i = 0; i < need; i++)
		t->ids[t->n++] = kv_block_alloc(p);
	return 0;
}

void kv_table_release(struct kv_pool *p, struct block_table *t)
{
	while (t->n > 0)
		kv_block_unref(p, t->ids[--t->n]);
}
