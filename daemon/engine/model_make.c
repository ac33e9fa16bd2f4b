/* model_make.c - writes the built-in presets as GGUF: the keys llama.cpp's
 * loader requires, a 259-token byte vocabulary, matrices (F32, F16, Q8_0,
 * Q4_0 or Q4_K) of seeded uniform weights scaled so activations stay O(1)
 * through the layers: the same weights whatever the type. */
#include "daemon/engine/model_make.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/engine/gguf.h"
#include "daemon/engine/quant.h"

struct preset {
	const char *name;
	int dim, n_layers, n_heads, n_kv_heads, ffn_dim, context;
};

static const struct preset presets[] = {
	{ "tiny", 256, 4, 4, 2, 768, 2048 },
	{ "small", 768, 12, 12, 12, 2048, 2048 },
};

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

struct tensor_spec {
	char name[64];
	uint32_t type;
	int n_dims;
	int64_t ne[2];
	float scale; /* uniform in [-scale, scale]; 0: all ones (norms) */
};

/* general.file_type (llama.cpp's enum llama_ftype) of a file whose
 * matrices are all of one type. */
static uint32_t file_type(uint32_t type)
{
	switch (type) {
	case GGML_F32: return 0;  /* ALL_F32 */
	case GGML_Q4_0: return 2; /* MOSTLY_Q4_0 */
	case GGML_Q8_0: return 7; /* MOSTLY_Q8_0 */
	case GGML_Q4_K: return 14; /* MOSTLY_Q4_K_S: every matrix Q4_K */
	default: return 1;        /* MOSTLY_F16 */
	}
}

/* wt: the matrices' type; via: a quantized type the weights go through
 * first (written as wt = F32: the values that type's file holds), or wt. */
static int write_model(FILE *f, const struct preset *p, uint64_t seed, uint32_t wt, uint32_t via)
{
	int hd = p->dim / p->n_heads;
	enum { N_VOCAB = 3 + 256 };
	static char byte_names[256][8];
	const char *tokens[N_VOCAB];
	float scores[N_VOCAB];
	int32_t types[N_VOCAB];
	tokens[0] = "<unk>";
	tokens[1] = "<s>";
	tokens[2] = "</s>";
	types[0] = 2;
	types[1] = types[2] = 3;
	for (int b = 0; b < 256; b++) {
		snprintf(byte_names[b], sizeof(byte_names[b]), "<0x%02X>", b);
		tokens[3 + b] = byte_names[b];
		types[3 + b] = 6;
	}
	for (int i = 0; i < N_VOCAB; i++)
		scores[i] = 0;

	struct gguf_writer *w = gguf_w_begin(f);
	char name[64];
	snprintf(name, sizeof(name), "kpiscope-%s-s%llu", p->name, (unsigned long long)seed);
	gguf_w_kv_str(w, "general.architecture", "llama");
	gguf_w_kv_str(w, "general.name", name);
	gguf_w_kv_u32(w, "general.file_type", file_type(wt));
	if (ggml_type_is_quant(wt))
		gguf_w_kv_u32(w, "general.quantization_version", 2); /* llama.cpp's current */
	gguf_w_kv_u32(w, "general.alignment", 32);
	gguf_w_kv_u32(w, "llama.context_length", p->context);
	gguf_w_kv_u32(w, "llama.embedding_length", p->dim);
	gguf_w_kv_u32(w, "llama.block_count", p->n_layers);
	gguf_w_kv_u32(w, "llama.feed_forward_length", p->ffn_dim);
	gguf_w_kv_u32(w, "llama.attention.head_count", p->n_heads);
	gguf_w_kv_u32(w, "llama.attention.head_count_kv", p->n_kv_heads);
	gguf_w_kv_u32(w, "llama.rope.dimension_count", hd);
	gguf_w_kv_f32(w, "llama.rope.freq_base", 10000.0f);
	gguf_w_kv_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
	gguf_w_kv_u32(w, "llama.vocab_size", N_VOCAB);
	gguf_w_kv_str(w, "tokenizer.ggml.model", "llama");
	gguf_w_kv_arr_str(w, "tokenizer.ggml.tokens", tokens, N_VOCAB);
	gguf_w_kv_arr_f32(w, "tokenizer.ggml.scores", scores, N_VOCAB);
	gguf_w_kv_arr_i32(w, "tokenizer.ggml.token_type", types, N_VOCAB);
	gguf_w_kv_u32(w, "tokenizer.ggml.unknown_token_id", 0);
	gguf_w_kv_u32(w, "tokenizer.ggml.bos_token_id", 1);
	gguf_w_kv_u32(w, "tokenizer.ggml.eos_token_id", 2);
	gguf_w_kv_bool(w, "tokenizer.ggml.add_bos_token", true);
	gguf_w_kv_bool(w, "tokenizer.ggml.add_eos_token", false);
	gguf_w_kv_bool(w, "tokenizer.ggml.add_space_prefix", false);

	int n_specs = 3 + 9 * p->n_layers;
	struct tensor_spec *specs = calloc(n_specs, sizeof(*specs));
	int k = 0;
	float in_dim = 1.0f / sqrtf((float)p->dim), in_ffn = 1.0f / sqrtf((float)p->ffn_dim);
	float in_att = 1.0f / sqrtf((float)(p->n_heads * hd));
	/* uniform [-a, a] has std a / sqrt(3): scale = sqrt(3) / sqrt(fan_in) keeps unit gain */
	const float u = sqrtf(3.0f);
#define SPEC(nm, ty, nd, n0, n1, sc)                                                  \
	do {                                                                          \
		snprintf(specs[k].name, sizeof(specs[k].name), "%s", nm);             \
		specs[k].type = ty; specs[k].n_dims = nd;                             \
		specs[k].ne[0] = n0; specs[k].ne[1] = n1; specs[k].scale = sc; k++;   \
	} while (0)
	SPEC("token_embd.weight", wt, 2, p->dim, N_VOCAB, u);
	for (int l = 0; l < p->n_layers; l++) {
		char n[64];
#define LSPEC(suffix, ty, nd, n0, n1, sc) \
	snprintf(n, sizeof(n), "blk.%d.%s.weight", l, suffix); SPEC(n, ty, nd, n0, n1, sc)
		LSPEC("attn_norm", GGML_F32, 1, p->dim, 1, 0);
		LSPEC("attn_q", wt, 2, p->dim, p->n_heads * hd, u * in_dim);
		LSPEC("attn_k", wt, 2, p->dim, p->n_kv_heads * hd, u * in_dim);
		LSPEC("attn_v", wt, 2, p->dim, p->n_kv_heads * hd, u * in_dim);
		LSPEC("attn_output", wt, 2, p->n_heads * hd, p->dim, u * in_att);
		LSPEC("ffn_norm", GGML_F32, 1, p->dim, 1, 0);
		LSPEC("ffn_gate", wt, 2, p->dim, p->ffn_dim, u * in_dim);
		LSPEC("ffn_up", wt, 2, p->dim, p->ffn_dim, u * in_dim);
		LSPEC("ffn_down", wt, 2, p->ffn_dim, p->dim, u * in_ffn);
#undef LSPEC
	}
	SPEC("output_norm.weight", GGML_F32, 1, p->dim, 1, 0);
	/* Output gain 4: logits with some contrast, so sampling is not uniform. */
	SPEC("output.weight", wt, 2, p->dim, N_VOCAB, 4 * u * in_dim);
#undef SPEC
	for (int i = 0; i < k; i++)
		gguf_w_tensor(w, specs[i].name, specs[i].type, specs[i].n_dims, specs[i].ne);
	int rc = gguf_w_header(w);
	size_t max_n = 0;
	for (int i = 0; i < k; i++)
		if ((size_t)(specs[i].ne[0] * specs[i].ne[1]) > max_n)
			max_n = specs[i].ne[0] * specs[i].ne[1];
	float *fb = malloc(max_n * 4);
	void *out = malloc(max_n * 4), *qrow = malloc(max_n * 4);
	for (int i = 0; i < k && rc == 0; i++) {
		int64_t cols = specs[i].ne[0], rows = specs[i].n_dims > 1 ? specs[i].ne[1] : 1;
		size_t n = (size_t)cols * rows, row_bytes = ggml_row_bytes(specs[i].type, cols);
		uint64_t s = seed * 0x100000001b3ull + (uint64_t)i * 0x9e3779b97f4a7c15ull;
		for (size_t j = 0; j < n; j++)
			fb[j] = specs[i].scale == 0 ? 1.0f
				: specs[i].scale * (float)((double)(splitmix64(&s) >> 11) * 0x1p-52 - 1.0);
		for (int64_t r = 0; r < rows; r++) {
			float *row = fb + (size_t)r * cols;
			if (via != wt && specs[i].n_dims == 2) {
				quant_quantize_row(via, row, qrow, cols);
				quant_dequantize_row(via, qrow, row, cols);
			}
			quant_quantize_row(specs[i].type, row, (char *)out + (size_t)r * row_bytes, cols);
		}
		rc = gguf_w_data(w, out, row_bytes * rows);
	}
	free(fb);
	free(out);
	free(qrow);
	free(specs);
	if (gguf_w_end(w))
		rc = -1;
	return rc;
}

int model_make(const char *path, const char *preset, uint64_t seed, char *err, size_t errlen)
{
	return model_make_type(path, preset, seed, GGML_F16, err, errlen);
}

static int make(const char *path, const char *preset, uint64_t seed, uint32_t type, uint32_t via, char *err,
		size_t errlen);

int model_make_type(const char *path, const char *preset, uint64_t seed, uint32_t type, char *err,
		    size_t errlen)
{
	return make(path, preset, seed, type, type, err, errlen);
}

int model_make_dequantized(const char *path, const char *preset, uint64_t seed, uint32_t type, char *err,
			   size_t errlen)
{
	return make(path, preset, seed, GGML_F32, type, err, errlen);
}

static int make(const char *path, const char *preset, uint64_t seed, uint32_t type, uint32_t via, char *err,
		size_t errlen)
{
	const struct preset *p = NULL;
	for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++)
		if (strcmp(presets[i].name, preset ? preset : "tiny") == 0)
			p = &presets[i];
	if (!p) {
		snprintf(err, errlen, "unknown model preset '%s' (use tiny or small)", preset);
		return -1;
	}
	if ((type != GGML_F32 && type != GGML_F16 && !ggml_type_is_quant(type)) ||
	    (via != GGML_F32 && via != GGML_F16 && !ggml_type_is_quant(via))) {
		snprintf(err, errlen, "cannot write weights of type %u (use F32, F16, Q8_0, Q4_0 or Q4_K)",
			 type != via ? via : type);
		return -1;
	}
	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	FILE *f = fopen(tmp, "wb");
	if (!f) {
		snprintf(err, errlen, "cannot create %s: %s (is the directory writable?)", tmp, strerror(errno));
		return -1;
	}
	int rc = write_model(f, p, seed, type, via);
	if (fclose(f) != 0)
		rc = -1;
	if (rc) {
		snprintf(err, errlen, "writing %s failed: %s (disk full?)", tmp, strerror(errno));
		unlink(tmp);
		return -1;
	}
	if (rename(tmp, path) != 0) {
		snprintf(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
		unlink(tmp);
		return -1;
	}
	return 0;
}

static int mkdir_p(char *dir)
{
	for (char *s = dir + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = 0;
		int rc = mkdir(dir, 0755);
		*s = '/';
		if (rc && errno != EEXIST)
			return -1;
	}
	return mkdir(dir, 0755) && errno != EEXIST ? -1 : 0;
}

int model_default_path(char *buf, size_t n, char *err, size_t errlen)
{
	const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
	char dir[4096];
	if (xdg && *xdg)
		snprintf(dir, sizeof(dir), "%s/kpiscope", xdg);
	else if (home && *home)
		snprintf(dir, sizeof(dir), "%s/.cache/kpiscope", home);
	else {
		snprintf(err, errlen, "neither XDG_CACHE_HOME nor HOME is set: pass --model PATH "
			 "(make one with --make-model PATH)");
		return -1;
	}
	if ((size_t)snprintf(buf, n, "%s/tiny-s0.gguf", dir) >= n) {
		snprintf(err, errlen, "cache path %s/tiny-s0.gguf is too long", dir);
		return -1;
	}
	struct stat st;
	if (stat(buf, &st) == 0 && st.st_size > 0)
		return 0;
	if (mkdir_p(dir)) {
		snprintf(err, errlen, "cannot create cache directory %s: %s (set XDG_CACHE_HOME or pass --model)",
			 dir, strerror(errno));
		return -1;
	}
	return model_make(buf, "tiny", 0, err, errlen);
}

int model_make_parse_type(const char *name)
{
	static const uint32_t types[] = { GGML_F32, GGML_F16, GGML_Q8_0, GGML_Q4_0, GGML_Q4_K };
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (!strcasecmp(name, ggml_type_name(types[i])))
			return (int)types[i];
	return -1;
}
