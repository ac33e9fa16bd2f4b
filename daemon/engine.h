/* engine.h - the inference engine API that the HTTP server drives.
 * Single-threaded by contract: one thread (the server's engine thread) calls
 * everything here; the engine uses its own worker pool inside engine_step. */
#ifndef KPI_ENGINE_H
#define KPI_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "abi/kpi_reasons.h" /* enum kpi_finish_reason: why a sequence ended */

enum engine_batching { ENGINE_BATCH_CONTINUOUS = 0, ENGINE_BATCH_STATIC = 1 };
enum engine_backend_kind { ENGINE_BACKEND_CPU = 0, ENGINE_BACKEND_CUDA = 1 };

struct engine_kv_out;
struct engine_kv_pin;

struct engine_config {
	const char *model_path;  /* GGUF file */
	int max_seqs;            /* running sequences per step (default 64) */
	int max_batched_tokens;  /* tokens per step, prefill + decode (default 2048) */
	int kv_blocks;           /* KV pool size in blocks (0: fit max_seqs full contexts, capped) */
	int block_size;          /* tokens per KV block (default 16) */
	int threads;             /* worker threads (0: number of online CPUs) */
	enum engine_batching batching;
	enum engine_backend_kind backend;
	bool prefix_cache;       /* reuse cached full blocks of earlier prompts (docs/engine.md) */
	bool fingerprint;        /* hash the model file: its identity in a KV transfer */
	bool kv_out_copy;        /* copy kv_layer's KV out of the pool even where the backend
				  * could hand it out in place (tests; the copy's cost) */
	bool kv_digests;         /* take each block's KV digest per layer when the forward pass
				  * fills it, while in cache, and keep it for every later
				  * kv_layer of it (a prefill worker: the stream's checksum) */
	/* Prefill side of a KV transfer: called on the engine thread, inside
	 * engine_step, for a sequence submitted with engine_submit_prefill: at its
	 * admission, for every layer, with the positions [0, c) the prefix cache
	 * held (when c > 0), before any compute; then once per layer of the step
	 * that completes its prefill, as soon as that layer is computed, with the
	 * positions [c, n_prompt) (the transfer overlaps the rest of the forward
	 * pass). The callee takes what *out holds (struct engine_kv_out). */
	void (*kv_layer)(void *ctx, struct engine_kv_out *out);
	void *kv_ctx;
};

/* One layer's K and V of positions [first_pos, first_pos + n_pos) of a
 * prefill-only request, in the KV stream's order (abi/kpi_kv_wire.h): block
 * by block, K [n_kv_heads][slots][head_dim] then V, in the cache's dtype;
 * len bytes, either copied out (data) or where they stand in the KV pool
 * (iov), whose blocks stay out of reuse until engine_kv_unpin. */
struct engine_kv_out {
	uint64_t id;
	int layer, first_pos, n_pos;
	size_t len;
	void *data;                /* engine_kv_buffer, or NULL (out of memory, or iov) */
	struct iovec *iov;         /* malloc'd: the runs, in that order */
	int n_iov;
	uint64_t *digests;         /* malloc'd: XXH3-64 of each block's bytes (K then V), the
				    * stream's chunk digests (abi/kpi_kv_wire.h); NULL: out of memory */
	int n_chunks;
	struct engine_kv_pin *pin; /* iov's blocks, referenced (engine_kv_unpin) */
};

struct model_info {
	char name[64];         /* general.name */
	char weight_type[32];  /* "Q4_K", "F16", "Q4_K+Q6_K": abi/kpi_ggml_types.h */
	int vocab_size;
	int context_length;
	int dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim;
	int32_t bos_id, eos_id;
};

struct sampling_params {
	float temperature;  /* 0: greedy */
	float top_p;        /* 1: off */
	uint64_t seed;
	int max_tokens;
	bool ignore_eos;
};

enum engine_event_kind {
	ENGINE_EV_SCHEDULED = 1,  /* entered the running set (again, after a preemption) */
	ENGINE_EV_TOKEN,          /* one generated token; first one also sets .first */
	ENGINE_EV_PREEMPTED,      /* blocks freed, back at the head of the queue */
	ENGINE_EV_FINISHED,       /* done; its blocks are already free */
};

struct engine_event {
	enum engine_event_kind kind;
	uint64_t id;           /* the id given to engine_submit */
	int32_t token;         /* ENGINE_EV_TOKEN */
	bool first;            /* ENGINE_EV_TOKEN: the request's first output token */
	enum kpi_finish_reason reason; /* ENGINE_EV_FINISHED */
	int n_output;          /* ENGINE_EV_FINISHED: tokens generated */
	uint64_t sampler_state; /* ENGINE_EV_TOKEN of a prefill-only request: its sampler after this draw */
};

struct engine_stats {
	int running, waiting;
	int kv_blocks_total, kv_blocks_used, kv_blocks_free;
	uint64_t preemptions;      /* since start */
	uint64_t steps;            /* since start */
	uint64_t prompt_tokens, generation_tokens; /* since start */
	int last_step_tokens, last_step_seqs; /* the latest step's batch (prefill + decode) */
	const char *weight_type;   /* model_info's, for /metrics */
	const char *kernels;       /* engine_kernels() */
	uint64_t weight_bytes;     /* engine_weight_bytes() */
	uint64_t prefix_queries, prefix_hits; /* prompt tokens looked up in / found in the prefix cache */
	int kv_blocks_cached;      /* blocks holding a prefix-cache key */
};

/* The KV cache as a transfer sees it: the same on both ends or no transfer. */
struct engine_kv_layout {
	uint64_t fingerprint;     /* XXH3-64 of the model file (0 unless config.fingerprint) */
	int n_layers, n_kv_heads, head_dim;
	int dtype;                /* enum kpi_kv_wire_dtype (abi/kpi_kv_wire.h) */
	int dtype_bytes;
	int block_size;
	int vocab_size, context_length;
};

/* A prompt's KV computed elsewhere (engine_submit_decode). */
struct engine_kv_import {
	int n_tokens;             /* the prompt's length */
	int32_t first_token;      /* sampled by the prefill side */
	uint64_t sampler_state;   /* the sampler after that draw */
	void *data;               /* per layer: K then V, [n_kv_heads][n_tokens][head_dim];
				   * NULL: already in the blocks engine_kv_reserve gave */
};

/* Blocks held for a prompt whose KV is coming from elsewhere
 * (engine_kv_reserve): where each layer's rows go, so a transfer receives
 * them in place. */
struct engine_kv_in {
	uint64_t id;
	int n_tokens, n_blocks, block_size, n_layers, n_kv_heads;
	/* [n_layers][n_blocks][K, V][n_kv_heads]: block_size rows of head_dim
	 * elements each, slot 0 first (backend kv_rows) */
	void *rows[];
};

struct engine;

/* Loads the model and sizes the KV pool; on failure returns NULL and writes
 * one line naming what is wrong (key, tensor, path) into err. */
struct engine *engine_create(const struct engine_config *cfg, char *err, size_t errlen);
void engine_destroy(struct engine *e);
const struct model_info *engine_model(const struct engine *e);

/* Tokenizer. engine_tokenize returns the token count (may exceed max: call
 * again with a bigger buffer) or -1. Pieces are raw bytes, not NUL-terminated;
 * byte-fallback tokens give one byte each. */
int engine_tokenize(const struct engine *e, const char *text, size_t len, bool add_bos,
		    int32_t *out, int max);
int engine_token_piece(const struct engine *e, int32_t token, char *buf, size_t buflen);

/* Queues a request under the caller's id. Returns 0, or -E2BIG when
 * prompt + max_tokens can never fit (err says which limit: context or KV
 * pool, with both numbers), -EINVAL for an empty prompt or a token id out of
 * range. The prompt is copied. */
int engine_submit(struct engine *e, uint64_t id, const int32_t *prompt, int n_prompt,
		  const struct sampling_params *sp, char *err, size_t errlen);

/* A request whose only work here is its prefill: the KV goes out through
 * config.kv_layer layer by layer, its first token is sampled (the TOKEN
 * event carries the sampler's state) and it finishes (length). Errors as
 * engine_submit, and -ENOTSUP without kv_layer or a backend that reads KV. */
int engine_submit_prefill(struct engine *e, uint64_t id, const int32_t *prompt, int n_prompt,
			  const struct sampling_params *sp, char *err, size_t errlen);

/* A request whose prompt's KV and first token were computed elsewhere (kv,
 * taken on success: kv->data, from engine_kv_buffer, is freed by the
 * engine). It waits for a slot and blocks like any request; when admitted
 * its KV is copied into the cache (or is there already: kv->data NULL and
 * id's blocks from engine_kv_reserve, which it takes) and its first token
 * reported, then it decodes. Errors as engine_submit, and -EINVAL when kv
 * does not fit the prompt or vocabulary, or has neither data nor blocks. */
int engine_submit_decode(struct engine *e, uint64_t id, const int32_t *prompt, int n_prompt,
			 const struct sampling_params *sp, struct engine_kv_import *kv, char *err,
			 size_t errlen);

void engine_kv_layout(const struct engine *e, struct engine_kv_layout *l);
/* Holds the blocks of n_tokens positions for request id until its
 * engine_submit_decode with kv->data NULL (its KV written into them by then)
 * or engine_kv_release. Returns where they stand (malloc'd: the caller frees
 * it, the blocks stay), or NULL with err: the pool is not in host memory, has
 * too few free blocks now, or id holds some already. */
struct engine_kv_in *engine_kv_reserve(struct engine *e, uint64_t id, int n_tokens, char *err,
				       size_t errlen);
/* Gives id's held blocks back (the transfer failed, or did not use them). */
void engine_kv_release(struct engine *e, uint64_t id);
/* Lets the blocks of a kv_layer out's iov go back to the pool (they were
 * referenced until every byte left); engine thread only. NULL: nothing. */
void engine_kv_unpin(struct engine *e, struct engine_kv_pin *pin);
/* A buffer for transferred KV (a layer going out, a prompt's KV coming in),
 * freed with engine_kv_buffer_free (from any thread): tens of MB written once
 * each, so backed by huge pages where the kernel gives them (2 MiB faults,
 * not 4 KiB ones), and kept when freed for the next transfer (up to 32 of them,
 * 256 MiB in all), which then faults no page at all. NULL
 * when out of memory. */
void *engine_kv_buffer(size_t bytes);
void engine_kv_buffer_free(void *p);
/* Sets config.kv_layer and its context (before the first engine_step). */
void engine_set_kv_layer(struct engine *e, void (*fn)(void *, struct engine_kv_out *), void *ctx);

/* Ends a queued or running request now, freeing its blocks; its
 * ENGINE_EV_FINISHED (with reason) comes from the next engine_step. */
void engine_finish(struct engine *e, uint64_t id, enum kpi_finish_reason reason);

/* True when there is work for engine_step. */
bool engine_has_work(const struct engine *e);

/* Runs one batch step (schedules, runs the forward pass, samples) and writes
 * up to max events; returns the count. The server sizes events to
 * max_seqs * 3 + pending finishes; engine_events_max says how many. */
int engine_step(struct engine *e, struct engine_event *events, int max);
int engine_events_max(const struct engine *e);

void engine_stats(const struct engine *e, struct engine_stats *st);

/* The matmul kernels this engine's weights run on: the quantized types'
 * instruction set ("avx512-vnni", "avx-vnni", "avx2", "scalar"), the F32/F16
 * one ("avx512-fma", ...), both joined by "+" for a mixed file, or "cuda". */
const char *engine_kernels(const struct engine *e);
/* Bytes of the model's weights as the backend holds them (the file's
 * matrices repacked; F32 norms not counted). */
uint64_t engine_weight_bytes(const struct engine *e);

#endif
