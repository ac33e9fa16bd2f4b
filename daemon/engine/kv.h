/* kv.h - the KV block manager: a fixed pool of block ids with reference
 * counts (so a prefix-sharing feature can point two tables at one block),
 * and per-sequence block tables (position p lives in ids[p / block_size]).
 * It only does bookkeeping; the backend owns the storage. */
#ifndef KPI_ENGINE_KV_H
#define KPI_ENGINE_KV_H

#include <stdint.h>

struct kv_pool {
	int n_blocks;
	int n_free;
	int32_t *free_ids;  /* stack of free ids, [n_blocks] */
	uint16_t *refs;     /* [n_blocks] */
};

struct block_table {
	int32_t *ids;
	int n, cap;
};

int kv_pool_init(struct kv_pool *p, int n_blocks);
void kv_pool_free(struct kv_pool *p);

/* -1 when the pool is empty. */
int32_t kv_block_alloc(struct kv_pool *p);
void kv_block_ref(struct kv_pool *p, int32_t id);
/* Drops one reference; the block is free again at zero. */
void kv_block_unref(struct kv_pool *p, int32_t id);

/* Blocks a table needs to cover n_pos positions, beyond what it holds. */
int kv_blocks_needed(const struct block_table *t, int n_pos, int block_size);
/* Grows t to cover n_pos positions; all or nothing. Returns 0 or -1 (pool
 * too small right now, or table capacity exceeded). */
int kv_table_reserve(struct kv_pool *p, struct block_table *t, int n_pos, int block_size);
/* Drops every block of t (n = 0; capacity kept). */
void kv_table_release(struct kv_pool *p, struct block_table *t);

#endif
