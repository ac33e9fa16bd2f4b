/* kv_wire.c - the KV-transfer stream (kv_wire.h): the header a prefill worker
 * writes and the reader a decode worker receives with. The reader trusts
 * nothing: magic, version, model, shape, sizes, frame order and a checksum
 * of the KV are all checked before the payload is handed out. */
#include "daemon/pd/kv_wire.h"

#include "daemon/engine.h"

#include <sys/uio.h>

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* XXH3 inlined, so it is built for this CPU (-march=native: AVX-512 where
 * there is one): 4x the shared library's SSE2 speed on the bytes recv() just
 * put in cache. Same digests either way. */
#define XXH_INLINE_ALL
#include <xxhash.h>

void kv_wire_header(const struct kv_model *m, uint32_t n_tokens, struct kpi_kv_header *h)
{
	memset(h, 0, sizeof(*h));
	h->magic = KPI_KV_MAGIC;
	h->version = KPI_KV_VERSION;
	h->header_bytes = sizeof(*h);
	h->fingerprint = m->fingerprint;
	snprintf(h->model, sizeof(h->model), "%s", m->name);
	h->n_layers = m->n_layers;
	h->n_kv_heads = m->n_kv_heads;
	h->head_dim = m->head_dim;
	h->dtype = m->dtype;
	h->block_size = m->block_size;
	h->n_tokens = n_tokens;
	h->payload_bytes = kpi_kv_payload_bytes(m->n_layers, n_tokens, m->n_kv_heads, m->head_dim,
						m->dtype);
	h->vocab_size = m->vocab_size;
}

void kv_reader_init(struct kv_reader *r, const struct kv_model *m, uint32_t n_tokens)
{
	memset(r, 0, sizeof(*r));
	r->m = m;
	r->want_tokens = n_tokens;
	r->stage = KVR_HEADER;
}

void kv_reader_free(struct kv_reader *r)
{
	engine_kv_buffer_free(r->payload);
	if (r->xx)
		XXH3_freeState(r->xx);
	if (r->cx)
		XXH3_freeState(r->cx);
	r->payload = NULL;
	r->xx = r->cx = NULL;
}

void kv_reader_fail(struct kv_reader *r, int status, const char *fmt, ...)
{
	if (r->stage == KVR_FAILED || r->stage == KVR_DONE)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->err, sizeof(r->err), fmt, ap);
	va_end(ap);
	r->status = status;
	r->stage = KVR_FAILED;
	engine_kv_buffer_free(r->payload);
	r->payload = NULL;
}

bool kv_reader_into(struct kv_reader *r, const struct engine_kv_in *in)
{
	if (r->stage != KVR_HEADER || r->have)
		return false;
	r->into = in;
	return true;
}

/* The runs of the current frame: for each chunk of the sender's block_size
 * positions, head h's rows of K, then of V, head by head (abi/kpi_kv_wire.h). */
static uint32_t frame_runs(const struct kv_reader *r)
{
	uint64_t bs = r->hdr.block_size, chunks = (r->lf.n_pos + bs - 1) / bs;
	return (uint32_t)chunks * 2 * r->m->n_kv_heads;
}

static size_t row_bytes(const struct kv_reader *r)
{
	return (size_t)r->m->head_dim * kpi_kv_dtype_bytes(r->m->dtype);
}

/* Run k's positions [*p0, *p1), K or V (*kv) of head *h. */
static void run_of(const struct kv_reader *r, uint32_t k, uint32_t *p0, uint32_t *p1, uint32_t *kv,
		   uint32_t *h)
{
	uint32_t n_kv = r->m->n_kv_heads, bs = r->hdr.block_size, end = r->lf.first_pos + r->lf.n_pos;
	uint32_t chunk = k / (2 * n_kv);
	*kv = k / n_kv % 2;
	*h = k % n_kv;
	*p0 = r->lf.first_pos + chunk * bs;
	*p1 = end - *p0 < bs ? end : *p0 + bs;
}

static size_t run_len(const struct kv_reader *r, uint32_t k)
{
	uint32_t p0, p1, kv, h;
	run_of(r, k, &p0, &p1, &kv, &h);
	return (size_t)(p1 - p0) * row_bytes(r);
}

/* Where byte off of run k goes, and how many bytes from there are
 * contiguous (*n): in a payload buffer ([layer][K, V][head][n_tokens][head_dim])
 * the rest of the run; in the engine's blocks up to the block's end. */
static char *run_at(const struct kv_reader *r, uint32_t k, size_t off, size_t *n)
{
	const struct kv_model *m = r->m;
	size_t row = row_bytes(r);
	uint32_t p0, p1, kv, h;
	run_of(r, k, &p0, &p1, &kv, &h);
	size_t len = (size_t)(p1 - p0) * row;
	if (!r->into) {
		size_t per_head = (size_t)r->hdr.n_tokens * row, half = per_head * m->n_kv_heads;
		*n = len - off;
		return r->payload + (size_t)r->lf.layer * r->layer_bytes + kv * half + h * per_head +
		       (size_t)p0 * row + off;
	}
	const struct engine_kv_in *in = r->into;
	uint32_t bs = (uint32_t)in->block_size, pos = p0 + (uint32_t)(off / row), blk = pos / bs;
	size_t to_block_end = (size_t)((blk + 1) * bs < p1 ? (blk + 1) * bs : p1) * row -
			      ((size_t)p0 * row + off);
	*n = to_block_end;
	size_t at = (((size_t)r->lf.layer * in->n_blocks + blk) * 2 + kv) * in->n_kv_heads + h;
	return (char *)in->rows[at] + (size_t)(pos % bs) * row + off % row;
}

void kv_reader_want(struct kv_reader *r, char **p, size_t *n)
{
	switch (r->stage) {
	case KVR_HEADER:
		*p = (char *)&r->hdr + r->have;
		*n = sizeof(r->hdr) - r->have;
		return;
	case KVR_LAYER:
		*p = (char *)&r->lf + r->have;
		*n = sizeof(r->lf) - r->have;
		return;
	case KVR_PAYLOAD:
		*p = run_at(r, r->run, r->have, n);
		return;
	case KVR_END:
		*p = (char *)&r->end + r->have;
		*n = sizeof(r->end) - r->have;
		return;
	default:
		*p = NULL;
		*n = 0;
	}
}

/* What kv_reader_want_iov offers at most, beyond its first piece. */
#define WANT_BYTES (4u << 20)

int kv_reader_want_iov(struct kv_reader *r, struct iovec *iov, int max)
{
	char *p;
	size_t n;
	kv_reader_want(r, &p, &n);
	if (!n || max < 1)
		return 0;
	iov[0] = (struct iovec){ p, n };
	if (r->stage != KVR_PAYLOAD)
		return 1;
	/* the pieces after it up to the frame's end, a piece that follows the
	 * one before in memory (a block's heads, where the pool keeps them so)
	 * joining it */
	int k = 1;
	uint32_t run = r->run, runs = frame_runs(r);
	size_t off = r->have + n, total = n;
	while (total < WANT_BYTES) { /* more than one readv takes from a socket */
		if (off == run_len(r, run)) {
			if (++run == runs)
				break;
			off = 0;
		}
		char *at = run_at(r, run, off, &n);
		off += n;
		total += n;
		if ((char *)iov[k - 1].iov_base + iov[k - 1].iov_len == at)
			iov[k - 1].iov_len += n;
		else if (k < max)
			iov[k++] = (struct iovec){ at, n };
		else
			break;
	}
	return k;
}

/* The header is in: every field against this worker before anything is allocated. */
static void check_header(struct kv_reader *r)
{
	const struct kpi_kv_header *h = &r->hdr;
	const struct kv_model *m = r->m;
	if (h->magic != KPI_KV_MAGIC || h->header_bytes != sizeof(*h)) {
		kv_reader_fail(r, KPI_KV_ERR_MAGIC, "not a KV stream (magic %08x, header of %u bytes)",
			       h->magic, h->header_bytes);
		return;
	}
	if (h->version != KPI_KV_VERSION) {
		kv_reader_fail(r, KPI_KV_ERR_VERSION, "KV stream version %u; this worker reads version %u "
			       "(run the same kpi-infer on both sides)", h->version, KPI_KV_VERSION);
		return;
	}
	char name[sizeof(h->model) + 1];
	memcpy(name, h->model, sizeof(h->model));
	name[sizeof(h->model)] = 0;
	for (char *c = name; *c; c++)
		if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
			*c = '?';
	if (h->fingerprint != m->fingerprint) {
		kv_reader_fail(r, KPI_KV_ERR_MODEL, "the prefill worker serves another model: '%s' "
			       "(fingerprint %016llx), this worker '%s' (%016llx)", name,
			       (unsigned long long)h->fingerprint, m->name,
			       (unsigned long long)m->fingerprint);
		return;
	}
	if (h->n_layers != m->n_layers || h->n_kv_heads != m->n_kv_heads ||
	    h->head_dim != m->head_dim || h->dtype != m->dtype || h->vocab_size != m->vocab_size) {
		kv_reader_fail(r, KPI_KV_ERR_SHAPE, "KV shape %u layers x %u KV heads x %u, dtype %u, "
			       "vocabulary %u; this worker's is %u x %u x %u, dtype %u, vocabulary %u",
			       h->n_layers, h->n_kv_heads, h->head_dim, h->dtype, h->vocab_size,
			       m->n_layers, m->n_kv_heads, m->head_dim, m->dtype, m->vocab_size);
		return;
	}
	if (h->n_tokens != r->want_tokens) {
		kv_reader_fail(r, KPI_KV_ERR_TOKENS, "the KV covers %u positions; the prompt has %u tokens",
			       h->n_tokens, r->want_tokens);
		return;
	}
	uint64_t want = kpi_kv_payload_bytes(m->n_layers, h->n_tokens, m->n_kv_heads, m->head_dim,
					     m->dtype);
	if (h->payload_bytes != want || h->block_size == 0) {
		kv_reader_fail(r, KPI_KV_ERR_SIZE, "the header announces %llu KV bytes (block size %u); "
			       "%u positions of this model are %llu", (unsigned long long)h->payload_bytes,
			       h->block_size, h->n_tokens, (unsigned long long)want);
		return;
	}
	r->layer_bytes = want / m->n_layers;
	const struct engine_kv_in *in = r->into;
	if (in && (in->n_tokens != (int)h->n_tokens || in->n_layers != (int)m->n_layers ||
		   in->n_kv_heads != (int)m->n_kv_heads || in->block_size <= 0 ||
		   (uint64_t)in->n_blocks * (uint32_t)in->block_size < h->n_tokens)) {
		kv_reader_fail(r, KPI_KV_ERR_SIZE, "the blocks held for the KV (%d positions, %d "
			       "blocks of %d) do not fit its %u positions", in->n_tokens, in->n_blocks,
			       in->block_size, h->n_tokens);
		return;
	}
	r->payload = in ? NULL : engine_kv_buffer(want);
	r->xx = XXH3_createState();
	r->cx = XXH3_createState();
	if ((!in && !r->payload) || !r->xx || !r->cx) {
		kv_reader_fail(r, KPI_KV_ERR_SIZE, "out of memory for %llu KV bytes",
			       (unsigned long long)want);
		return;
	}
	XXH3_64bits_reset(r->xx);
	XXH3_64bits_update(r->xx, h, sizeof(*h)); /* every field, block_size's chunks included */
	r->stage = KVR_LAYER;
}

/* The frame after the current one: the next layer, the second half, or the end. */
static void next_frame(struct kv_reader *r)
{
	r->run = 0;
	r->stage = ++r->frame == 2 * r->m->n_layers ? KVR_END : KVR_LAYER;
}

static void check_layer(struct kv_reader *r)
{
	const struct kv_model *m = r->m;
	uint32_t n = r->hdr.n_tokens, layer = r->frame % m->n_layers;
	bool second = r->frame >= m->n_layers;
	if (r->frame == 0 && r->lf.magic == KPI_KV_LAYER_MAGIC && r->lf.n_pos < n)
		r->cached = r->lf.n_pos; /* c, for every frame after */
	uint32_t first = second ? r->cached : 0, count = second ? n - r->cached : r->cached;
	if (r->lf.magic != KPI_KV_LAYER_MAGIC || r->lf.layer != layer || r->lf.first_pos != first ||
	    r->lf.n_pos != count) {
		kv_reader_fail(r, KPI_KV_ERR_FRAME, "expected frame %u: layer %u, positions %u+%u; got "
			       "magic %08x layer %u positions %u+%u", r->frame, layer, first, count,
			       r->lf.magic, r->lf.layer, r->lf.first_pos, r->lf.n_pos);
		return;
	}
	uint64_t want = 2ull * m->n_kv_heads * count * m->head_dim * kpi_kv_dtype_bytes(m->dtype);
	if (r->lf.bytes != want) {
		kv_reader_fail(r, KPI_KV_ERR_SIZE, "frame %u (layer %u, %u positions) of %llu bytes; "
			       "they make %llu", r->frame, layer, count, (unsigned long long)r->lf.bytes,
			       (unsigned long long)want);
		return;
	}
	if (count == 0)
		next_frame(r);
	else
		r->stage = KVR_PAYLOAD;
}

static void check_end(struct kv_reader *r)
{
	const struct kpi_kv_end *e = &r->end;
	if (e->magic != KPI_KV_END_MAGIC) {
		kv_reader_fail(r, KPI_KV_ERR_FRAME, "expected the end frame, got magic %08x", e->magic);
		return;
	}
	if (e->status != KPI_KV_OK) {
		kv_reader_fail(r, KPI_KV_ERR_UPSTREAM, "the prefill worker ended the stream with status "
			       "%u (%s)", e->status, kpi_kv_status_name((int)e->status));
		return;
	}
	if (e->n_tokens != r->hdr.n_tokens) {
		kv_reader_fail(r, KPI_KV_ERR_FRAME, "end frame for %u positions, header for %u",
			       e->n_tokens, r->hdr.n_tokens);
		return;
	}
	if (e->first_token < 0 || (uint32_t)e->first_token >= r->m->vocab_size) {
		kv_reader_fail(r, KPI_KV_ERR_TOKEN, "first token %d is outside the vocabulary of %u",
			       e->first_token, r->m->vocab_size);
		return;
	}
	XXH3_64bits_update(r->xx, e, offsetof(struct kpi_kv_end, checksum));
	uint64_t sum = XXH3_64bits_digest(r->xx);
	if (sum != e->checksum) {
		kv_reader_fail(r, KPI_KV_ERR_CHECKSUM, "KV checksum %016llx, the stream says %016llx",
			       (unsigned long long)sum, (unsigned long long)e->checksum);
		return;
	}
	r->stage = KVR_DONE;
}

/* n bytes of the current header, frame or end frame (at most what is left
 * of it) are in. */
static void got_item(struct kv_reader *r, size_t n)
{
	r->have += n;
	switch (r->stage) {
	case KVR_HEADER:
		if (r->have == sizeof(r->hdr)) {
			r->have = 0;
			check_header(r);
		}
		break;
	case KVR_LAYER:
		if (r->have == sizeof(r->lf)) {
			r->have = 0;
			check_layer(r);
		}
		break;
	case KVR_END:
		if (r->have == sizeof(r->end)) {
			r->have = 0;
			check_end(r);
		}
		break;
	default:
		break;
	}
}

/* Up to n payload bytes are in, where kv_reader_want(_iov) said: into the
 * current chunk's digest, a span of pieces that follow each other in memory
 * at a time, and each chunk's digest, once whole, into the checksum
 * (abi/kpi_kv_wire.h). Returns how many it took (it stops at the frame's
 * end). */
static size_t got_payload(struct kv_reader *r, size_t n)
{
	const uint32_t per_chunk = 2 * r->m->n_kv_heads;
	const char *span = NULL;
	size_t span_len = 0, took = 0;
	while (took < n && r->stage == KVR_PAYLOAD) {
		if (r->run % per_chunk == 0 && r->have == 0)
			XXH3_64bits_reset(r->cx);
		size_t k;
		char *at = run_at(r, r->run, r->have, &k);
		k = k < n - took ? k : n - took;
		if (span && span + span_len == at) {
			span_len += k;
		} else {
			if (span)
				XXH3_64bits_update(r->cx, span, span_len);
			span = at;
			span_len = k;
		}
		took += k;
		r->have += k;
		if (r->have < run_len(r, r->run))
			continue;
		r->have = 0;
		if (++r->run % per_chunk == 0) {
			XXH3_64bits_update(r->cx, span, span_len);
			span = NULL;
			uint64_t d = XXH3_64bits_digest(r->cx); /* little-endian: kpi_kv_wire.h */
			XXH3_64bits_update(r->xx, &d, sizeof(d));
		}
		if (r->run == frame_runs(r))
			next_frame(r);
	}
	if (span)
		XXH3_64bits_update(r->cx, span, span_len);
	r->received += took;
	return took;
}

static size_t item_left(const struct kv_reader *r)
{
	switch (r->stage) {
	case KVR_HEADER: return sizeof(r->hdr) - r->have;
	case KVR_LAYER: return sizeof(r->lf) - r->have;
	case KVR_END: return sizeof(r->end) - r->have;
	default: return 0;
	}
}

enum kv_reader_stage kv_reader_got(struct kv_reader *r, size_t n)
{
	/* a readv may fill several runs of one frame (kv_reader_want_iov) */
	while (n > 0 && r->stage != KVR_DONE && r->stage != KVR_FAILED) {
		if (r->stage == KVR_PAYLOAD) {
			n -= got_payload(r, n);
			continue;
		}
		size_t k = n < item_left(r) ? n : item_left(r);
		got_item(r, k);
		n -= k;
	}
	return r->stage;
}

size_t kv_reader_feed(struct kv_reader *r, const char *in, size_t n)
{
	size_t used = 0;
	while (used < n) {
		char *p;
		size_t want;
		kv_reader_want(r, &p, &want);
		if (!want)
			break;
		size_t k = n - used < want ? n - used : want;
		memcpy(p, in + used, k);
		used += k;
		kv_reader_got(r, k);
	}
	return used;
}

void *kv_reader_take_payload(struct kv_reader *r)
{
	if (r->stage != KVR_DONE)
		return NULL;
	void *p = r->payload;
	r->payload = NULL;
	return p;
}
