/* kv.h - the KV block manager: a fixed pool of block ids with reference
 * counts (two tables may point at one block), per-sequence block tables
 * (position p lives in ids[p / block_size]), and the prefix cache: full
 * blocks keyed by a hash of every token up to their end, kept after their
 * last reference until the pool needs them (least recently freed first).
 * It only does bookkeeping; the backend owns the storage. */
#ifndef KPI_ENGINE_KV_H
#define KPI_ENGINE_KV_H

#include <stdbool.h>
#include <stdint.h>

struct kv_pool {
	int n_blocks;
	int n_free;         /* blocks an alloc can return: clean + cached unreferenced */
	int32_t *free_ids;  /* stack of clean free ids, [n_blocks] */
	int n_clean;
	uint16_t *refs;     /* [n_blocks] */
	uint32_t *gen;      /* [n_blocks] bumped each time a block is handed out: what
			     * anything kept about its content is checked against */

	/* prefix cache (all NULL / 0 unless kv_pool_enable_cache) */
	uint64_t *hash;     /* [n_blocks] content key, 0: not cached */
	int32_t *lru_prev, *lru_next; /* cached blocks without a reference, oldest first */
	int32_t lru_head, lru_tail;
	int n_cached;       /* blocks with a key, referenced or not */
	int32_t *slots;     /* open addressing: block id or -1, [cap] */
	uint32_t cap_mask;
	uint64_t evictions;
};

struct block_table {
	int32_t *ids;
	int n, cap;
};

int kv_pool_init(struct kv_pool *p, int n_blocks);
/* Turns the prefix cache on; -1 when out of memory. */
int kv_pool_enable_cache(struct kv_pool *p);
void kv_pool_free(struct kv_pool *p);

/* -1 when the pool is empty (a clean block first, else the oldest cached one,
 * whose key is forgotten). */
int32_t kv_block_alloc(struct kv_pool *p);
void kv_block_ref(struct kv_pool *p, int32_t id);
/* Drops one reference; at zero the block is free again (kept for the cache
 * when it has a key). */
void kv_block_unref(struct kv_pool *p, int32_t id);

/* Blocks a table needs to cover n_pos positions, beyond what it holds. */
int kv_blocks_needed(const struct block_table *t, int n_pos, int block_size);
/* Grows t to cover n_pos positions; all or nothing. Returns 0 or -1 (pool
 * too small right now, or table capacity exceeded). */
int kv_table_reserve(struct kv_pool *p, struct block_table *t, int n_pos, int block_size);
/* Drops every block of t (n = 0; capacity kept). */
void kv_table_release(struct kv_pool *p, struct block_table *t);

/* ---- prefix cache ---- */

/* The key of a block of block_size tokens following the blocks whose key is
 * prev (0 for the first block): never 0. */
uint64_t kv_block_key(uint64_t prev, const int32_t *tokens, int block_size);
/* The cached block with this key, or -1. */
int32_t kv_cache_find(const struct kv_pool *p, uint64_t key);
/* Appends cached block id to t with a reference (out of the free count when
 * it had none). */
void kv_cache_take(struct kv_pool *p, struct block_table *t, int32_t id);
/* Gives block id (full, referenced) the key; false when another block has it
 * already (the block then stays uncached). */
bool kv_cache_insert(struct kv_pool *p, int32_t id, uint64_t key);

#endif
