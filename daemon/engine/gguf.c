/* gguf.c - GGUF v3 reader (mmap, every read bounds-checked so a truncated or
 * corrupt file is an error naming where, never a crash) and writer. */
#include "daemon/engine/gguf.h"

#include "abi/kpi_ggml_types.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC "GGUF"
#define GGUF_MAX_DIMS 4

/* ---- reader ------------------------------------------------------------ */

struct rd {
	const uint8_t *p;
	size_t size, off;
	char *err;
	size_t errlen;
	const char *path;
	char what[160]; /* what is being read, for the error line */
	bool failed;
};

static void rd_fail(struct rd *r, const char *fmt, ...)
{
	if (r->failed)
		return;
	r->failed = true;
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(r->err, r->errlen, "%s: %s (at byte %zu, reading %s)", r->path, msg, r->off, r->what);
}

static const uint8_t *rd_take(struct rd *r, uint64_t n)
{
	if (r->failed)
		return NULL;
	if (n > r->size - r->off) {
		rd_fail(r, "file is truncated: needs %llu more bytes, %zu left", (unsigned long long)n,
			r->size - r->off);
		return NULL;
	}
	const uint8_t *q = r->p + r->off;
	r->off += n;
	return q;
}

static uint64_t rd_u(struct rd *r, int n)
{
	const uint8_t *q = rd_take(r, n);
	uint64_t v = 0;
	if (q)
		memcpy(&v, q, n); /* GGUF is little-endian, like every host we build for */
	return v;
}

static struct gguf_str rd_str(struct rd *r)
{
	struct gguf_str s = { "", 0 };
	uint64_t n = rd_u(r, 8);
	if (r->failed)
		return s;
	if (n > (1u << 30)) {
		rd_fail(r, "string length %llu is implausible (corrupt file?)", (unsigned long long)n);
		return s;
	}
	const uint8_t *q = rd_take(r, n);
	if (q) {
		s.s = (const char *)q;
		s.n = n;
	}
	return s;
}

static int type_size(enum gguf_type t)
{
	switch (t) {
	case GGUF_UINT8: case GGUF_INT8: case GGUF_BOOL: return 1;
	case GGUF_UINT16: case GGUF_INT16: return 2;
	case GGUF_UINT32: case GGUF_INT32: case GGUF_FLOAT32: return 4;
	case GGUF_UINT64: case GGUF_INT64: case GGUF_FLOAT64: return 8;
	default: return 0;
	}
}

static void rd_scalar(struct rd *r, struct gguf_kv *kv, enum gguf_type t)
{
	uint64_t raw = rd_u(r, type_size(t));
	switch (t) {
	case GGUF_UINT8: case GGUF_UINT16: case GGUF_UINT32: case GGUF_UINT64:
		kv->v.u = raw;
		kv->v.i = (int64_t)raw;
		break;
	case GGUF_INT8: kv->v.i = (int8_t)raw; kv->v.u = kv->v.i; break;
	case GGUF_INT16: kv->v.i = (int16_t)raw; kv->v.u = kv->v.i; break;
	case GGUF_INT32: kv->v.i = (int32_t)raw; kv->v.u = kv->v.i; break;
	case GGUF_INT64: kv->v.i = (int64_t)raw; kv->v.u = raw; break;
	case GGUF_BOOL: kv->v.b = raw != 0; kv->v.u = raw; break;
	case GGUF_FLOAT32: { float f; uint32_t u32 = (uint32_t)raw; memcpy(&f, &u32, 4); kv->v.f = f; break; }
	case GGUF_FLOAT64: memcpy(&kv->v.f, &raw, 8); break;
	default: break;
	}
}

static void rd_kv(struct rd *r, struct gguf_kv *kv)
{
	snprintf(r->what, sizeof(r->what), "a metadata key");
	kv->key = rd_str(r);
	if (r->failed)
		return;
	snprintf(r->what, sizeof(r->what), "metadata key '%.*s'", (int)kv->key.n, kv->key.s);
	uint32_t t = (uint32_t)rd_u(r, 4);
	kv->type = t;
	if (t == GGUF_STRING) {
		kv->str = rd_str(r);
	} else if (t == GGUF_ARRAY) {
		uint32_t at = (uint32_t)rd_u(r, 4);
		uint64_t n = rd_u(r, 8);
		if (r->failed)
			return;
		kv->arr_type = at;
		kv->arr_n = n;
		kv->arr = r->p + r->off;
		if (at == GGUF_STRING) {
			for (uint64_t i = 0; i < n && !r->failed; i++)
				rd_str(r);
		} else if (type_size(at)) {
			if (n > (r->size - r->off) / type_size(at))
				rd_fail(r, "file is truncated: array of %llu elements does not fit",
					(unsigned long long)n);
			else
				r->off += n * type_size(at);
		} else {
			rd_fail(r, "unsupported array element type %u", at);
		}
	} else if (type_size(t)) {
		rd_scalar(r, kv, t);
	} else {
		rd_fail(r, "unknown value type %u", t);
	}
}

int ggml_block_elems(uint32_t type)
{
	switch (type) {
	case GGML_F32: case GGML_F16: return 1;
	case GGML_Q4_0: case GGML_Q8_0: return 32;
	case GGML_Q4_K: return 256;
	default: return 0;
	}
}

size_t ggml_block_bytes(uint32_t type)
{
	switch (type) {
	case GGML_F32: return 4;
	case GGML_F16: return 2;
	case GGML_Q4_0: return 2 + 16;      /* fp16 d, 32 nibbles */
	case GGML_Q8_0: return 2 + 32;      /* fp16 d, 32 int8 */
	case GGML_Q4_K: return 4 + 12 + 128; /* fp16 d, dmin, 6-bit scales/mins, 256 nibbles */
	default: return 0;
	}
}

size_t ggml_row_bytes(uint32_t type, int64_t n)
{
	int be = ggml_block_elems(type);
	if (!be || n <= 0 || n % be)
		return 0;
	return (size_t)(n / be) * ggml_block_bytes(type);
}

size_t ggml_nbytes(uint32_t type, const int64_t *ne, int n_dims)
{
	size_t n = ggml_row_bytes(type, ne[0]);
	for (int i = 1; i < n_dims; i++)
		n *= (size_t)ne[i];
	return n;
}

const char *ggml_type_name(uint32_t type)
{
	return kpi_ggml_type_name(type);
}

static int cmp_tensor_offset(const void *a, const void *b)
{
	const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a, *y = *(const struct gguf_tensor *const *)b;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Tensors of a type this engine reads must not run into the next tensor's
 * bytes: a shape or type that claims more bytes than were written (a
 * mis-sized quantized tensor) is caught here, not read as garbage. */
static int check_overlaps(struct gguf *g, const char *path, char *err, size_t errlen)
{
	const struct gguf_tensor **order = malloc(sizeof(*order) * (g->n_tensors ? g->n_tensors : 1));
	int rc = 0;
	if (!order) {
		snprintf(err, errlen, "%s: out of memory checking %llu tensors", path,
			 (unsigned long long)g->n_tensors);
		return -1;
	}
	for (uint64_t i = 0; i < g->n_tensors; i++)
		order[i] = &g->tensors[i];
	qsort(order, g->n_tensors, sizeof(*order), cmp_tensor_offset);
	for (uint64_t i = 0; i + 1 < g->n_tensors && !rc; i++) {
		const struct gguf_tensor *t = order[i], *next = order[i + 1];
		if (t->nbytes && t->offset + t->nbytes > next->offset) {
			snprintf(err, errlen,
				 "%s: tensor '%s' (%s, shape [%lld, %lld]) needs %zu bytes but tensor '%s' starts %llu bytes after it: the file is corrupt or its shape or type is wrong",
				 path, t->name, ggml_type_name(t->type), (long long)t->ne[0], (long long)t->ne[1],
				 t->nbytes, next->name, (unsigned long long)(next->offset - t->offset));
			rc = -1;
		}
	}
	free(order);
	return rc;
}

struct gguf *gguf_open(const char *path, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(err, errlen, "cannot open model file %s: %s", path, strerror(errno));
		return NULL;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "model file %s is not a regular file", path);
		close(fd);
		return NULL;
	}
	if (st.st_size < 24) {
		snprintf(err, errlen, "%s: file is truncated: %lld bytes is shorter than a GGUF header",
			 path, (long long)st.st_size);
		close(fd);
		return NULL;
	}
	void *map = mmap(NULL, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED) {
		snprintf(err, errlen, "cannot mmap %s: %s", path, strerror(errno));
		return NULL;
	}
	struct gguf *g = calloc(1, sizeof(*g));
	g->map = map;
	g->size = st.st_size;
	g->alignment = 32;
	struct rd r = { .p = map, .size = st.st_size, .err = err, .errlen = errlen, .path = path };
	snprintf(r.what, sizeof(r.what), "the header");

	if (memcmp(map, GGUF_MAGIC, 4) != 0) {
		snprintf(err, errlen, "%s is not a GGUF file (bad magic %02x %02x %02x %02x, want 'GGUF')",
			 path, g->map[0], g->map[1], g->map[2], g->map[3]);
		goto fail;
	}
	r.off = 4;
	g->version = (uint32_t)rd_u(&r, 4);
	if (g->version != 3 && g->version != 2) {
		snprintf(err, errlen, "%s: unsupported GGUF version %u (this reader handles 2 and 3)",
			 path, g->version);
		goto fail;
	}
	g->n_tensors = rd_u(&r, 8);
	g->n_kv = rd_u(&r, 8);
	if (g->n_kv > g->size / 8 || g->n_tensors > g->size / 8) {
		rd_fail(&r, "file is truncated or corrupt: the header declares %llu keys and %llu tensors in %zu bytes",
			(unsigned long long)g->n_kv, (unsigned long long)g->n_tensors, g->size);
		goto fail;
	}
	g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof(*g->kv));
	g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof(*g->tensors));
	for (uint64_t i = 0; i < g->n_kv && !r.failed; i++)
		rd_kv(&r, &g->kv[i]);
	if (r.failed)
		goto fail;

	const struct gguf_kv *al = gguf_find(g, "general.alignment");
	if (al && al->type != GGUF_ARRAY && al->type != GGUF_STRING) {
		if (al->v.u == 0 || (al->v.u & (al->v.u - 1)) || al->v.u > 65536) {
			snprintf(err, errlen, "%s: general.alignment %llu is not a power of two", path,
				 (unsigned long long)al->v.u);
			goto fail;
		}
		g->alignment = al->v.u;
	}

	for (uint64_t i = 0; i < g->n_tensors && !r.failed; i++) {
		struct gguf_tensor *t = &g->tensors[i];
		snprintf(r.what, sizeof(r.what), "tensor info #%llu", (unsigned long long)i);
		struct gguf_str name = rd_str(&r);
		if (r.failed)
			break;
		snprintf(t->name, sizeof(t->name), "%.*s", (int)name.n, name.s);
		snprintf(r.what, sizeof(r.what), "tensor info '%s'", t->name);
		t->n_dims = (uint32_t)rd_u(&r, 4);
		if (!r.failed && (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS)) {
			rd_fail(&r, "tensor '%s' has %u dimensions (1..4 allowed)", t->name, t->n_dims);
			break;
		}
		for (uint32_t d = 0; d < 4; d++)
			t->ne[d] = d < t->n_dims ? (int64_t)rd_u(&r, 8) : 1;
		t->type = (uint32_t)rd_u(&r, 4);
		t->offset = rd_u(&r, 8);
		for (uint32_t d = 0; d < t->n_dims && !r.failed; d++)
			if (t->ne[d] <= 0 || t->ne[d] > (1ll << 40))
				rd_fail(&r, "tensor '%s' has an implausible dimension %lld", t->name,
					(long long)t->ne[d]);
	}
	if (r.failed)
		goto fail;

	size_t data_off = (r.off + g->alignment - 1) / g->alignment * g->alignment;
	for (uint64_t i = 0; i < g->n_tensors; i++) {
		struct gguf_tensor *t = &g->tensors[i];
		t->nbytes = ggml_nbytes(t->type, t->ne, t->n_dims);
		if (t->nbytes == 0 && ggml_block_elems(t->type)) {
			snprintf(err, errlen,
				 "%s: tensor '%s' is %s with rows of %lld values, not a whole number of its %d-value blocks",
				 path, t->name, ggml_type_name(t->type), (long long)t->ne[0],
				 ggml_block_elems(t->type));
			goto fail;
		}
		if (t->nbytes == 0)
			continue; /* unsupported type: the model loader names it */
		if (data_off > g->size || t->offset > g->size - data_off ||
		    t->nbytes > g->size - data_off - t->offset) {
			snprintf(err, errlen,
				 "%s: file is truncated: tensor '%s' (%zu bytes at offset %llu) ends past the end of the file (%zu bytes)",
				 path, t->name, t->nbytes, (unsigned long long)(data_off + t->offset), g->size);
			goto fail;
		}
		t->data = g->map + data_off + t->offset;
	}
	if (check_overlaps(g, path, err, errlen))
		goto fail;
	return g;
fail:
	gguf_close(g);
	return NULL;
}

void gguf_close(struct gguf *g)
{
	if (!g)
		return;
	if (g->map)
		munmap((void *)g->map, g->size);
	free(g->kv);
	free(g->tensors);
	free(g);
}

bool gguf_str_eq(struct gguf_str s, const char *c)
{
	size_t n = strlen(c);
	return s.n == n && memcmp(s.s, c, n) == 0;
}

const struct gguf_kv *gguf_find(const struct gguf *g, const char *key)
{
	for (uint64_t i = 0; i < g->n_kv; i++)
		if (gguf_str_eq(g->kv[i].key, key))
			return &g->kv[i];
	return NULL;
}

const struct gguf_tensor *gguf_tensor(const struct gguf *g, const char *name)
{
	for (uint64_t i = 0; i < g->n_tensors; i++)
		if (strcmp(g->tensors[i].name, name) == 0)
			return &g->tensors[i];
	return NULL;
}

/* ---- writer ------------------------------------------------------------ */

struct buf {
	uint8_t *p;
	size_t n, cap;
};

static void buf_put(struct buf *b, const void *src, size_t n)
{
	if (b->n + n > b->cap) {
		b->cap = (b->n + n) * 2 + 256;
		b->p = realloc(b->p, b->cap);
	}
	memcpy(b->p + b->n, src, n);
	b->n += n;
}

static void buf_u32(struct buf *b, uint32_t v) { buf_put(b, &v, 4); }
static void buf_u64(struct buf *b, uint64_t v) { buf_put(b, &v, 8); }
static void buf_str(struct buf *b, const char *s)
{
	buf_u64(b, strlen(s));
	buf_put(b, s, strlen(s));
}

struct gguf_writer {
	FILE *f;
	struct buf kv, ti;
	uint64_t n_kv, n_tensors, data_off;
	size_t alignment;
	bool failed;
};

struct gguf_writer *gguf_w_begin(FILE *f)
{
	struct gguf_writer *w = calloc(1, sizeof(*w));
	w->f = f;
	w->alignment = 32;
	return w;
}

static void w_key(struct gguf_writer *w, const char *key, uint32_t type)
{
	buf_str(&w->kv, key);
	buf_u32(&w->kv, type);
	w->n_kv++;
}

void gguf_w_kv_str(struct gguf_writer *w, const char *key, const char *val)
{
	w_key(w, key, GGUF_STRING);
	buf_str(&w->kv, val);
}

void gguf_w_kv_u32(struct gguf_writer *w, const char *key, uint32_t val)
{
	w_key(w, key, GGUF_UINT32);
	buf_u32(&w->kv, val);
}

void gguf_w_kv_i32(struct gguf_writer *w, const char *key, int32_t val)
{
	w_key(w, key, GGUF_INT32);
	buf_put(&w->kv, &val, 4);
}

void gguf_w_kv_f32(struct gguf_writer *w, const char *key, float val)
{
	w_key(w, key, GGUF_FLOAT32);
	buf_put(&w->kv, &val, 4);
}

void gguf_w_kv_bool(struct gguf_writer *w, const char *key, bool val)
{
	uint8_t b = val;
	w_key(w, key, GGUF_BOOL);
	buf_put(&w->kv, &b, 1);
}

void gguf_w_kv_arr_str(struct gguf_writer *w, const char *key, const char *const *vals, int n)
{
	w_key(w, key, GGUF_ARRAY);
	buf_u32(&w->kv, GGUF_STRING);
	buf_u64(&w->kv, n);
	for (int i = 0; i < n; i++)
		buf_str(&w->kv, vals[i]);
}

void gguf_w_kv_arr_f32(struct gguf_writer *w, const char *key, const float *vals, int n)
{
	w_key(w, key, GGUF_ARRAY);
	buf_u32(&w->kv, GGUF_FLOAT32);
	buf_u64(&w->kv, n);
	buf_put(&w->kv, vals, (size_t)n * 4);
}

void gguf_w_kv_arr_i32(struct gguf_writer *w, const char *key, const int32_t *vals, int n)
{
	w_key(w, key, GGUF_ARRAY);
	buf_u32(&w->kv, GGUF_INT32);
	buf_u64(&w->kv, n);
	buf_put(&w->kv, vals, (size_t)n * 4);
}

void gguf_w_tensor(struct gguf_writer *w, const char *name, uint32_t type, int n_dims,
		   const int64_t *ne)
{
	buf_str(&w->ti, name);
	buf_u32(&w->ti, n_dims);
	for (int d = 0; d < n_dims; d++)
		buf_u64(&w->ti, ne[d]);
	buf_u32(&w->ti, type);
	buf_u64(&w->ti, w->data_off);
	size_t nb = ggml_nbytes(type, ne, n_dims);
	w->data_off += (nb + w->alignment - 1) / w->alignment * w->alignment;
	w->n_tensors++;
}

static void w_put(struct gguf_writer *w, const void *p, size_t n)
{
	if (n && fwrite(p, 1, n, w->f) != n)
		w->failed = true;
}

static void w_pad(struct gguf_writer *w, size_t n)
{
	static const uint8_t zeros[64];
	size_t pad = (w->alignment - n % w->alignment) % w->alignment;
	w_put(w, zeros, pad);
}

int gguf_w_header(struct gguf_writer *w)
{
	uint32_t version = 3;
	w_put(w, GGUF_MAGIC, 4);
	w_put(w, &version, 4);
	w_put(w, &w->n_tensors, 8);
	w_put(w, &w->n_kv, 8);
	w_put(w, w->kv.p, w->kv.n);
	w_put(w, w->ti.p, w->ti.n);
	w_pad(w, 24 + w->kv.n + w->ti.n);
	return w->failed ? -1 : 0;
}

int gguf_w_data(struct gguf_writer *w, const void *data, size_t nbytes)
{
	w_put(w, data, nbytes);
	w_pad(w, nbytes);
	return w->failed ? -1 : 0;
}

int gguf_w_end(struct gguf_writer *w)
{
	int rc = w->failed ? -1 : 0;
	free(w->kv.p);
	free(w->ti.p);
	free(w);
	return rc;
}
