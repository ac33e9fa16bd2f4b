/* kv.c - KV block bookkeeping: a LIFO free stack (recently freed blocks are
 * the warmest in cache) and reference counts. */
#include "daemon/engine/kv.h"

#include <assert.h>
#include <stdlib.h>

int kv_pool_init(struct kv_pool *p, int n_blocks)
{
	p->n_blocks = n_blocks;
	p->free_ids = malloc(sizeof(int32_t) * n_blocks);
	p->refs = calloc(n_blocks, sizeof(uint16_t));
	if (!p->free_ids || !p->refs)
		return -1;
	/* pop order 0, 1, 2, ...: block ids grow with use, which reads well in traces */
	for (int i = 0; i < n_blocks; i++)
		p->free_ids[i] = n_blocks - 1 - i;
	p->n_free = n_blocks;
	return 0;
}

void kv_pool_free(struct kv_pool *p)
{
	free(p->free_ids);
	free(p->refs);
	p->free_ids = NULL;
	p->refs = NULL;
}

int32_t kv_block_alloc(struct kv_pool *p)
{
	if (p->n_free == 0)
		return -1;
	int32_t id = p->free_ids[--p->n_free];
	p->refs[id] = 1;
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
	if (--p->refs[id] == 0)
		p->free_ids[p->n_free++] = id;
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
