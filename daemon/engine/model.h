/* model.h - a llama-architecture model loaded from GGUF: hyperparameters,
 * tensor views into the mapping (shapes checked at load), and the SPM-style
 * tokenizer from tokenizer.ggml.*. Read-only after model_load. */
#ifndef KPI_ENGINE_MODEL_H
#define KPI_ENGINE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/engine.h"

struct gguf;

/* A weight matrix or vector in the mapping. Matrices are row-major with
 * rows = ne[1] outputs of cols = ne[0] inputs each (ggml's layout). */
struct mtensor {
	const void *data;
	uint32_t type; /* GGML_F32, GGML_F16, GGML_Q8_0, GGML_Q4_0 or GGML_Q4_K */
	int64_t rows, cols;
};

struct model_layer {
	struct mtensor attn_norm; /* (dim) */
	struct mtensor wq;        /* (n_heads * head_dim, dim) */
	struct mtensor wk;        /* (n_kv_heads * head_dim, dim) */
	struct mtensor wv;        /* (n_kv_heads * head_dim, dim) */
	struct mtensor wo;        /* (dim, n_heads * head_dim) */
	struct mtensor ffn_norm;  /* (dim) */
	struct mtensor w_gate;    /* (ffn_dim, dim) */
	struct mtensor w_up;      /* (ffn_dim, dim) */
	struct mtensor w_down;    /* (dim, ffn_dim) */
};

enum token_kind { TOK_NORMAL = 1, TOK_UNKNOWN = 2, TOK_CONTROL = 3, TOK_USER = 4,
		  TOK_UNUSED = 5, TOK_BYTE = 6 };

struct tokenizer {
	int n_vocab;
	char **pieces;      /* [n_vocab] NUL-terminated (GGUF strings copied) */
	int *piece_len;     /* [n_vocab] */
	float *scores;      /* [n_vocab] */
	uint8_t *kinds;     /* [n_vocab] enum token_kind */
	int32_t *sorted;    /* ids sorted by piece, for lookup */
	int32_t byte_token[256]; /* <0xXX> ids, -1 where absent */
	int32_t unk_id;
	bool escape_spaces; /* vocab has U+2581 pieces: spaces become "▁" (SPM) */
};

struct model {
	struct model_info info;
	float norm_eps;
	float rope_base;
	struct mtensor tok_embd;    /* (vocab, dim) */
	struct mtensor output_norm; /* (dim) */
	struct mtensor output;      /* (vocab, dim); tok_embd when tied */
	struct model_layer *layers; /* [n_layers] */
	struct tokenizer tok;
	struct gguf *gguf;
	size_t weight_bytes;        /* every tensor read per token, for bandwidth math */
};

/* NULL with one line in err naming the key, tensor or limit at fault. */
struct model *model_load(const char *path, char *err, size_t errlen);
void model_free(struct model *m);

/* Bytes of t's data. */
size_t mtensor_bytes(const struct mtensor *t);
/* Which kinds of matrices the model has: F32/F16 ones (the FMA kernels of
 * kernels.h) and quantized ones (Q8_0, Q4_0, Q4_K: qmatmul.h). */
enum { MODEL_FLOAT_MATRICES = 1, MODEL_QUANT_MATRICES = 2 };
unsigned model_matrix_kinds(const struct model *m);
/* Bytes of all the model's matrices (the embeddings counted once when tied). */
size_t model_matrix_bytes(const struct model *m);
/* Hands back this process's pages of t's data (the whole pages inside it) to
 * the mapped file, for a backend that keeps its own copy: a later read
 * faults them in again from the page cache, so nothing is lost. */
void model_release_pages(const struct mtensor *t);

int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, int32_t *out, int max);
int tokenizer_piece(const struct tokenizer *t, int32_t id, char *buf, size_t buflen);
int32_t tokenizer_lookup(const struct tokenizer *t, const char *s, size_t n);

#endif
