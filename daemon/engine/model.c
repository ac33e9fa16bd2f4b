/* model.c - loads a llama GGUF: checks every key and tensor shape the forward
 * pass relies on, and builds the SPM-style tokenizer (scored merges with
 * <0xXX> byte fallback). */
#include "daemon/engine/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "abi/kpi_ggml_types.h"
#include "daemon/engine/gguf.h"

/* ---- metadata ---------------------------------------------------------- */

static bool is_int_type(enum gguf_type t)
{
	return t == GGUF_UINT8 || t == GGUF_INT8 || t == GGUF_UINT16 || t == GGUF_INT16 ||
	       t == GGUF_UINT32 || t == GGUF_INT32 || t == GGUF_UINT64 || t == GGUF_INT64;
}

/* Integer key in [lo, hi]; missing is an error unless def >= lo. */
static int key_int(const struct gguf *g, const char *path, const char *key, int64_t lo, int64_t hi,
		   int64_t def, int64_t *out, char *err, size_t errlen)
{
	const struct gguf_kv *kv = gguf_find(g, key);
	if (!kv) {
		if (def >= lo) {
			*out = def;
			return 0;
		}
		snprintf(err, errlen, "%s: missing metadata key '%s' (required for llama models)", path, key);
		return -1;
	}
	if (!is_int_type(kv->type)) {
		snprintf(err, errlen, "%s: metadata key '%s' has type %d, want an integer", path, key, kv->type);
		return -1;
	}
	if (kv->v.i < lo || kv->v.i > hi) {
		snprintf(err, errlen, "%s: metadata key '%s' = %lld is out of range [%lld, %lld]", path, key,
			 (long long)kv->v.i, (long long)lo, (long long)hi);
		return -1;
	}
	*out = kv->v.i;
	return 0;
}

static int key_float(const struct gguf *g, const char *path, const char *key, double def, bool required,
		     float *out, char *err, size_t errlen)
{
	const struct gguf_kv *kv = gguf_find(g, key);
	if (!kv) {
		if (required) {
			snprintf(err, errlen, "%s: missing metadata key '%s' (required for llama models)", path, key);
			return -1;
		}
		*out = (float)def;
		return 0;
	}
	if (kv->type != GGUF_FLOAT32 && kv->type != GGUF_FLOAT64) {
		snprintf(err, errlen, "%s: metadata key '%s' has type %d, want a float", path, key, kv->type);
		return -1;
	}
	if (!(kv->v.f > 0)) {
		snprintf(err, errlen, "%s: metadata key '%s' = %g must be positive", path, key, kv->v.f);
		return -1;
	}
	*out = (float)kv->v.f;
	return 0;
}

static const struct gguf_kv *key_array(const struct gguf *g, const char *path, const char *key,
				       enum gguf_type want, bool want_int, char *err, size_t errlen)
{
	const struct gguf_kv *kv = gguf_find(g, key);
	if (!kv) {
		snprintf(err, errlen, "%s: missing metadata key '%s' (required for the tokenizer)", path, key);
		return NULL;
	}
	if (kv->type != GGUF_ARRAY || (want_int ? !is_int_type(kv->arr_type) || kv->arr_type == GGUF_UINT64 ||
							  kv->arr_type == GGUF_INT64
						: kv->arr_type != want)) {
		snprintf(err, errlen, "%s: metadata key '%s' has the wrong type (want an array of %s)", path, key,
			 want_int ? "32-bit integers" : want == GGUF_STRING ? "strings" : "float32");
		return NULL;
	}
	return kv;
}

/* ---- tensors ----------------------------------------------------------- */

/* A matrix may be F32, F16, Q8_0, Q4_0 or Q4_K (gguf_open has checked that
 * its rows are whole blocks and its bytes lie inside the file); a norm is F32. */

static int load_tensor(const struct gguf *g, const char *path, const char *name, int64_t rows,
		       int64_t cols, bool optional, struct mtensor *out, size_t *bytes, char *err,
		       size_t errlen)
{
	const struct gguf_tensor *t = gguf_tensor(g, name);
	memset(out, 0, sizeof(*out));
	if (!t) {
		if (optional)
			return 0;
		snprintf(err, errlen, "%s: missing tensor '%s'", path, name);
		return -1;
	}
	if (t->type != GGML_F32 && t->type != GGML_F16 && !ggml_type_is_quant(t->type)) {
		snprintf(err, errlen,
			 "%s: tensor '%s' has type %s (%u); this engine reads F32, F16, Q8_0, Q4_0 and Q4_K (requantize every tensor to one of them with llama.cpp: llama-quantize --pure IN.gguf OUT.gguf Q4_K)",
			 path, name, ggml_type_name(t->type), t->type);
		return -1;
	}
	bool vec = rows == 1;
	if ((vec && (t->n_dims != 1 || t->ne[0] != cols)) ||
	    (!vec && (t->n_dims != 2 || t->ne[0] != cols || t->ne[1] != rows))) {
		snprintf(err, errlen, "%s: tensor '%s' has shape [%lld, %lld], want [%lld, %lld]", path, name,
			 (long long)t->ne[0], (long long)(t->n_dims > 1 ? t->ne[1] : 1), (long long)cols,
			 (long long)rows);
		return -1;
	}
	if (vec && t->type != GGML_F32) {
		snprintf(err, errlen, "%s: norm tensor '%s' has type %s; want F32", path, name,
			 ggml_type_name(t->type));
		return -1;
	}
	out->data = t->data;
	out->type = t->type;
	out->rows = rows;
	out->cols = cols;
	*bytes += t->nbytes;
	return 0;
}

/* ---- tokenizer --------------------------------------------------------- */

static const struct tokenizer *sort_tok;

static int cmp_piece(const void *a, const void *b)
{
	const struct tokenizer *t = sort_tok;
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	int lx = t->piece_len[x], ly = t->piece_len[y];
	int c = memcmp(t->pieces[x], t->pieces[y], lx < ly ? lx : ly);
	if (c)
		return c;
	return lx != ly ? (lx < ly ? -1 : 1) : (x < y ? -1 : 1);
}

int32_t tokenizer_lookup(const struct tokenizer *t, const char *s, size_t n)
{
	int lo = 0, hi = t->n_vocab - 1;
	while (lo <= hi) {
		int mid = (lo + hi) / 2;
		int32_t id = t->sorted[mid];
		size_t l = t->piece_len[id];
		int c = memcmp(t->pieces[id], s, l < n ? l : n);
		if (c == 0)
			c = l == n ? 0 : (l < n ? -1 : 1);
		if (c == 0) {
			/* leftmost of duplicates: the lowest id */
			while (mid > 0) {
				int32_t p = t->sorted[mid - 1];
				if ((size_t)t->piece_len[p] != n || memcmp(t->pieces[p], s, n))
					break;
				mid--;
			}
			return t->sorted[mid];
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

static int tokenizer_build(struct tokenizer *t, const struct gguf *g, const char *path, char *err,
			   size_t errlen)
{
	const struct gguf_kv *model = gguf_find(g, "tokenizer.ggml.model");
	if (!model || model->type != GGUF_STRING) {
		snprintf(err, errlen, "%s: missing metadata key 'tokenizer.ggml.model' (want \"llama\")", path);
		return -1;
	}
	if (!gguf_str_eq(model->str, "llama")) {
		snprintf(err, errlen,
			 "%s: tokenizer.ggml.model is \"%.*s\"; this engine implements the SPM-style \"llama\" tokenizer only",
			 path, (int)model->str.n, model->str.s);
		return -1;
	}
	const struct gguf_kv *toks = key_array(g, path, "tokenizer.ggml.tokens", GGUF_STRING, false, err, errlen);
	if (!toks)
		return -1;
	const struct gguf_kv *scores = key_array(g, path, "tokenizer.ggml.scores", GGUF_FLOAT32, false, err, errlen);
	if (!scores)
		return -1;
	const struct gguf_kv *types = key_array(g, path, "tokenizer.ggml.token_type", 0, true, err, errlen);
	if (!types)
		return -1;
	if (toks->arr_n == 0 || toks->arr_n > (1u << 24) || scores->arr_n != toks->arr_n ||
	    types->arr_n != toks->arr_n) {
		snprintf(err, errlen,
			 "%s: tokenizer arrays disagree: %llu tokens, %llu scores, %llu token types",
			 path, (unsigned long long)toks->arr_n, (unsigned long long)scores->arr_n,
			 (unsigned long long)types->arr_n);
		return -1;
	}
	int n = (int)toks->arr_n;
	t->n_vocab = n;
	t->pieces = calloc(n, sizeof(*t->pieces));
	t->piece_len = calloc(n, sizeof(*t->piece_len));
	t->scores = calloc(n, sizeof(*t->scores));
	t->kinds = calloc(n, 1);
	t->sorted = calloc(n, sizeof(*t->sorted));
	for (int b = 0; b < 256; b++)
		t->byte_token[b] = -1;
	t->unk_id = -1;
	const uint8_t *p = toks->arr; /* already bounds-checked by gguf_open */
	int tsz = types->arr_type == GGUF_UINT8 || types->arr_type == GGUF_INT8 ? 1
		  : types->arr_type == GGUF_UINT16 || types->arr_type == GGUF_INT16 ? 2 : 4;
	for (int i = 0; i < n; i++) {
		uint64_t len;
		memcpy(&len, p, 8);
		p += 8;
		t->pieces[i] = malloc(len + 1);
		memcpy(t->pieces[i], p, len);
		t->pieces[i][len] = 0;
		t->piece_len[i] = (int)len;
		p += len;
		memcpy(&t->scores[i], scores->arr + 4 * (size_t)i, 4);
		int32_t kind = 0;
		memcpy(&kind, types->arr + (size_t)tsz * i, tsz);
		t->kinds[i] = (uint8_t)kind;
		t->sorted[i] = i;
		unsigned byte;
		/* %X takes a sign: "<0x-4>" must not index byte_token[] */
		if (kind == TOK_BYTE && len == 6 && sscanf(t->pieces[i], "<0x%2X>", &byte) == 1 &&
		    byte < 256)
			t->byte_token[byte] = i;
		if (kind == TOK_UNKNOWN && t->unk_id < 0)
			t->unk_id = i;
	}
	sort_tok = t;
	qsort(t->sorted, n, sizeof(int32_t), cmp_piece);
	t->escape_spaces = tokenizer_lookup(t, "\xe2\x96\x81", 3) >= 0;
	return 0;
}

static void tokenizer_free(struct tokenizer *t)
{
	for (int i = 0; t->pieces && i < t->n_vocab; i++)
		free(t->pieces[i]);
	free(t->pieces);
	free(t->piece_len);
	free(t->scores);
	free(t->kinds);
	free(t->sorted);
}

/* SPM encoding: start from UTF-8 characters, repeatedly merge the adjacent
 * pair whose concatenation is the highest-scoring vocabulary piece (leftmost
 * on ties), then emit pieces, spelling unknown ones as byte tokens. */
/* A candidate merge of adjacent symbols left and right, with the versions
 * both had when it was queued. */
struct bigram {
	float score;
	int left, right;
	unsigned ver_l, ver_r;
};

/* Heap order: higher score first, then the leftmost pair. */
static bool bigram_before(const struct bigram *a, const struct bigram *b)
{
	return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void bigram_push(const struct tokenizer *t, const char *s, const int *start,
			const int *slen, const unsigned *ver, struct bigram *heap, size_t *nh,
			int left, int right)
{
	int32_t id = tokenizer_lookup(t, s + start[left], slen[left] + slen[right]);
	if (id < 0)
		return;
	struct bigram b = { t->scores[id], left, right, ver[left], ver[right] };
	size_t i = (*nh)++;
	while (i > 0 && bigram_before(&b, &heap[(i - 1) / 2])) {
		heap[i] = heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	heap[i] = b;
}

static struct bigram bigram_pop(struct bigram *heap, size_t *nh)
{
	struct bigram top = heap[0], last = heap[--(*nh)];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= *nh)
			break;
		if (c + 1 < *nh && bigram_before(&heap[c + 1], &heap[c]))
			c++;
		if (!bigram_before(&heap[c], &last))
			break;
		heap[i] = heap[c];
		i = c;
	}
	heap[i] = last;
	return top;
}

int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, int32_t *out, int max)
{
	size_t cap = t->escape_spaces ? len * 3 : len;
	char *s = malloc(cap + 1);
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		if (t->escape_spaces && text[i] == ' ') {
			memcpy(s + n, "\xe2\x96\x81", 3);
			n += 3;
		} else {
			s[n++] = text[i];
		}
	}
	/* symbols: [start, start+len) in s, doubly linked */
	int *start = malloc(sizeof(int) * (n + 1)), *slen = malloc(sizeof(int) * (n + 1));
	int *next = malloc(sizeof(int) * (n + 1)), *prev = malloc(sizeof(int) * (n + 1));
	int ns = 0;
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)s[i];
		int cl = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
		if (i + cl > n)
			cl = (int)(n - i);
		start[ns] = (int)i;
		slen[ns] = cl;
		prev[ns] = ns - 1;
		next[ns] = ns + 1;
		ns++;
		i += cl;
	}
	if (ns)
		next[ns - 1] = -1;
	/* Merge the best-scoring adjacent pair first (leftmost on ties), as
	 * SentencePiece does. A max-heap of candidate pairs keeps this
	 * O(n log n): a linear scan per merge made long prompts quadratic,
	 * which one request could use to stall the I/O thread. Entries go
	 * stale when either side changes; each side's version tells. */
	struct bigram *heap = malloc(sizeof(*heap) * (3 * (size_t)ns + 1));
	unsigned *ver = calloc((size_t)ns + 1, sizeof(*ver));
	size_t nh = 0;
	for (int i = 0; i + 1 < ns; i++)
		bigram_push(t, s, start, slen, ver, heap, &nh, i, i + 1);
	while (nh) {
		struct bigram b = bigram_pop(heap, &nh);
		int l = b.left, r = b.right;
		if (next[l] != r || ver[l] != b.ver_l || ver[r] != b.ver_r)
			continue;
		slen[l] += slen[r];
		slen[r] = 0;
		ver[l]++;
		ver[r]++;
		next[l] = next[r];
		if (next[r] >= 0)
			prev[next[r]] = l;
		if (prev[l] >= 0)
			bigram_push(t, s, start, slen, ver, heap, &nh, prev[l], l);
		if (next[l] >= 0)
			bigram_push(t, s, start, slen, ver, heap, &nh, l, next[l]);
	}
	free(heap);
	free(ver);
	int count = 0;
	for (int i = 0; i >= 0 && i < ns; i = next[i]) {
		int32_t id = tokenizer_lookup(t, s + start[i], slen[i]);
		if (id >= 0 && t->kinds[id] != TOK_BYTE && t->kinds[id] != TOK_CONTROL) {
			if (count < max)
				out[count] = id;
			count++;
			continue;
		}
		for (int b = 0; b < slen[i]; b++) {
			int32_t bt = t->byte_token[(unsigned char)s[start[i] + b]];
			if (bt < 0)
				bt = t->unk_id;
			if (bt < 0)
				continue; /* no byte fallback and no <unk>: nothing can spell it */
			if (count < max)
				out[count] = bt;
			count++;
		}
	}
	free(s);
	free(start);
	free(slen);
	free(next);
	free(prev);
	return count;
}

int tokenizer_piece(const struct tokenizer *t, int32_t id, char *buf, size_t buflen)
{
	if (id < 0 || id >= t->n_vocab)
		return -1;
	if (t->kinds[id] == TOK_CONTROL || t->kinds[id] == TOK_UNKNOWN || t->kinds[id] == TOK_UNUSED)
		return 0;
	if (t->kinds[id] == TOK_BYTE) {
		unsigned byte;
		if (sscanf(t->pieces[id], "<0x%2X>", &byte) != 1)
			return 0;
		if (buflen >= 1)
			buf[0] = (char)byte;
		return 1;
	}
	const char *p = t->pieces[id];
	int n = 0;
	for (int i = 0; i < t->piece_len[id];) {
		if (t->escape_spaces && i + 3 <= t->piece_len[id] && memcmp(p + i, "\xe2\x96\x81", 3) == 0) {
			if ((size_t)n < buflen)
				buf[n] = ' ';
			i += 3;
		} else {
			if ((size_t)n < buflen)
				buf[n] = p[i];
			i++;
		}
		n++;
	}
	return n;
}

/* ---- model ------------------------------------------------------------- */

/* The file's weight type, named as kpi-agent names it (abi/kpi_ggml_types.h). */
static void weight_type(const struct gguf *g, char *out, size_t len)
{
	uint64_t params[KPI_GGML_TYPE_COUNT + 1] = { 0 };
	for (uint64_t i = 0; i < g->n_tensors; i++) {
		const struct gguf_tensor *t = &g->tensors[i];
		if (t->n_dims < 2)
			continue;
		uint64_t n = 1;
		for (uint32_t d = 0; d < t->n_dims; d++)
			n *= (uint64_t)t->ne[d];
		params[t->type < KPI_GGML_TYPE_COUNT ? t->type : KPI_GGML_TYPE_COUNT] += n;
	}
	kpi_weight_type_name(params, out, len);
}

struct model *model_load(const char *path, char *err, size_t errlen)
{
	struct gguf *g = gguf_open(path, err, errlen);
	if (!g)
		return NULL;
	struct model *m = calloc(1, sizeof(*m));
	m->gguf = g;
	struct model_info *mi = &m->info;

	const struct gguf_kv *arch = gguf_find(g, "general.architecture");
	if (!arch || arch->type != GGUF_STRING) {
		snprintf(err, errlen, "%s: missing metadata key 'general.architecture' (want \"llama\")", path);
		goto fail;
	}
	if (!gguf_str_eq(arch->str, "llama")) {
		snprintf(err, errlen,
			 "%s: general.architecture is \"%.*s\"; this engine runs \"llama\" models only", path,
			 (int)arch->str.n, arch->str.s);
		goto fail;
	}
	const struct gguf_kv *name = gguf_find(g, "general.name");
	snprintf(mi->name, sizeof(mi->name), "%.*s", name && name->type == GGUF_STRING ? (int)name->str.n : 5,
		 name && name->type == GGUF_STRING ? name->str.s : "llama");

	int64_t v;
	if (key_int(g, path, "llama.context_length", 1, 1 << 20, -1, &v, err, errlen))
		goto fail;
	mi->context_length = (int)v;
	if (key_int(g, path, "llama.embedding_length", 1, 1 << 16, -1, &v, err, errlen))
		goto fail;
	mi->dim = (int)v;
	if (key_int(g, path, "llama.block_count", 1, 1024, -1, &v, err, errlen))
		goto fail;
	mi->n_layers = (int)v;
	if (key_int(g, path, "llama.feed_forward_length", 1, 1 << 18, -1, &v, err, errlen))
		goto fail;
	mi->ffn_dim = (int)v;
	if (key_int(g, path, "llama.attention.head_count", 1, 1024, -1, &v, err, errlen))
		goto fail;
	mi->n_heads = (int)v;
	if (key_int(g, path, "llama.attention.head_count_kv", 1, 1024, mi->n_heads, &v, err, errlen))
		goto fail;
	mi->n_kv_heads = (int)v;
	if (mi->dim % mi->n_heads) {
		snprintf(err, errlen, "%s: llama.embedding_length %d is not a multiple of llama.attention.head_count %d",
			 path, mi->dim, mi->n_heads);
		goto fail;
	}
	if (key_int(g, path, "llama.rope.dimension_count", 2, 1 << 12, mi->dim / mi->n_heads, &v, err, errlen))
		goto fail;
	mi->head_dim = (int)v;
	if (mi->head_dim != mi->dim / mi->n_heads || mi->head_dim % 2) {
		snprintf(err, errlen,
			 "%s: llama.rope.dimension_count %d must equal embedding_length / head_count = %d (partial RoPE is not supported)",
			 path, mi->head_dim, mi->dim / mi->n_heads);
		goto fail;
	}
	if (mi->n_heads % mi->n_kv_heads) {
		snprintf(err, errlen, "%s: llama.attention.head_count %d is not a multiple of head_count_kv %d",
			 path, mi->n_heads, mi->n_kv_heads);
		goto fail;
	}
	if (key_float(g, path, "llama.attention.layer_norm_rms_epsilon", 0, true, &m->norm_eps, err, errlen) ||
	    key_float(g, path, "llama.rope.freq_base", 10000.0, false, &m->rope_base, err, errlen))
		goto fail;

	if (tokenizer_build(&m->tok, g, path, err, errlen))
		goto fail;
	mi->vocab_size = m->tok.n_vocab;
	if (key_int(g, path, "tokenizer.ggml.bos_token_id", 0, mi->vocab_size - 1, 1, &v, err, errlen))
		goto fail;
	mi->bos_id = (int32_t)v;
	if (key_int(g, path, "tokenizer.ggml.eos_token_id", 0, mi->vocab_size - 1, 2, &v, err, errlen))
		goto fail;
	mi->eos_id = (int32_t)v;

	int dim = mi->dim, hd = mi->head_dim, nv = mi->vocab_size;
	size_t bytes = 0;
	if (load_tensor(g, path, "token_embd.weight", nv, dim, false, &m->tok_embd, &bytes, err, errlen) ||
	    load_tensor(g, path, "output_norm.weight", 1, dim, false, &m->output_norm, &bytes, err, errlen) ||
	    load_tensor(g, path, "output.weight", nv, dim, true, &m->output, &bytes, err, errlen))
		goto fail;
	bytes -= mtensor_bytes(&m->tok_embd);
	if (!m->output.data) { /* tied embeddings */
		m->output = m->tok_embd;
		bytes += mtensor_bytes(&m->tok_embd);
	}
	bytes += ggml_row_bytes(m->tok_embd.type, dim); /* one embedding row per token */
	m->layers = calloc(mi->n_layers, sizeof(*m->layers));
	for (int l = 0; l < mi->n_layers; l++) {
		struct model_layer *L = &m->layers[l];
		char n[96];
#define T(field, suffix, rows, cols)                                                            \
	snprintf(n, sizeof(n), "blk.%d.%s.weight", l, suffix);                                  \
	if (load_tensor(g, path, n, rows, cols, false, &L->field, &bytes, err, errlen))         \
		goto fail;
		T(attn_norm, "attn_norm", 1, dim);
		T(wq, "attn_q", mi->n_heads * hd, dim);
		T(wk, "attn_k", mi->n_kv_heads * hd, dim);
		T(wv, "attn_v", mi->n_kv_heads * hd, dim);
		T(wo, "attn_output", dim, mi->n_heads * hd);
		T(ffn_norm, "ffn_norm", 1, dim);
		T(w_gate, "ffn_gate", mi->ffn_dim, dim);
		T(w_up, "ffn_up", mi->ffn_dim, dim);
		T(w_down, "ffn_down", dim, mi->ffn_dim);
#undef T
	}
	m->weight_bytes = bytes;
	weight_type(g, mi->weight_type, sizeof(mi->weight_type));
	return m;
fail:
	model_free(m);
	return NULL;
}

size_t mtensor_bytes(const struct mtensor *t)
{
	return (size_t)t->rows * ggml_row_bytes(t->type, t->cols);
}

unsigned model_matrix_kinds(const struct model *m)
{
	unsigned kinds = 0;
	for (int l = -1; l < m->info.n_layers; l++) {
		const struct model_layer *L = l >= 0 ? &m->layers[l] : NULL;
		const struct mtensor *t[7] = { &m->tok_embd, &m->output };
		if (L) {
			const struct mtensor *lt[7] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down };
			memcpy(t, lt, sizeof(t));
		}
		for (int k = 0; k < (L ? 7 : 2); k++)
			kinds |= ggml_type_is_quant(t[k]->type) ? MODEL_QUANT_MATRICES : MODEL_FLOAT_MATRICES;
	}
	return kinds;
}

size_t model_matrix_bytes(const struct model *m)
{
	size_t n = mtensor_bytes(&m->tok_embd);
	if (m->output.data != m->tok_embd.data)
		n += mtensor_bytes(&m->output);
	for (int l = 0; l < m->info.n_layers; l++) {
		const struct model_layer *L = &m->layers[l];
		const struct mtensor *t[7] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down };
		for (int k = 0; k < 7; k++)
			n += mtensor_bytes(t[k]);
	}
	return n;
}

void model_release_pages(const struct mtensor *t)
{
	/* every tensor points into the read-only file mapping of gguf_open,
	 * where MADV_DONTNEED drops page-table entries, never data */
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = ((uintptr_t)t->data + pg - 1) & ~(pg - 1);
	uintptr_t hi = ((uintptr_t)t->data + mtensor_bytes(t)) & ~(pg - 1);
	if (hi > lo)
		madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

void model_free(struct model *m)
{
	if (!m)
		return;
	tokenizer_free(&m->tok);
	free(m->layers);
	gguf_close(m->gguf);
	free(m);
}
