/* kpi_kv_wire.h - the KV-transfer stream between a prefill worker and a decode
 * worker (kpi-infer --role prefill -> --role decode): the body of a 200
 * answer to POST /v1/kv/prefill, versioned, every size checked by the receiver
 * before a byte of KV is used. A contract between processes: fields are
 * appended in a new version, never moved (docs/disaggregation.md). */
#ifndef KPI_KV_WIRE_H
#define KPI_KV_WIRE_H

#ifndef __VMLINUX_H__
#include <stdint.h>
#endif

/* The request: POST KPI_KV_PATH with a completions body whose prompt is the
 * token ids (what the decode worker tokenized), the decode worker's sampling
 * fields and seed, the client's x-request-id, and the model fingerprint the
 * receiver expects in KPI_KV_MODEL_HEADER (16 hex digits); a prefill worker
 * with another model answers 409 without running anything. */
#define KPI_KV_PATH "/v1/kv/prefill"
#define KPI_KV_CONTENT_TYPE "application/vnd.kpiscope.kv"
#define KPI_KV_MODEL_HEADER "x-kpi-model"
/* router -> decode worker: the prefill worker ("host:port") to fetch the KV from */
#define KPI_KV_PREFILL_HEADER "x-kpi-prefill"

/* The answer's body, all integers little-endian:
 *   header                               struct kpi_kv_header (128 bytes)
 *   2 x n_layers x { frame               struct kpi_kv_layer (24 bytes)
 *                    for each chunk of block_size positions from first_pos
 *                    (the last one shorter):
 *                      K [n_kv_heads][chunk][head_dim]   dtype
 *                      V [n_kv_heads][chunk][head_dim] }  dtype
 *   end frame                            struct kpi_kv_end (32 bytes)
 * The first n_layers frames (layers 0..n_layers-1 in order) carry positions
 * [0, c): the prompt's prefix the prefill worker had cached, sent before any
 * compute (c may be 0: frames of no payload). The next n_layers frames carry
 * [c, n_tokens), each sent as soon as the forward pass has computed its layer
 * (the transfer overlaps the prefill's tail). c is the same in every frame.
 * Content-Length is exactly kpi_kv_stream_bytes(). A chunk is one KV block
 * of the sender (the header's block_size): where both ends keep a block's K
 * (then V) of all heads contiguous, as the CPU backend does, the stream is
 * sent from the sender's blocks and received into the receiver's, a run per
 * block, never copied, and a chunk's digest is taken once, when its block is
 * computed, not at every send (version 1 ordered a frame head by head over
 * all its positions: a 2 KiB run per head and block). */
#define KPI_KV_MAGIC 0x564b504bu       /* "KPKV" */
#define KPI_KV_LAYER_MAGIC 0x594c504bu /* "KPLY" */
#define KPI_KV_END_MAGIC 0x444e504bu   /* "KPND" */
#define KPI_KV_VERSION 2u

enum kpi_kv_wire_dtype {
	KPI_KV_WIRE_F16 = 1,  /* IEEE half: the CPU backend's cache, the CUDA backend's default */
	KPI_KV_WIRE_BF16 = 2,
	KPI_KV_WIRE_F32 = 3,
};

struct kpi_kv_header {
	uint32_t magic;          /* KPI_KV_MAGIC */
	uint16_t version;        /* KPI_KV_VERSION */
	uint16_t header_bytes;   /* sizeof(struct kpi_kv_header) */
	uint64_t fingerprint;    /* XXH3-64 of the model's GGUF file: its identity */
	char model[64];          /* general.name, NUL-padded (for the error message) */
	uint32_t n_layers;
	uint32_t n_kv_heads;
	uint32_t head_dim;
	uint32_t dtype;          /* enum kpi_kv_wire_dtype */
	uint32_t block_size;     /* the sender's tokens per KV block: a frame's chunks */
	uint32_t n_tokens;       /* positions carried: the whole prompt, 0..n_tokens-1 */
	uint64_t payload_bytes;  /* KV bytes of all layers: kpi_kv_payload_bytes() */
	uint32_t vocab_size;
	uint32_t reserved0;      /* 0 */
	uint64_t reserved1;      /* 0 */
};

struct kpi_kv_layer {
	uint32_t magic;          /* KPI_KV_LAYER_MAGIC */
	uint32_t layer;          /* 0..n_layers-1, in order within each half of the stream */
	uint32_t first_pos;      /* 0 in the first half, c in the second */
	uint32_t n_pos;          /* c in the first half, n_tokens - c in the second */
	uint64_t bytes;          /* 2 x n_kv_heads x n_pos x head_dim x dtype size */
};

struct kpi_kv_end {
	uint32_t magic;          /* KPI_KV_END_MAGIC */
	uint32_t status;         /* 0: complete (enum kpi_kv_status) */
	int32_t first_token;     /* sampled from the prompt's last position */
	uint32_t n_tokens;       /* the header's, again */
	uint64_t sampler_state;  /* the request's sampler after drawing first_token */
	uint64_t checksum;       /* XXH3-64 of the header's 128 bytes, then of each chunk's
				  * digest in stream order (the XXH3-64 of its K and V bytes,
				  * 8 bytes each), then this frame's 24 bytes before this
				  * field (version 1: of the KV bytes themselves, without
				  * the header) */
};

_Static_assert(sizeof(struct kpi_kv_header) == 128, "kpi_kv_header is ABI: 128 bytes");
_Static_assert(sizeof(struct kpi_kv_layer) == 24, "kpi_kv_layer is ABI: 24 bytes");
_Static_assert(sizeof(struct kpi_kv_end) == 32, "kpi_kv_end is ABI: 32 bytes");
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the KV stream is little-endian; this host is not: add byte swapping"
#endif

static inline uint32_t kpi_kv_dtype_bytes(uint32_t dtype)
{
	return dtype == KPI_KV_WIRE_F32 ? 4 : dtype == KPI_KV_WIRE_F16 || dtype == KPI_KV_WIRE_BF16 ? 2 : 0;
}

/* layers x tokens x 2 (K, V) x kv_dim x dtype size */
static inline uint64_t kpi_kv_payload_bytes(uint32_t n_layers, uint32_t n_tokens,
					    uint32_t n_kv_heads, uint32_t head_dim, uint32_t dtype)
{
	return (uint64_t)n_layers * n_tokens * 2 * n_kv_heads * head_dim * kpi_kv_dtype_bytes(dtype);
}

static inline uint64_t kpi_kv_stream_bytes(uint32_t n_layers, uint64_t payload_bytes)
{
	return sizeof(struct kpi_kv_header) + 2ull * n_layers * sizeof(struct kpi_kv_layer) +
	       payload_bytes + sizeof(struct kpi_kv_end);
}

/* Why a transfer failed: the status of kpi:kv__recv_end and kpi:kv__send_end
 * (docs/probes.md), a trace column. Append only. */
enum kpi_kv_status {
	KPI_KV_OK = 0,
	KPI_KV_ERR_MAGIC = 1,     /* not a KV stream (bad magic or header size) */
	KPI_KV_ERR_VERSION = 2,   /* a version this worker does not read */
	KPI_KV_ERR_MODEL = 3,     /* another model: fingerprint differs */
	KPI_KV_ERR_SHAPE = 4,     /* layers, KV heads, head size, dtype or vocabulary differ */
	KPI_KV_ERR_TOKENS = 5,    /* not this request's prompt length */
	KPI_KV_ERR_SIZE = 6,      /* oversized: a size disagrees with the header or the limits */
	KPI_KV_ERR_FRAME = 7,     /* a frame out of order or malformed */
	KPI_KV_ERR_TRUNCATED = 8, /* the stream ended early */
	KPI_KV_ERR_CHECKSUM = 9,  /* the KV bytes are not those sent */
	KPI_KV_ERR_UPSTREAM = 10, /* the prefill worker refused, failed or could not be reached */
	KPI_KV_ERR_CANCELLED = 11,/* the client went away first */
	KPI_KV_ERR_TOKEN = 12,    /* first token outside the vocabulary */
	KPI_KV_ERR_TIMEOUT = 13,  /* no byte for the upstream timeout */
	KPI_KV_ERR__COUNT
};

static inline const char *kpi_kv_status_name(int s)
{
	static const char *const names[KPI_KV_ERR__COUNT] = {
		"ok", "magic", "version", "model", "shape", "tokens", "size", "frame",
		"truncated", "checksum", "upstream", "cancelled", "token", "timeout",
	};
	return s >= 0 && s < KPI_KV_ERR__COUNT ? names[s] : "unknown";
}

#endif
