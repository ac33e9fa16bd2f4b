/* test_engine_util.h - shared by the engine unit tests: a scratch directory
 * removed at exit, the built-in presets written into it, and a writer of
 * small llama GGUF files with knobs for breaking them. */
#ifndef KPI_TEST_ENGINE_UTIL_H
#define KPI_TEST_ENGINE_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/engine/gguf.h"
#include "daemon/engine/model_make.h"

static char tdir[256];

static void tdir_cleanup(void)
{
	char cmd[300];
	if (tdir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tdir);
		if (system(cmd)) {
		}
	}
}

static const char *tpath(const char *name)
{
	static char buf[4][512];
	static int k;
	if (!tdir[0]) {
		snprintf(tdir, sizeof(tdir), "/tmp/kpi-engine-test-XXXXXX");
		if (!mkdtemp(tdir)) {
			perror("mkdtemp");
			exit(1);
		}
		atexit(tdir_cleanup);
	}
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof(buf[k]), "%s/%s", tdir, name);
	return buf[k];
}

/* The preset written once per test binary. */
static __attribute__((unused)) const char *preset_path(const char *preset)
{
	static char paths[2][512];
	int i = strcmp(preset, "tiny") == 0 ? 0 : 1;
	if (!paths[i][0]) {
		char name[64], err[256];
		snprintf(name, sizeof(name), "%s.gguf", preset);
		snprintf(paths[i], sizeof(paths[i]), "%s", tpath(name));
		if (model_make(paths[i], preset, 0, err, sizeof(err))) {
			fprintf(stderr, "model_make: %s\n", err);
			exit(1);
		}
	}
	return paths[i];
}

/* A small llama GGUF (dim 8, 1 layer, 2 heads, 1 KV head, FFN 16, context 32)
 * with a byte vocabulary plus extra scored pieces; the knobs break one thing. */
struct mini_opts {
	const char *arch;        /* default "llama" */
	const char *skip_key;    /* leave this metadata key out */
	const char *skip_tensor; /* leave this tensor out */
	const char *bad_type_tensor; /* write this tensor as Q6_K (a type the engine does not serve) */
	const char *const *extra;    /* extra vocabulary pieces (normal tokens) */
	const float *extra_scores;
	int n_extra;
};

static __attribute__((unused)) void write_mini(const char *path, const struct mini_opts *o)
{
	enum { DIM = 8, FFN = 16, CTX = 32, NV_BASE = 259 };
	int nv = NV_BASE + o->n_extra;
	const char **toks = calloc(nv, sizeof(char *));
	float *scores = calloc(nv, sizeof(float));
	int32_t *types = calloc(nv, sizeof(int32_t));
	static char bn[256][8];
	toks[0] = "<unk>"; toks[1] = "<s>"; toks[2] = "</s>";
	types[0] = 2; types[1] = types[2] = 3;
	for (int b = 0; b < 256; b++) {
		snprintf(bn[b], 8, "<0x%02X>", b);
		toks[3 + b] = bn[b];
		types[3 + b] = 6;
	}
	for (int i = 0; i < o->n_extra; i++) {
		toks[NV_BASE + i] = o->extra[i];
		scores[NV_BASE + i] = o->extra_scores[i];
		types[NV_BASE + i] = 1;
	}
	FILE *f = fopen(path, "wb");
	struct gguf_writer *w = gguf_w_begin(f);
#define SKIP_KEY(k) (o->skip_key && strcmp(o->skip_key, k) == 0)
	if (!SKIP_KEY("general.architecture"))
		gguf_w_kv_str(w, "general.architecture", o->arch ? o->arch : "llama");
	if (!SKIP_KEY("llama.context_length")) gguf_w_kv_u32(w, "llama.context_length", CTX);
	if (!SKIP_KEY("llama.embedding_length")) gguf_w_kv_u32(w, "llama.embedding_length", DIM);
	if (!SKIP_KEY("llama.block_count")) gguf_w_kv_u32(w, "llama.block_count", 1);
	if (!SKIP_KEY("llama.feed_forward_length")) gguf_w_kv_u32(w, "llama.feed_forward_length", FFN);
	if (!SKIP_KEY("llama.attention.head_count")) gguf_w_kv_u32(w, "llama.attention.head_count", 2);
	if (!SKIP_KEY("llama.attention.head_count_kv")) gguf_w_kv_u32(w, "llama.attention.head_count_kv", 1);
	if (!SKIP_KEY("llama.attention.layer_norm_rms_epsilon"))
		gguf_w_kv_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
	if (!SKIP_KEY("tokenizer.ggml.model")) gguf_w_kv_str(w, "tokenizer.ggml.model", "llama");
	if (!SKIP_KEY("tokenizer.ggml.tokens")) gguf_w_kv_arr_str(w, "tokenizer.ggml.tokens", toks, nv);
	if (!SKIP_KEY("tokenizer.ggml.scores")) gguf_w_kv_arr_f32(w, "tokenizer.ggml.scores", scores, nv);
	if (!SKIP_KEY("tokenizer.ggml.token_type")) gguf_w_kv_arr_i32(w, "tokenizer.ggml.token_type", types, nv);
#undef SKIP_KEY
	struct { const char *name; int nd; int64_t ne[2]; } ts[] = {
		{ "token_embd.weight", 2, { DIM, nv } },
		{ "output_norm.weight", 1, { DIM, 1 } },
		{ "blk.0.attn_norm.weight", 1, { DIM, 1 } },
		{ "blk.0.attn_q.weight", 2, { DIM, DIM } },
		{ "blk.0.attn_k.weight", 2, { DIM, DIM / 2 } },
		{ "blk.0.attn_v.weight", 2, { DIM, DIM / 2 } },
		{ "blk.0.attn_output.weight", 2, { DIM, DIM } },
		{ "blk.0.ffn_norm.weight", 1, { DIM, 1 } },
		{ "blk.0.ffn_gate.weight", 2, { DIM, FFN } },
		{ "blk.0.ffn_up.weight", 2, { DIM, FFN } },
		{ "blk.0.ffn_down.weight", 2, { FFN, DIM } },
	};
	int n_t = sizeof(ts) / sizeof(ts[0]);
	uint32_t type[16];
	for (int i = 0; i < n_t; i++) {
		type[i] = o->bad_type_tensor && !strcmp(o->bad_type_tensor, ts[i].name) ? 14 : GGML_F32;
		if (o->skip_tensor && !strcmp(o->skip_tensor, ts[i].name))
			continue;
		gguf_w_tensor(w, ts[i].name, type[i], ts[i].nd, ts[i].ne);
	}
	gguf_w_header(w);
	float *buf = calloc((size_t)DIM * nv + FFN * DIM, sizeof(float));
	for (int i = 0; i < n_t; i++) {
		if (o->skip_tensor && !strcmp(o->skip_tensor, ts[i].name))
			continue;
		size_t n = ts[i].ne[0] * ts[i].ne[1];
		for (size_t j = 0; j < n; j++)
			buf[j] = ts[i].nd == 1 ? 1.0f : (float)((j * 7 + i) % 13) / 13.0f - 0.5f;
		/* a Q6_K tensor gets no bytes: the loader refuses it by type first */
		gguf_w_data(w, buf, type[i] == 14 ? 0 : n * 4);
	}
	gguf_w_end(w);
	fclose(f);
	free(buf);
	free(toks);
	free(scores);
	free(types);
}

#endif
