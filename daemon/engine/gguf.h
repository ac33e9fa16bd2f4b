/* gguf.h - GGUF v3 files: a bounds-checked reader over an mmap'd file, and a
 * small writer (used by model_make and by the tests to build bad files).
 * Every error names the offset and the key or tensor it was reading. */
#ifndef KPI_ENGINE_GGUF_H
#define KPI_ENGINE_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum gguf_type {
	GGUF_UINT8 = 0, GGUF_INT8 = 1, GGUF_UINT16 = 2, GGUF_INT16 = 3,
	GGUF_UINT32 = 4, GGUF_INT32 = 5, GGUF_FLOAT32 = 6, GGUF_BOOL = 7,
	GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_UINT64 = 10, GGUF_INT64 = 11,
	GGUF_FLOAT64 = 12,
};

/* ggml tensor types this engine reads (abi/kpi_ggml_types.h names them all). */
enum ggml_type { GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q8_0 = 8, GGML_Q4_K = 12 };

/* Bytes of one element of a float type this engine reads (F32, F16). */
static inline size_t ggml_type_bytes(uint32_t type)
{
	return type == GGML_F16 ? 2 : 4;
}

/* Values per block and bytes per block of a type this engine reads (F32 and
 * F16: blocks of one value; llama.cpp's Q8_0 and Q4_0: 32 values in 34 and 18
 * bytes; Q4_K: 256 values in 144 bytes); 0 for any other type. */
int ggml_block_elems(uint32_t type);
size_t ggml_block_bytes(uint32_t type);
static inline bool ggml_type_is_quant(uint32_t type)
{
	return type == GGML_Q4_0 || type == GGML_Q8_0 || type == GGML_Q4_K;
}
/* Bytes of a row of n values; 0 when the type is not one this engine reads
 * or n is not a whole number of its blocks. */
size_t ggml_row_bytes(uint32_t type, int64_t n);

struct gguf_str {
	const char *s; /* not NUL-terminated: points into the mapping */
	uint64_t n;
};

struct gguf_kv {
	struct gguf_str key;
	enum gguf_type type;
	/* scalars */
	union { uint64_t u; int64_t i; double f; bool b; } v;
	struct gguf_str str;
	/* arrays: element type, count, first element in the mapping */
	enum gguf_type arr_type;
	uint64_t arr_n;
	const uint8_t *arr;
};

struct gguf_tensor {
	char name[96];
	uint32_t n_dims;
	int64_t ne[4];   /* ne[0] is the contiguous dimension */
	uint32_t type;   /* ggml type id as stored */
	uint64_t offset; /* from the data section */
	const void *data;
	size_t nbytes;
};

struct gguf {
	const uint8_t *map;
	size_t size;
	uint32_t version;
	uint64_t n_kv, n_tensors;
	struct gguf_kv *kv;
	struct gguf_tensor *tensors;
	size_t alignment;
};

/* Maps and parses path; NULL with one line in err. Tensor types this engine
 * does not read are accepted here and refused by the model loader, which
 * names them; a tensor of a type it reads must have whole blocks per row,
 * lie inside the file and not overlap the next one. */
struct gguf *gguf_open(const char *path, char *err, size_t errlen);
void gguf_close(struct gguf *g);

const struct gguf_kv *gguf_find(const struct gguf *g, const char *key);
const struct gguf_tensor *gguf_tensor(const struct gguf *g, const char *name);
bool gguf_str_eq(struct gguf_str s, const char *c);
/* abi/kpi_ggml_types.h's name of a type id ("Q4_K"; "unknown"). */
const char *ggml_type_name(uint32_t type);

/* ---- writer ------------------------------------------------------------ */

/* Writes header and metadata in one pass, then tensor data in the order the
 * tensors were declared. Call order: gguf_w_begin, gguf_w_kv_* and
 * gguf_w_tensor (declare), gguf_w_header, gguf_w_data for each tensor. */
struct gguf_writer;
struct gguf_writer *gguf_w_begin(FILE *f);
void gguf_w_kv_str(struct gguf_writer *w, const char *key, const char *val);
void gguf_w_kv_u32(struct gguf_writer *w, const char *key, uint32_t val);
void gguf_w_kv_i32(struct gguf_writer *w, const char *key, int32_t val);
void gguf_w_kv_f32(struct gguf_writer *w, const char *key, float val);
void gguf_w_kv_bool(struct gguf_writer *w, const char *key, bool val);
void gguf_w_kv_arr_str(struct gguf_writer *w, const char *key, const char *const *vals, int n);
void gguf_w_kv_arr_f32(struct gguf_writer *w, const char *key, const float *vals, int n);
void gguf_w_kv_arr_i32(struct gguf_writer *w, const char *key, const int32_t *vals, int n);
void gguf_w_tensor(struct gguf_writer *w, const char *name, uint32_t type, int n_dims,
		   const int64_t *ne);
/* Writes the header, metadata and tensor infos, padded to the alignment. */
int gguf_w_header(struct gguf_writer *w);
/* Writes one tensor's bytes (nbytes must match its shape) plus padding. */
int gguf_w_data(struct gguf_writer *w, const void *data, size_t nbytes);
/* Frees the writer; returns -1 when any write failed. */
int gguf_w_end(struct gguf_writer *w);

/* Bytes of a tensor of this shape; 0 for a type this engine does not read
 * or a row (ne[0]) that is not a whole number of blocks. */
size_t ggml_nbytes(uint32_t type, const int64_t *ne, int n_dims);

#endif
