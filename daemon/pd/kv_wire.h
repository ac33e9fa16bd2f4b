/* kv_wire.h - the KV-transfer stream of abi/kpi_kv_wire.h as pure functions
 * over buffers: this worker's side of the contract (kv_model), the header a
 * prefill worker writes, and the decode worker's incremental reader, which
 * says where the next bytes go (so they are received straight into the
 * engine's blocks, or into one payload buffer) and checks every size before
 * it allocates or uses a byte. */
#ifndef KPI_PD_KV_WIRE_H
#define KPI_PD_KV_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "abi/kpi_kv_wire.h"

struct engine_kv_in;
struct iovec;

/* This worker's model identity and KV layout: what both ends must agree on. */
struct kv_model {
	uint64_t fingerprint;
	char name[64];
	uint32_t n_layers, n_kv_heads, head_dim, dtype, block_size, vocab_size, context_length;
};

/* The header of a stream of n_tokens positions of m's KV. */
void kv_wire_header(const struct kv_model *m, uint32_t n_tokens, struct kpi_kv_header *h);

enum kv_reader_stage { KVR_HEADER, KVR_LAYER, KVR_PAYLOAD, KVR_END, KVR_DONE, KVR_FAILED };

struct kv_reader {
	const struct kv_model *m;
	uint32_t want_tokens;      /* the request's prompt length */
	enum kv_reader_stage stage;
	struct kpi_kv_header hdr;
	struct kpi_kv_layer lf;
	struct kpi_kv_end end;
	size_t have;               /* bytes of the current item so far */
	uint32_t frame;            /* the frame being read, 0..2 x n_layers - 1 */
	uint32_t cached;           /* c: the positions of the first half's frames */
	uint32_t run;              /* the run being read: chunk by chunk, K then V, head by head */
	uint64_t layer_bytes;      /* each layer's K and V, all positions */
	const struct engine_kv_in *into; /* the KV goes straight into these blocks, or: */
	char *payload;             /* hdr.payload_bytes, allocated once the header passed */
	uint64_t received;         /* payload bytes in */
	void *xx;                  /* XXH3 state of the stream's checksum */
	void *cx;                  /* XXH3 state of the current chunk's digest */
	int status;                /* enum kpi_kv_status once KVR_FAILED */
	char err[256];
};

/* A reader expecting n_tokens positions of m's KV. */
void kv_reader_init(struct kv_reader *r, const struct kv_model *m, uint32_t n_tokens);
void kv_reader_free(struct kv_reader *r);
/* The KV is received into the engine's blocks (kept, not copied) instead of
 * a payload buffer: false once the header has been read (too late). */
bool kv_reader_into(struct kv_reader *r, const struct engine_kv_in *in);
/* Where the next bytes go, and at most how many; *n == 0 once done or failed. */
void kv_reader_want(struct kv_reader *r, char **p, size_t *n);
/* The same as up to max pieces, in order, for one readv (never past the
 * current frame); returns how many (0 once done or failed). */
int kv_reader_want_iov(struct kv_reader *r, struct iovec *iov, int max);
/* n bytes were put where kv_reader_want(_iov) said. Returns the stage reached:
 * KVR_DONE (the whole stream in and checked), KVR_FAILED (r->status,
 * r->err), or the stage to go on with. */
enum kv_reader_stage kv_reader_got(struct kv_reader *r, size_t n);
/* Copies bytes in through want/got (bytes read ahead of the payload). Returns
 * how many it took (it stops at done or failed). */
size_t kv_reader_feed(struct kv_reader *r, const char *in, size_t n);
/* The payload, taken: the caller frees it (engine_kv_buffer_free). NULL unless
 * KVR_DONE, and when the KV went into blocks (kv_reader_into). */
void *kv_reader_take_payload(struct kv_reader *r);
/* Fails the reader from outside (the connection ended early...). */
void kv_reader_fail(struct kv_reader *r, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
