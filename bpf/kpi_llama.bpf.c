// SPDX-License-Identifier: GPL-2.0
/* kpi_llama.bpf.c - llama.cpp's llama_decode in servers the project never
 * touched: a uprobe and a uretprobe per call, one record per call with the
 * call's times and a per-sequence summary of its batch, for agent/sources/llama.c. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "kpi_llama_event.h"

char LICENSE[] SEC("license") = "GPL";

/* ---- maps ------------------------------------------------------------- */

#define LLAMA_RING_BYTES (4 << 20)      /* ~3000 calls between two polls */

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, LLAMA_RING_BYTES);
} llama_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KPI_LCNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} llama_counters SEC(".maps");

/* A call between its entry and its return, by thread. */
struct llama_call {
	__u64 t_start;
	__u64 ctx;
	struct kpi_llama_batch b;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);             /* pid_tgid */
	__type(value, struct llama_call);
} llama_calls SEC(".maps");

/* The summary under construction: a slot per sequence id (n_tokens 0: not in
 * this batch; every slot used is zeroed again after the call), the ids used
 * in order, and the current chunk of each of the batch's arrays. */
struct llama_scratch {
	struct kpi_llama_seq by_id[KPI_LLAMA_SEQ_IDS];
	__u32 used[KPI_LLAMA_EV_SEQS];
	__u32 n_used;
	__u32 flags;
	__s32 n_tokens;
	__u32 _pad;
	struct kpi_llama_batch b;
	__s32 pos[KPI_LLAMA_CHUNK];
	__s32 n_seq_id[KPI_LLAMA_CHUNK];
	__u64 seq_id[KPI_LLAMA_CHUNK];
	__s8 logits[KPI_LLAMA_CHUNK];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct llama_scratch);
} llama_scratch SEC(".maps");

/* ---- helpers ---------------------------------------------------------- */

/* No wake-up per call: the agent drains the ring on its own clock, and is
 * woken only when it is a quarter full. A wake-up is a self-IPI for the
 * irq_work, which in a VM is an exit: 20 µs a call on the test machine. */
static __always_inline void submit(void *e)
{
	__u64 avail = bpf_ringbuf_query(&llama_events, BPF_RB_AVAIL_DATA);
	bpf_ringbuf_submit(e, avail >= LLAMA_RING_BYTES / 4 ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&llama_counters, &idx);
	if (v)
		*v += 1;
}

/* Reads the chunk of each array that holds token i (a multiple of CHUNK);
 * 0, or -1 when a read fails. */
static __always_inline int chunk_read(struct llama_scratch *s, __u32 i)
{
	/* 64-bit, so that the register checked is the one the reads use */
	__u64 k = (__u32)s->n_tokens - i;
	if (k > KPI_LLAMA_CHUNK)
		k = KPI_LLAMA_CHUNK;
	asm volatile("" : "+r"(k));
	if (k == 0 || k > KPI_LLAMA_CHUNK)
		return -1;
	if (s->b.pos && bpf_probe_read_user(s->pos, k * 4, (const void *)(s->b.pos + (__u64)i * 4)))
		return -1;
	if (s->b.n_seq_id &&
	    bpf_probe_read_user(s->n_seq_id, k * 4, (const void *)(s->b.n_seq_id + (__u64)i * 4)))
		return -1;
	if (s->b.seq_id && bpf_probe_read_user(s->seq_id, k * 8, (const void *)(s->b.seq_id + (__u64)i * 8)))
		return -1;
	if (s->b.logits && bpf_probe_read_user(s->logits, k, (const void *)(s->b.logits + i)))
		return -1;
	return 0;
}

struct loop_ctx {
	struct llama_scratch *s;
};

/* One token: its sequence's slot takes its count, position and output flag. */
static long token_step(__u32 i, void *data)
{
	struct llama_scratch *s = ((struct loop_ctx *)data)->s;
	__u32 j = i & (KPI_LLAMA_CHUNK - 1);
	__s32 sid = 0, pos = -1;

	if (j == 0 && chunk_read(s, i)) {
		s->flags |= KPI_LLAMA_F_READ_FAIL;
		return 1;
	}
	if (s->b.seq_id) {
		__s32 nsid = s->b.n_seq_id ? s->n_seq_id[j] : 1;
		if (nsid < 1)
			return 0;       /* a token in no sequence */
		if (nsid > 1)
			s->flags |= KPI_LLAMA_F_MULTI_SEQ;
		if (bpf_probe_read_user(&sid, sizeof(sid), (const void *)s->seq_id[j])) {
			s->flags |= KPI_LLAMA_F_READ_FAIL;
			return 1;
		}
	}
	if (sid < 0 || sid >= KPI_LLAMA_SEQ_IDS) {
		s->flags |= KPI_LLAMA_F_CUT;
		return 0;
	}
	if (s->b.pos)
		pos = s->pos[j];
	/* the mask only restates the check above for the verifier */
	struct kpi_llama_seq *q = &s->by_id[(__u32)sid & (KPI_LLAMA_SEQ_IDS - 1)];
	if (q->n_tokens == 0) {
		__u32 n = s->n_used;
		if (n >= KPI_LLAMA_EV_SEQS) {
			s->flags |= KPI_LLAMA_F_CUT;
			return 0;
		}
		s->used[n & (KPI_LLAMA_EV_SEQS - 1)] = (__u32)sid;
		s->n_used = n + 1;
		q->seq_id = sid;
		q->pos_first = pos;
	}
	q->n_tokens++;
	q->pos_last = pos;
	/* without an output array the library computes the last token's only */
	if (s->b.logits ? s->logits[j] != 0 : i == (__u32)s->n_tokens - 1)
		q->n_logits++;
	return 0;
}

/* ---- llama_decode ------------------------------------------------------- */

/* int32_t llama_decode(struct llama_context *ctx, struct llama_batch batch):
 * ctx in rdi, the batch in the caller's stack memory above the return address
 * (BPF_KPROBE / BPF_KRETPROBE: the pt_regs accessors of this libbpf serve uprobes too). */
SEC("uprobe")
int BPF_KPROBE(kpi_llama_decode_entry, void *lctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct llama_call c = {};

	c.t_start = bpf_ktime_get_ns();
	c.ctx = (__u64)lctx;
	if (bpf_probe_read_user(&c.b, sizeof(c.b), (const void *)(PT_REGS_SP(ctx) + 8)))
		c.b.n_tokens = -1;
	bpf_map_update_elem(&llama_calls, &id, &c, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(kpi_llama_decode_return, int ret)
{
	__u64 t_end = bpf_ktime_get_ns();
	__u64 id = bpf_get_current_pid_tgid();
	__u32 zero = 0;
	struct llama_call *c = bpf_map_lookup_elem(&llama_calls, &id);
	struct llama_scratch *s = bpf_map_lookup_elem(&llama_scratch, &zero);
	struct kpi_llama_ev *e;

	if (!c) {
		count(KPI_LCNT_NO_ENTRY);
		return 0;
	}
	if (!s)
		goto out;
	e = bpf_ringbuf_reserve(&llama_events, sizeof(*e), 0);
	if (!e) {
		count(KPI_LCNT_DROPS);
		goto out;
	}
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->t_start = c->t_start;
	e->t_end = t_end;
	e->ctx = c->ctx;
	e->ret = ret;
	e->n_tokens = c->b.n_tokens;
	e->n_seqs = 0;
	s->b = c->b;
	s->n_tokens = c->b.n_tokens;
	s->flags = 0;
	s->n_used = 0;
	if (s->n_tokens <= 0 || s->n_tokens > (1 << 24) || (!s->b.token && !s->b.embd)) {
		count(KPI_LCNT_BAD);
		e->flags = KPI_LLAMA_F_BAD;
		submit(e);
		goto out;
	}
	if (!s->b.token)
		s->flags |= KPI_LLAMA_F_EMBD;
	if (!s->b.pos)
		s->flags |= KPI_LLAMA_F_NO_POS;
	__u32 n = (__u32)s->n_tokens;
	if (n > KPI_LLAMA_MAX_TOKENS) {
		n = KPI_LLAMA_MAX_TOKENS;
		s->flags |= KPI_LLAMA_F_CUT;
	}
	struct loop_ctx lc = { .s = s };
	bpf_loop(n, token_step, &lc, 0);
	for (__u32 k = 0; k < KPI_LLAMA_EV_SEQS; k++) {
		if (k >= s->n_used)
			break;
		__u32 sid = s->used[k] & (KPI_LLAMA_SEQ_IDS - 1);
		if (!(s->flags & KPI_LLAMA_F_READ_FAIL))
			e->seqs[e->n_seqs++ & (KPI_LLAMA_EV_SEQS - 1)] = s->by_id[sid];
		s->by_id[sid].n_tokens = 0;
		s->by_id[sid].n_logits = 0;
	}
	e->flags = s->flags;
	submit(e);
out:
	bpf_map_delete_elem(&llama_calls, &id);
	return 0;
}
