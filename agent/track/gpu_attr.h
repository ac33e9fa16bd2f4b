/* gpu_attr.h - per-step GPU busy time and its split across requests: joins
 * libkpi_cupti.so's records (by pid + step) with kpi-infer's step__seqs lists.
 * Bookkeeping, no BPF or SQLite (gpu_attr_write hands what changed to
 * gpu_store), so tests feed it synthetic records. */
#ifndef KPI_GPU_ATTR_H
#define KPI_GPU_ATTR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "agent/sinks/gpu_store.h"
#include "bpf/kpi_gpu_event.h"

/* How long a step or request is kept after its last record or list (late
 * records still count; a row not yet in the store is retried until then). */
#define GPU_ATTR_KEEP_NS 30000000000ull

struct gpu_attr;

struct gpu_attr_stats {
	uint64_t step_lists;       /* complete step__seqs lists received */
	uint64_t seq_entries;      /* their entries */
	uint64_t records;          /* records with a step (step > 0) */
	uint64_t no_step;          /* records with step 0: between steps, or no step source */
	uint64_t attributed_ns;    /* GPU time split across requests so far */
	uint64_t unattributed_ns;  /* busy time of steps expired without a sequence list */
	uint64_t unwritten;        /* steps/requests expired before their row was written */
};

struct gpu_attr *gpu_attr_new(void);
void gpu_attr_free(struct gpu_attr *a);
/* One chunk of a step's sequence list (kpi:step__seqs); first == 0 starts it. */
void gpu_attr_step_seqs(struct gpu_attr *a, uint32_t pid, uint64_t step, uint32_t n_total,
			uint32_t first, const struct kpi_step_seq *e, uint32_t n, uint64_t now);
/* One GPU record of pid (kernel, memcpy or memset). */
void gpu_attr_record(struct gpu_attr *a, uint32_t pid, const struct kpi_gpu_rec *r, uint64_t now);

/* Brings every step whose records changed up to date: its busy time (union of
 * its spans) and, once its list is known, the new busy time split by token
 * share into its requests' prefill or decode GPU time (kpi_gpu_split.h). */
void gpu_attr_settle(struct gpu_attr *a);

/* Every step / request changed since it was last written. The callback
 * returns true when written (no longer dirty), false to be offered again at
 * the next call (its row is not in the store yet). Also expires old entries. */
struct gpu_attr_step { uint32_t pid; uint64_t step, busy_ns; };
struct gpu_attr_req { uint32_t pid; uint64_t id, prefill_ns, decode_ns; };
void gpu_attr_drain(struct gpu_attr *a, uint64_t now,
		    bool (*step_fn)(void *ctx, const struct gpu_attr_step *s),
		    bool (*req_fn)(void *ctx, const struct gpu_attr_req *r), void *ctx);

/* One transaction on the store: rows into gpu_kernels, then every step and
 * request gpu_attr_drain offers (settle first). Those whose row is not in
 * the store yet stay dirty for the next call. 0, or -1 with the error in err,
 * everything rolled back (the caller keeps rows). */
int gpu_attr_write(struct gpu_attr *a, struct gpu_store *store, uint64_t now,
		   const struct gpu_store_row *rows, size_t n, char *err, size_t errlen);

/* The target exited: drop its steps and requests. */
void gpu_attr_forget_pid(struct gpu_attr *a, uint32_t pid);
void gpu_attr_stats(const struct gpu_attr *a, struct gpu_attr_stats *out);

#endif
