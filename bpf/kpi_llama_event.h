/* kpi_llama_event.h - the event ABI between bpf/kpi_llama.bpf.c and
 * agent/sources/llama.c: one record per llama_decode call of a llama.cpp server, with
 * a bounded per-sequence summary of its batch. Fixed-size plain types. */
#ifndef KPI_LLAMA_EVENT_H
#define KPI_LLAMA_EVENT_H

#ifndef __VMLINUX_H__ /* BPF programs get the fixed-width types from vmlinux.h */
#include <stdint.h>
#endif

/* llama.cpp's struct llama_batch (include/llama.h), passed by value: on
 * x86-64 SysV a 56-byte struct goes in memory, the caller's copy at rsp + 8
 * at the callee's first instruction. agent/sources/llama.c checks at attach that the
 * library is of a version with this layout (docs/agent.md). */
struct kpi_llama_batch {
	int32_t n_tokens;
	int32_t _pad;
	uint64_t token;         /* llama_token * */
	uint64_t embd;          /* float * */
	uint64_t pos;           /* llama_pos * (int32), NULL: positions tracked by the library */
	uint64_t n_seq_id;      /* int32_t * */
	uint64_t seq_id;        /* llama_seq_id ** */
	uint64_t logits;        /* int8_t *, NULL: the last token's output only */
};

#define KPI_LLAMA_SEQ_IDS    256   /* sequence ids summarised: 0 .. 255 (llama.cpp's LLAMA_MAX_SEQ) */
#define KPI_LLAMA_EV_SEQS    64    /* sequences per event */
#define KPI_LLAMA_MAX_TOKENS 8192  /* tokens of a batch read; the rest only counted */
#define KPI_LLAMA_CHUNK      64    /* tokens read per bpf_probe_read_user of each array */

/* kpi_llama_ev.flags */
#define KPI_LLAMA_F_NO_POS     0x01 /* batch.pos NULL: pos_first/pos_last unknown (-1) */
#define KPI_LLAMA_F_CUT        0x02 /* tokens beyond KPI_LLAMA_MAX_TOKENS, or more sequences
				     * than KPI_LLAMA_EV_SEQS, or a seq id >= KPI_LLAMA_SEQ_IDS:
				     * the summary misses some */
#define KPI_LLAMA_F_READ_FAIL  0x04 /* a read of the batch's arrays failed: no summary */
#define KPI_LLAMA_F_BAD        0x08 /* n_tokens out of range or no token / embd array: not a
				     * llama_batch as this header lays it out */
#define KPI_LLAMA_F_MULTI_SEQ  0x10 /* tokens in several sequences at once: counted in the first */
#define KPI_LLAMA_F_EMBD       0x20 /* embeddings in, not tokens */

struct kpi_llama_seq {
	int32_t seq_id;
	int32_t n_tokens;       /* tokens of this sequence in the batch */
	int32_t pos_first;      /* position of its first and last token there, -1 unknown */
	int32_t pos_last;
	int32_t n_logits;       /* of them, tokens with output (logits) requested */
};

/* Indexes of the `llama_counters` per-CPU array. */
enum kpi_llama_counter {
	KPI_LCNT_DROPS = 0,     /* ring buffer full: a call lost */
	KPI_LCNT_NO_ENTRY,      /* a return with no entry seen (attached mid-call, map full) */
	KPI_LCNT_BAD,           /* calls whose batch did not look like a llama_batch */
	KPI_LCNT_MAX,
};

struct kpi_llama_ev {
	uint32_t pid;           /* tgid */
	uint32_t tid;
	uint64_t t_start;       /* CLOCK_MONOTONIC ns: entry of llama_decode */
	uint64_t t_end;         /* ... its return */
	uint64_t ctx;           /* struct llama_context * */
	int32_t ret;            /* llama_decode's return: 0 ok, 1 no KV slot, < 0 error */
	int32_t n_tokens;       /* batch.n_tokens */
	uint32_t flags;         /* KPI_LLAMA_F_* */
	uint32_t n_seqs;        /* entries in seqs[] */
	struct kpi_llama_seq seqs[KPI_LLAMA_EV_SEQS];
};

_Static_assert(sizeof(struct kpi_llama_batch) == 56, "llama_batch is 56 bytes in llama.cpp");
_Static_assert(sizeof(struct kpi_llama_seq) == 20, "kpi_llama_seq ABI changed");
_Static_assert(sizeof(struct kpi_llama_ev) == 48 + 20 * KPI_LLAMA_EV_SEQS, "kpi_llama_ev ABI changed");

#endif
