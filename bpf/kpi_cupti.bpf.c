// SPDX-License-Identifier: GPL-2.0
/* kpi_cupti.bpf.c - kpi-agent's GPU side in the kernel: libkpi_cupti.so's USDT
 * probes (record batches, kernel names, state, stats) and kpi-infer's
 * step__seqs, copied as they are into one ring buffer for agent/sources/gpu.c. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>
#include "kpi_gpu_event.h"

char LICENSE[] SEC("license") = "GPL";

/* ---- maps ------------------------------------------------------------- */

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);   /* ~1600 full batches: drained at every poll */
} gpu_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KPI_GCNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} gpu_counters SEC(".maps");

/* ---- helpers ---------------------------------------------------------- */

static __always_inline void count(__u32 idx, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&gpu_counters, &idx);
	if (v)
		*v += n;
}

static __always_inline void *ev_new(__u32 size, __u32 type)
{
	struct kpi_gpu_ev_hdr *h = bpf_ringbuf_reserve(&gpu_events, size, 0);
	if (!h) {
		count(KPI_GCNT_DROPS, 1);
		return NULL;
	}
	h->type = type;
	h->pid = bpf_get_current_pid_tgid() >> 32;
	h->ts = bpf_ktime_get_ns();
	return h;
}

/* A length the verifier can see is within [0, max]: the compiler may not fold
 * the bound into an earlier check. */
static __always_inline __u64 bounded(__u64 len, __u64 max)
{
	asm volatile("" : "+r"(len));
	return len > max ? max : len;
}

/* ---- libkpi_cupti.so -------------------------------------------------- */

/* Up to KPI_CUPTI_BATCH_MAX records in one read: the reservation is fixed,
 * the read is as long as the batch. */
SEC("usdt")
int BPF_USDT(kpi_cupti_activity_batch, const void *recs, __u32 n, __u32 rec_size, __u64 seq)
{
	struct kpi_gpu_ev_batch *e;

	if (rec_size != sizeof(struct kpi_gpu_rec) || n > KPI_CUPTI_BATCH_MAX) {
		/* a library of another ABI: agent/sources/gpu.c reports it once */
		count(KPI_GCNT_BAD_BATCH, 1);
		return 0;
	}
	e = ev_new(sizeof(*e), KPI_GEV_BATCH);
	if (!e)
		return 0;
	e->seq = seq;
	e->n = n;
	__u64 len = bounded((__u64)n * sizeof(struct kpi_gpu_rec), sizeof(e->recs));
	if (len && bpf_probe_read_user(e->recs, len, recs)) {
		count(KPI_GCNT_READ_FAIL, 1);
		e->n = 0;
	}
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("usdt")
int BPF_USDT(kpi_cupti_kernel_name, __u32 id, const char *name)
{
	struct kpi_gpu_ev_name *e = ev_new(sizeof(*e), KPI_GEV_NAME);
	if (!e)
		return 0;
	e->id = id;
	if (bpf_probe_read_user_str(e->name, sizeof(e->name), name) < 0)
		e->name[0] = 0;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("usdt")
int BPF_USDT(kpi_cupti_state, int state, const char *reason)
{
	struct kpi_gpu_ev_state *e = ev_new(sizeof(*e), KPI_GEV_STATE);
	if (!e)
		return 0;
	e->state = state;
	if (bpf_probe_read_user_str(e->reason, sizeof(e->reason), reason) < 0)
		e->reason[0] = 0;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("usdt")
int BPF_USDT(kpi_cupti_stats, __u64 records, __u64 cupti_dropped, __u64 step_unknown,
	     __u64 names_full, __u64 buffers)
{
	struct kpi_gpu_ev_stats *e = ev_new(sizeof(*e), KPI_GEV_STATS);
	if (!e)
		return 0;
	e->records = records;
	e->cupti_dropped = cupti_dropped;
	e->step_unknown = step_unknown;
	e->names_full = names_full;
	e->buffers = buffers;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* ---- kpi-infer: which sequences a step ran ---------------------------- */

/* One event per KPI_STEP_SEQS_CHUNK entries, KPI_STEP_SEQS_CHUNKS at most. */
SEC("usdt")
int BPF_USDT(kpi_step_seqs, __u64 step, int n, const void *entries)
{
	__u32 total = n > 0 ? (__u32)n : 0;

	for (__u32 c = 0; c < KPI_STEP_SEQS_CHUNKS; c++) {
		__u32 first = c * KPI_STEP_SEQS_CHUNK;
		if (first >= total && c > 0)
			break;
		__u32 k = total - first;
		if (first >= total)
			k = 0;
		if (k > KPI_STEP_SEQS_CHUNK)
			k = KPI_STEP_SEQS_CHUNK;
		struct kpi_gpu_ev_step_seqs *e = ev_new(sizeof(*e), KPI_GEV_STEP_SEQS);
		if (!e)
			return 0;
		e->step = step;
		e->n_total = total;
		e->first = first;
		e->n = k;
		__u64 len = bounded((__u64)k * sizeof(struct kpi_step_seq), sizeof(e->entries));
		if (len && bpf_probe_read_user(e->entries, len,
					       (const char *)entries + first * sizeof(struct kpi_step_seq))) {
			count(KPI_GCNT_READ_FAIL, 1);
			e->n = 0;
		}
		bpf_ringbuf_submit(e, 0);
	}
	if (total > KPI_STEP_SEQS_CHUNK * KPI_STEP_SEQS_CHUNKS)
		count(KPI_GCNT_SEQS_CUT, total - KPI_STEP_SEQS_CHUNK * KPI_STEP_SEQS_CHUNKS);
	return 0;
}
