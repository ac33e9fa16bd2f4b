/* kpi_gpu_event.h - the event ABI between bpf/kpi_cupti.bpf.c and kpi-agent's
 * GPU side (agent/sources/gpu.c): libkpi_cupti.so's record batches and names, and the
 * daemon's per-step sequence lists. Fixed-size plain types, sizes pinned below. */
#ifndef KPI_GPU_EVENT_H
#define KPI_GPU_EVENT_H

#include "abi/kpi_cupti_abi.h"
#include "abi/kpi_step_seq.h"

/* step__seqs entries per ring-buffer event; a step with more sequences (the
 * daemon allows 4096) arrives as several chunks, KPI_STEP_SEQS_CHUNKS at most */
#define KPI_STEP_SEQS_CHUNK  256
#define KPI_STEP_SEQS_CHUNKS 16
#define KPI_GPU_REASON_LEN   128

enum kpi_gpu_event_type {
	KPI_GEV_BATCH = 1,      /* kpi_cupti:activity__batch */
	KPI_GEV_NAME,           /* kpi_cupti:kernel__name */
	KPI_GEV_STATE,          /* kpi_cupti:state */
	KPI_GEV_STATS,          /* kpi_cupti:stats */
	KPI_GEV_STEP_SEQS,      /* kpi:step__seqs, one chunk */
};

/* Indexes of the `gpu_counters` per-CPU array. */
enum kpi_gpu_counter {
	KPI_GCNT_DROPS = 0,     /* ring buffer full: event lost */
	KPI_GCNT_BAD_BATCH,     /* activity__batch with rec_size != 80 or n > 64: not read */
	KPI_GCNT_READ_FAIL,     /* bpf_probe_read_user of records or entries failed */
	KPI_GCNT_SEQS_CUT,      /* step__seqs beyond the chunks carried: entries lost */
	KPI_GCNT_MAX,
};

/* Common header of every event. */
struct kpi_gpu_ev_hdr {
	uint32_t type;          /* enum kpi_gpu_event_type */
	uint32_t pid;           /* tgid of the target */
	uint64_t ts;            /* CLOCK_MONOTONIC ns at the probe */
};

struct kpi_gpu_ev_batch {
	struct kpi_gpu_ev_hdr h;
	uint64_t seq;           /* the library's batch counter: a gap means lost batches */
	uint32_t n;             /* records in recs[] */
	uint32_t _pad;
	struct kpi_gpu_rec recs[KPI_CUPTI_BATCH_MAX];
};

struct kpi_gpu_ev_name {
	struct kpi_gpu_ev_hdr h;
	uint32_t id;
	uint32_t _pad;
	char name[KPI_CUPTI_NAME_MAX];
};

struct kpi_gpu_ev_state {
	struct kpi_gpu_ev_hdr h;
	int32_t state;          /* 1 on, 0 paused, -1 disabled after a failure */
	uint32_t _pad;
	char reason[KPI_GPU_REASON_LEN];
};

struct kpi_gpu_ev_stats {
	struct kpi_gpu_ev_hdr h;
	uint64_t records, cupti_dropped, step_unknown, names_full, buffers;
};

struct kpi_gpu_ev_step_seqs {
	struct kpi_gpu_ev_hdr h;
	uint64_t step;
	uint32_t n_total;       /* n of the probe: entries in the whole step */
	uint32_t first;         /* index of entries[0] in the step's list */
	uint32_t n;             /* entries in this chunk */
	uint32_t _pad;
	struct kpi_step_seq entries[KPI_STEP_SEQS_CHUNK];
};

_Static_assert(sizeof(struct kpi_gpu_ev_hdr) == 16, "kpi_gpu_ev_hdr ABI changed");
_Static_assert(sizeof(struct kpi_gpu_ev_batch) == 32 + 80 * KPI_CUPTI_BATCH_MAX, "kpi_gpu_ev_batch ABI changed");
_Static_assert(sizeof(struct kpi_gpu_ev_name) == 24 + KPI_CUPTI_NAME_MAX, "kpi_gpu_ev_name ABI changed");
_Static_assert(sizeof(struct kpi_gpu_ev_state) == 24 + KPI_GPU_REASON_LEN, "kpi_gpu_ev_state ABI changed");
_Static_assert(sizeof(struct kpi_gpu_ev_stats) == 56, "kpi_gpu_ev_stats ABI changed");
_Static_assert(sizeof(struct kpi_gpu_ev_step_seqs) == 40 + 16 * KPI_STEP_SEQS_CHUNK, "kpi_gpu_ev_step_seqs ABI changed");

#endif
