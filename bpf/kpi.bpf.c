// SPDX-License-Identifier: GPL-2.0
/* kpi.bpf.c - kpi-agent's kernel side: USDT handlers for every kpi-infer probe,
 * socket read/write/close of the targets, tcp arrival + RTT, run-queue delay. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/usdt.bpf.h>
#include "kpi_event.h"
#include "kpi_maps.bpf.h"

#define S_IFMT   0170000
#define S_IFSOCK 0140000
/* sched_switch's prev_state: the reportable states are one bit each below
 * TASK_REPORT_MAX (0x100); a preempted task reads TASK_REPORT_MAX (with
 * TASK_RUNNING before 5.18), "R+" in the trace.  Still runnable = none of
 * the low bits set, preempted or not. */
#define TASK_REPORT_STATES 0xff

char LICENSE[] SEC("license") = "GPL";


/* ---- maps ------------------------------------------------------------- */

/* events, counters, targets and tls_calls are in kpi_maps.bpf.h: kpi_tls.bpf.c
 * is loaded on them. */

/* Inode number of an executable -> the state a process gets at its exec
 * (enum kpi_target_state): TRACED once the agent attached the file's USDT
 * probes for every process, PENDING before, NONE for a file without them.
 * Written by the agent (--exe: that file from the start; otherwise each
 * kpi-infer it has seen).  A number can repeat across filesystems: the agent
 * checks every exec it is told of and removes a process that is not its. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u64);
	__type(value, __u32);
} exec_inodes SEC(".maps");

/* Local TCP ports the targets listen on (host order): filters tcp_probe. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u16);
	__type(value, __u8);
} target_ports SEC(".maps");

/* Remote TCP ports the HTTP-mode targets' own calls went to (host order): the
 * answers' segments on those connections are timed too (tcp_probe), so that a
 * call's end is when its answer arrived, not when the caller got to read it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u16);
	__type(value, __u8);
} peer_ports SEC(".maps");

/* --port: the ports whose listener becomes a target at its listen(), before
 * its first connection (written by the agent; empty otherwise). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u16);
	__type(value, __u8);
} watch_ports SEC(".maps");
const volatile bool watch_listen = false;

/* Stop a process at the exec of a file whose probes are not attached yet
 * (discovery mode's first sight of a new kpi-infer build), or at the listen()
 * of a --port server: the agent attaches
 * them, which takes the kernel's first uprobe registration on the file (10-20
 * ms), then continues it, so not even its first request goes untraced.  Each
 * hold is an entry of `held` (struct kpi_held) before the stop: the map is
 * pinned (KPI_HELD_PIN), so an agent that dies holding a process leaves
 * what another needs to continue it.  hold_stop: the agent is ending, hold
 * nothing more (set before it releases what it holds). */
const volatile bool exec_hold = false;
const volatile __u32 holder_tgid = 0;
const volatile __u64 holder_start = 0;
volatile bool hold_stop = false;
#define SIGSTOP_NR 19

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KPI_HELD_MAX);
	__type(key, __u32);
	__type(value, struct kpi_held);
} held SEC(".maps");

/* Stops the current process (tgid) until its agent continues it: true when
 * it is held.  The entry goes in first, so that whoever continues it finds
 * it; a process held already (by another agent) is left to that one. */
static __always_inline bool hold_current(__u32 tgid, __u64 now, bool at_listen)
{
	struct task_struct *t = (struct task_struct *)bpf_get_current_task();
	struct kpi_held h = {
		.start_ns = BPF_CORE_READ(t, group_leader, start_boottime), .since = now,
		.holder_start = holder_start, .holder = holder_tgid, .at_listen = at_listen,
	};

	if (!exec_hold || hold_stop || bpf_map_update_elem(&held, &tgid, &h, BPF_NOEXIST))
		return false;
	if (bpf_send_signal(SIGSTOP_NR)) {
		bpf_map_delete_elem(&held, &tgid);
		return false;
	}
	return true;
}


/* tid -> tgid of the targets' threads: only for the tracepoint flavour of
 * the sched handlers, which see tids but not tgids. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u32);
} target_tids SEC(".maps");

/* first_ts: arrival of the first data segment not yet consumed by a read.
 * Reads clear it, so it is the next request's first segment even when that
 * segment lands before the daemon's response__end for the previous one.
 * last_ts: of the latest one (a call's answer: when its last bytes came). */
struct sk_state {
	__u64 first_ts, last_ts;
	__u32 srtt_us;
	/* HTTP mode: bytes a write left unsent (held_ts != 0), until they go out */
	__u32 held_seq;         /* write_seq after that write */
	__u64 held_ts;          /* its entry */
	__u32 held_tgid;
	__s32 held_fd;
};

/* Sockets with held bytes: tcp_probe looks at pure ACKs only while any are. */
__u64 n_held = 0;
/* HTTP-mode targets' threads inside a write: kpi_xmit looks for their first
 * packet only while any are. */
__u64 n_writing = 0;

/* struct sock * -> arrival state, fed by tcp:tcp_probe. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KPI_MAX_CONNS);
	__type(key, __u64);
	__type(value, struct sk_state);
} socks SEC(".maps");

enum { SYS_READ = 1, SYS_WRITE = 2 };
/* Where a syscall's bytes are (HTTP-mode targets copy a prefix of them). */
enum { SHAPE_BUF = 0, SHAPE_IOV = 1, SHAPE_MSG = 2, SHAPE_FILE = 3 };   /* FILE: sendfile, no user buffer */
struct sys_arg {
	int fd;
	int kind;
	__u64 ts;       /* sys_enter time */
	__u64 buf;      /* arg 2: the buffer, iovec array or msghdr */
	__u32 cnt;      /* arg 3 of readv/writev: iovecs */
	__u16 shape;
	__u16 http;     /* the target is in HTTP mode (KPI_TARGET_F_HTTP) */
	__u64 xmit_ts;  /* an HTTP-mode write: its first packet at the device, when
			 * sent inside the syscall (kpi_xmit), else 0 */
};

/* pid_tgid -> fd and entry time of the read/write in progress, from sys_enter
 * to sys_exit: for every write (its time is its entry, see write_done), and
 * for reads where sys_exit cannot read the fd from the task's registers (see
 * sys_exit_regs).  LRU: a thread that dies in a syscall never reaches its
 * exit handler. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct sys_arg);
} sys_args SEC(".maps");

/* The same in the thread's own storage where the kernel has task storage
 * (sys_in_task): no hash insert and delete per syscall, and nothing to age
 * out when a thread dies. kind 0: no syscall in progress. */
const volatile bool sys_in_task = false;

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sys_arg);
} sys_task SEC(".maps");

/* tid -> time it became runnable (LRU for the same reason). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64);
} runq_start SEC(".maps");

/* tgid -> run-queue delay of its threads since the attach, ns (struct
 * kpi_runq: all of it, and the parts behind its own threads and the idle
 * task). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KPI_MAX_TARGETS);
	__type(key, __u32);
	__type(value, struct kpi_runq);
} runq_total SEC(".maps");

/* Who a target thread took the CPU from when it last got it. */
struct runq_by {
	__u32 tgid;             /* 0: the idle task (the CPU was free) */
	char comm[16];          /* tracepoint flavour only */
};

/* ---- helpers ---------------------------------------------------------- */

static __always_inline bool is_target(__u32 tgid)
{
	return bpf_map_lookup_elem(&targets, &tgid) != NULL;
}

static __always_inline __u64 runq_of(__u32 tgid)
{
	struct kpi_runq *v = bpf_map_lookup_elem(&runq_total, &tgid);
	return v ? v->total : 0;
}

/* Reserve a zeroed record of struct T (bpf/kpi_event.h) with its header
 * filled; NULL, and a drop counted, when the ring is full. */
#define EV_NEW(T, type_, tgid_, ts_) ({                                          \
	struct T *e__ = bpf_ringbuf_reserve(&events, sizeof(struct T), 0);     \
	if (e__) {                                                              \
		__builtin_memset(e__, 0, sizeof(struct T));                     \
		e__->h.type = (type_);                                          \
		e__->h.pid = (tgid_);                                           \
		e__->h.ts = (ts_);                                              \
	} else {                                                                \
		count(KPI_CNT_DROPS);                                           \
	}                                                                       \
	e__;                                                                    \
})

/* Wake the agent only once this much is waiting (0: every event). The agent
 * drains on its own clock, at least every --flush-ms: a wake-up per event
 * would put a context switch on the traced daemon's path for every token. */
const volatile __u64 wakeup_bytes = 0;

static __always_inline void ev_send(void *e)
{
	count(KPI_CNT_EVENTS);
	__u64 waiting = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	bpf_ringbuf_submit(e, waiting >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

/* For the agent's bookkeeping of processes: wake it now, whatever is waiting. */
static __always_inline void ev_send_now(void *e)
{
	count(KPI_CNT_EVENTS);
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
}

/* struct sock * behind fd in the current task, 0 when fd is not a socket. */
static __always_inline __u64 fd_to_sk(int fd)
{
	struct task_struct *t = (struct task_struct *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(t, files, fdt);
	struct file **fda;
	struct file *f = NULL;
	struct socket *sock;
	umode_t mode;

	if (!fdt || fd < 0 || (unsigned int)fd >= BPF_CORE_READ(fdt, max_fds))
		return 0;
	fda = BPF_CORE_READ(fdt, fd);
	bpf_probe_read_kernel(&f, sizeof(f), &fda[fd]);
	if (!f)
		return 0;
	mode = BPF_CORE_READ(f, f_inode, i_mode);
	if ((mode & S_IFMT) != S_IFSOCK)
		return 0;
	sock = BPF_CORE_READ(f, private_data);
	return (__u64)BPF_CORE_READ(sock, sk);
}

/* ---- USDT: request lifecycle ----------------------------------------- */

/* USDT probes are attached to an executable for every process that runs it
 * (docs/agent.md, Targets): each handler first checks that the process is
 * one the agent traces. */

/* The probes whose one argument is the request id. */
static __always_inline int usdt_req(__u32 type, __u64 id)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct kpi_ev_req *e;

	if (!is_target(tgid))
		return 0;
	e = EV_NEW(kpi_ev_req, type, tgid, bpf_ktime_get_ns());
	if (!e)
		return 0;
	e->id = id;
	ev_send(e);
	return 0;
}

SEC("usdt")
int BPF_USDT(kpi_request_admitted, __u64 id, int fd, int prompt_tokens, int max_tokens,
	     const char *request_id, int operation)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct kpi_ev_admit *e;

	if (!is_target(tgid))
		return 0;
	e = EV_NEW(kpi_ev_admit, KPI_EV_ADMIT, tgid, bpf_ktime_get_ns());
	if (!e)
		return 0;
	e->id = id;
	e->fd = fd;
	e->prompt_tokens = prompt_tokens;
	e->max_tokens = max_tokens;
	e->operation = operation;
	bpf_probe_read_user_str(e->reqid, sizeof(e->reqid), request_id);
	ev_send(e);
	return 0;
}

SEC("usdt")
int BPF_USDT(kpi_request_rejected, int fd, int status, int reason, const char *request_id)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct kpi_ev_reject *e;

	if (!is_target(tgid))
		return 0;
	e = EV_NEW(kpi_ev_reject, KPI_EV_REJECT, tgid, bpf_ktime_get_ns());
	if (!e)
		return 0;
	e->fd = fd;
	e->http_status = status;
	e->reason = reason;
	bpf_probe_read_user_str(e->reqid, sizeof(e->reqid), request_id);
	ev_send(e);
	return 0;
}

SEC("usdt")
int BPF_USDT(kpi_request_scheduled, __u64 id)
{
	return usdt_req(KPI_EV_SCHED, id);
}

SEC("usdt")
int BPF_USDT(kpi_step_begin, __u64 step, int prefill_tokens, int decode_seqs, int kv_used,
	     int kv_free)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct kpi_ev_step_begin *e;

	if (!is_target(tgid))
		return 0;
	e = EV_NEW(kpi_ev_step_begin, KPI_EV_STEP_BEGIN, tgid, bpf_ktime_get_ns());
	if (!e)
		return 0;
	e->step = step;
	e->prefill_tokens = prefill_tokens;
	e->decode_seqs = decode_seqs;
	e->kv_used = kv_used;
	e->kv_free = kv_free;
	ev_send(e);
	return 0;
}

SEC("usdt")
int BPF_USDT(kpi_step_end, __u64 step)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct kpi_ev_step_end *e;

	if (!is_target(tgid))
		return 0;
	e = EV_NEW(kpi_ev_step_end, KPI_EV_STEP_END, tgid, bpf_ktime_get_ns());
	if (!e)
		return 0;
	e->step = step;
	ev_send(e);
	return 0;
}

SEC("usdt")
int BPF_USDT(kpi_request_first_token, __u64 id)
{
	return usdt_req(KPI_EV_FIRST, id);
}

SEC("usdt")
int BPF_USDT(kpi_request_preempted, __u64 id)
{
	return usdt_req(KPI_EV_PREEMPT, id);
}

SEC("usdt")
int BPF_USDT(kpi_request_finished, __u64 id, int output_tokens, int finish_reason)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct kpi_ev_finish *e;

	if (!is_target(tgid))
		return 0;
	e = EV_NEW(kpi_ev_finish, KPI_EV_FINISH, tgid, bpf_ktime_get_ns());
	if (!e)
		return 0;
	e->id = id;
	e->output_tokens = output_tokens;
	e->finish_reason = finish_reason;
	ev_send(e);
	return 0;
}

SEC("usdt")
int BPF_USDT(kpi_request_cancelled, __u64 id)
{
	return usdt_req(KPI_EV_CANCEL, id);
}

/* Sends the write times c holds as one WRITE event (they go ahead of the
 * event that ends the request, so the agent has them all by then). */
static __always_inline void writes_send(__u32 tgid, int fd, struct kpi_conn *c)
{
	__u32 n = c->n_writes;
	struct kpi_ev_write *e;

	if (!n)
		return;
	c->n_writes = 0;
	if (n > KPI_WRITE_BATCH)
		n = KPI_WRITE_BATCH;
	e = EV_NEW(kpi_ev_write, KPI_EV_WRITE, tgid, 0);
	if (e) {
		kpi_write_event_fill(e, tgid, fd, c, n);
		ev_send(e);
	}
	c->bytes = 0;
}

/* The response is complete: the connection goes idle, so the next data
 * segment or read on it starts a new request (keep-alive). */
SEC("usdt")
int BPF_USDT(kpi_response_end, __u64 id, int fd, int http_status)
{
	__u64 ts = bpf_ktime_get_ns();
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 key = conn_key(tgid, fd);
	struct kpi_conn *c;
	struct kpi_ev_resp_end *e;

	if (!is_target(tgid))
		return 0;
	c = bpf_map_lookup_elem(&conns, &key);
	if (c) {
		writes_send(tgid, fd, c);
		c->busy = 0;
	}
	e = EV_NEW(kpi_ev_resp_end, KPI_EV_RESP_END, tgid, ts);
	if (!e)
		return 0;
	e->id = id;
	e->fd = fd;
	e->http_status = http_status;
	e->runq_ns = runq_of(tgid);
	ev_send(e);
	return 0;
}

/* ---- USDT: disaggregated prefill and decode ----------------------------- */

/* kpi-infer --role router, decode and prefill (docs/disaggregation.md): the
 * routing decision, both ends of a request's KV transfer, the decode side's
 * wait for a slot, and prefix-cache hits.  The agent joins the three
 * processes' events by the x-request-id they all carry (agent/track/disagg.c). */

SEC("usdt")
int BPF_USDT(kpi_route_decision, __u64 id, int fd, const char *request_id, int policy,
	     const char *decode, const char *prefill)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct kpi_ev_route *e;

	if (!is_target(tgid))
		return 0;
	e = EV_NEW(kpi_ev_route, KPI_EV_ROUTE, tgid, bpf_ktime_get_ns());
	if (!e)
		return 0;
	e->id = id;
	e->fd = fd;
	e->policy = policy;
	bpf_probe_read_user_str(e->reqid, sizeof(e->reqid), request_id);
	bpf_probe_read_user_str(e->decode, sizeof(e->decode), decode);
	bpf_probe_read_user_str(e->prefill, sizeof(e->prefill), prefill);
	ev_send(e);
	return 0;
}

static __always_inline int kv_start(__u32 type, __u64 id, int fd, __u64 bytes, int blocks,
				    const char *peer)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct kpi_ev_kv_start *e;

	if (!is_target(tgid))
		return 0;
	e = EV_NEW(kpi_ev_kv_start, type, tgid, bpf_ktime_get_ns());
	if (!e)
		return 0;
	e->id = id;
	e->fd = fd;
	e->bytes = bytes;
	e->blocks = blocks;
	bpf_probe_read_user_str(e->peer, sizeof(e->peer), peer);
	ev_send(e);
	return 0;
}

static __always_inline int kv_end(__u32 type, __u64 id, int fd, __u64 bytes, int blocks, int status)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct kpi_ev_kv_end *e;

	if (!is_target(tgid))
		return 0;
	e = EV_NEW(kpi_ev_kv_end, type, tgid, bpf_ktime_get_ns());
	if (!e)
		return 0;
	e->id = id;
	e->fd = fd;
	e->bytes = bytes;
	e->blocks = blocks;
	e->status = status;
	ev_send(e);
	return 0;
}

SEC("usdt")
int BPF_USDT(kpi_kv_send_start, __u64 id, const char *request_id, int fd, __u64 bytes, int blocks,
	     const char *peer)
{
	return kv_start(KPI_EV_KV_SEND_START, id, fd, bytes, blocks, peer);
}

SEC("usdt")
int BPF_USDT(kpi_kv_send_end, __u64 id, int fd, __u64 bytes, int status)
{
	return kv_end(KPI_EV_KV_SEND_END, id, fd, bytes, -1, status);
}

SEC("usdt")
int BPF_USDT(kpi_kv_recv_start, __u64 id, const char *request_id, int fd, __u64 bytes, int blocks,
	     const char *peer)
{
	return kv_start(KPI_EV_KV_RECV_START, id, fd, bytes, blocks, peer);
}

SEC("usdt")
int BPF_USDT(kpi_kv_recv_end, __u64 id, int fd, __u64 bytes, int blocks, int status)
{
	return kv_end(KPI_EV_KV_RECV_END, id, fd, bytes, blocks, status);
}

SEC("usdt")
int BPF_USDT(kpi_kv_slot_wait, __u64 id, int waiting_ahead, int blocks_needed, int blocks_free,
	     int running, int max_running)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct kpi_ev_slot_wait *e;

	if (!is_target(tgid))
		return 0;
	e = EV_NEW(kpi_ev_slot_wait, KPI_EV_SLOT_WAIT, tgid, bpf_ktime_get_ns());
	if (!e)
		return 0;
	e->id = id;
	e->waiting_ahead = waiting_ahead;
	e->blocks_needed = blocks_needed;
	e->blocks_free = blocks_free;
	e->running = running;
	e->max_running = max_running;
	ev_send(e);
	return 0;
}

SEC("usdt")
int BPF_USDT(kpi_request_prefix_hit, __u64 id, int cached_tokens)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct kpi_ev_prefix_hit *e;

	if (!is_target(tgid))
		return 0;
	e = EV_NEW(kpi_ev_prefix_hit, KPI_EV_PREFIX_HIT, tgid, bpf_ktime_get_ns());
	if (!e)
		return 0;
	e->id = id;
	e->cached_tokens = cached_tokens;
	ev_send(e);
	return 0;
}

/* ---- TCP: first data segment of a request, smoothed RTT ---------------- */

/* Whether every byte of the segment was received before: a retransmission
 * of data the socket already has (the sender's copy of the ACK was late: a
 * throttled link whose queue holds the ACKs behind the data going the other
 * way).  TCP drops it, no read follows, and as a first segment it would
 * stand as the next request's arrival, however much later that comes. */
static __always_inline bool seg_old(const struct trace_event_raw_tcp_probe *ctx)
{
	struct sk_buff *skb = (struct sk_buff *)ctx->skbaddr;
	struct tcp_skb_cb *cb = (struct tcp_skb_cb *)__builtin_preserve_access_index(&skb->cb);
	__u32 end_seq = BPF_CORE_READ(cb, end_seq);
	__u32 rcv_nxt = BPF_CORE_READ((struct tcp_sock *)ctx->skaddr, rcv_nxt);

	return (__s32)(end_seq - rcv_nxt) <= 0;
}

/* A socket's held bytes are out by ts (end: the sequence just past what went
 * out): HTTP_SENT for the fd that wrote them, once all of them are. */
static __always_inline void held_check(struct sk_state *s, __u32 end, __u64 ts)
{
	struct kpi_ev_http_sent *e;

	if ((__s32)(end - s->held_seq) < 0)
		return;
	e = EV_NEW(kpi_ev_http_sent, KPI_EV_HTTP_SENT, s->held_tgid, ts);
	if (e) {
		e->fd = s->held_fd;
		e->_pad = 0;
		ev_send(e);
	}
	s->held_ts = 0;
	__sync_fetch_and_add(&n_held, -1);
}

/* A packet goes to a device (where a capture sees it: the wire).  While some
 * served socket has bytes TCP held back after a write (a client that reads
 * late sends no ACK, the window is full; TCP sends them at its ACK, or a loss
 * probe's timer), a TCP packet of it that carries their end sends HTTP_SENT.
 * Otherwise one load of n_held and out. */
SEC("raw_tp/net_dev_start_xmit")
int BPF_PROG(kpi_xmit, struct sk_buff *skb)
{
	__u64 sk;
	struct sk_state *s;
	unsigned char *head;
	__u16 th_off;
	__u32 data_off, seq, len;
	__u8 doff;
	struct tcphdr th;

	if (n_writing) {
		/* the first packet a target's write sends from inside the
		 * syscall: when its bytes reached the wire (a client's call) */
		__u64 pt = bpf_get_current_pid_tgid();
		struct sys_arg *a = sys_in_task ?
			bpf_task_storage_get(&sys_task, bpf_get_current_task_btf(), 0, 0) :
			bpf_map_lookup_elem(&sys_args, &pt);
		if (a && a->kind == SYS_WRITE && a->http && !a->xmit_ts)
			a->xmit_ts = bpf_ktime_get_ns();
	}
	if (!n_held)
		return 0;
	sk = (__u64)BPF_CORE_READ(skb, sk);
	if (!sk || !(s = bpf_map_lookup_elem(&socks, &sk)) || !s->held_ts)
		return 0;
	head = BPF_CORE_READ(skb, head);
	th_off = BPF_CORE_READ(skb, transport_header);
	data_off = (__u32)(BPF_CORE_READ(skb, data) - head);
	len = BPF_CORE_READ(skb, len);
	if (th_off == (__u16)~0U || bpf_probe_read_kernel(&th, sizeof(th), head + th_off))
		return 0;
	doff = th.doff;
	seq = bpf_ntohl(th.seq);
	/* payload: the packet's bytes past the TCP header */
	if (th_off < data_off || len < (th_off - data_off) + doff * 4u)
		return 0;
	held_check(s, seq + len - (th_off - data_off) - doff * 4u, bpf_ktime_get_ns());
	return 0;
}

/* A data segment reached a socket whose local port is a target's: note the
 * first one not yet consumed by a read, and the smoothed RTT.  Pure ACKs
 * (most segments: one per token the daemon sends) carry no request and are
 * left at once; the RTT read with the request's own segment is current. */
SEC("tracepoint/tcp/tcp_probe")
int kpi_tcp_probe(struct trace_event_raw_tcp_probe *ctx)
{
	__u16 port = ctx->sport, rport = ctx->dport;
	__u64 sk = (__u64)ctx->skaddr;
	struct sk_state *s, init = {};

	if (!ctx->data_len || seg_old(ctx))
		return 0;
	if (!bpf_map_lookup_elem(&target_ports, &port)) {
		/* an answer to a target's own call: its socket is in socks already */
		if (!bpf_map_lookup_elem(&peer_ports, &rport) || !(s = bpf_map_lookup_elem(&socks, &sk)))
			return 0;
		s->srtt_us = ctx->srtt;
		s->last_ts = bpf_ktime_get_ns();
		if (!s->first_ts)
			s->first_ts = s->last_ts;
		return 0;
	}
	s = bpf_map_lookup_elem(&socks, &sk);
	if (s) {
		s->srtt_us = ctx->srtt;
		if (!s->first_ts)
			s->first_ts = bpf_ktime_get_ns();
		return 0;
	}
	init.first_ts = bpf_ktime_get_ns();
	init.srtt_us = ctx->srtt;
	if (!bpf_map_update_elem(&socks, &sk, &init, BPF_NOEXIST))
		count(KPI_CNT_SOCKS_INS);
	return 0;
}

/* ---- syscalls: reads, writes and closes of the targets' sockets --------- */

/* n_writing counts the HTTP-mode writes noted and not yet ended: each one
 * ends once, at its exit, at the thread's next entry (a syscall that never
 * exited) or at the thread's exit, so that a thread gone inside a write does
 * not leave kpi_xmit looking at every packet of the host for good. */
static __always_inline void writing_end(const struct sys_arg *a)
{
	if (a->http && a->kind == SYS_WRITE)
		__sync_fetch_and_add(&n_writing, -1);
}

static __always_inline int sys_enter(int fd, int kind, int shape, __u64 buf, __u64 cnt)
{
	__u64 pt = bpf_get_current_pid_tgid();
	__u32 tgid = pt >> 32;
	struct kpi_target *tg = bpf_map_lookup_elem(&targets, &tgid);
	struct sys_arg a = { .fd = fd, .kind = kind };

	if (!tg)
		return 0;
	a.ts = bpf_ktime_get_ns();
	if (tg->flags & KPI_TARGET_F_HTTP) {
		a.http = 1;
		a.shape = shape;
		a.buf = buf;
		a.cnt = (__u32)cnt;
	}
	if (sys_in_task) {
		struct sys_arg *t = bpf_task_storage_get(&sys_task, bpf_get_current_task_btf(), 0,
							 BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!t)
			return 0;
		if (t->kind)
			writing_end(t);         /* a syscall that never exited */
		*t = a;
	} else if (!bpf_map_update_elem(&sys_args, &pt, &a, BPF_NOEXIST)) {
		count(KPI_CNT_SYS_ARGS_INS);
	} else {
		/* a thread has one entry: it is new unless the thread died in a
		 * syscall's middle and its id was reused, or a syscall never exited */
		struct sys_arg *old = bpf_map_lookup_elem(&sys_args, &pt);
		if (old)
			writing_end(old);
		bpf_map_update_elem(&sys_args, &pt, &a, BPF_ANY);
	}
	if (a.http && kind == SYS_WRITE)
		__sync_fetch_and_add(&n_writing, 1);
	return 0;
}

/* A connection accepted on one of the targets' listening ports: the server
 * side (KPI_ROLE_SERVED). */
static __always_inline bool served_here(__u64 sk)
{
	__u16 port = BPF_CORE_READ((struct sock *)sk, __sk_common.skc_num);

	return bpf_map_lookup_elem(&target_ports, &port) != NULL;
}

#define AF_INET_NR  2
#define AF_INET6_NR 10
#define IPPROTO_TCP_NR 6

/* A connected TCP socket over IPv4 or IPv6 (what SOCK describes). */
static __always_inline bool tcp_connected(__u64 sk)
{
	struct sock *s = (struct sock *)sk;
	__u16 family = BPF_CORE_READ(s, __sk_common.skc_family);

	return (family == AF_INET_NR || family == AF_INET6_NR) &&
	       BPF_CORE_READ(s, sk_protocol) == IPPROTO_TCP_NR &&
	       BPF_CORE_READ(s, __sk_common.skc_dport) != 0;
}

/* Tells the agent a connection's role and both ends (struct kpi_ev_sock). */
static __always_inline void sock_send(__u32 tgid, int fd, __u64 sk, __u32 role)
{
	struct sock *s = (struct sock *)sk;
	struct kpi_ev_sock *e = EV_NEW(kpi_ev_sock, KPI_EV_SOCK, tgid, bpf_ktime_get_ns());

	if (!e)
		return;
	e->fd = fd;
	e->role = role;
	e->family = BPF_CORE_READ(s, __sk_common.skc_family);
	e->lport = BPF_CORE_READ(s, __sk_common.skc_num);
	e->rport = bpf_ntohs(BPF_CORE_READ(s, __sk_common.skc_dport));
	if (e->family == AF_INET_NR) {
		bpf_probe_read_kernel(e->laddr, 4, &s->__sk_common.skc_rcv_saddr);
		bpf_probe_read_kernel(e->raddr, 4, &s->__sk_common.skc_daddr);
	} else {
		bpf_probe_read_kernel(e->laddr, 16, &s->__sk_common.skc_v6_rcv_saddr);
		bpf_probe_read_kernel(e->raddr, 16, &s->__sk_common.skc_v6_daddr);
	}
	ev_send(e);
}

/* The conns entry of a connection seen first now: whether fd is a socket
 * followed, and in which role, is looked up once.  In HTTP mode that is one
 * accepted on a target's port (served), or any other connected TCP socket
 * (its own client connections: a proxy's upstream, a gateway's calls).  A
 * USDT target's own TCP connections (a kpi-infer router's to its decode
 * workers, a decode worker's to a prefill worker, the router's /load polls)
 * carry no request it serves: no ARRIVE or WRITE for them, only their SOCK,
 * so that the agent knows the ends of the fd a kv__* probe names. */
static __always_inline struct kpi_conn *conn_add(__u64 key, int fd, bool http)
{
	struct kpi_conn n = {};
	bool tcp;

	n.sk = fd_to_sk(fd);
	tcp = n.sk != 0 && tcp_connected(n.sk);
	if (n.sk && (http || tcp) && !served_here(n.sk))
		n.role = KPI_ROLE_CLIENT;
	n.is_sock = n.sk != 0 && (http ? n.role == KPI_ROLE_SERVED || tcp : n.role == KPI_ROLE_SERVED);
	if (bpf_map_update_elem(&conns, &key, &n, BPF_NOEXIST)) {
		if (n.is_sock)
			count(KPI_CNT_CONN_FULL);
	} else if (tcp && (n.is_sock || n.role == KPI_ROLE_CLIENT)) {
		sock_send(key >> 32, fd, n.sk, n.role);
	}
	return bpf_map_lookup_elem(&conns, &key);
}

static __always_inline void read_done(__u32 tgid, int fd, long ret, __u64 now)
{
	__u64 key = conn_key(tgid, fd);
	struct kpi_conn *c = bpf_map_lookup_elem(&conns, &key);
	struct sk_state *s;
	struct kpi_ev_arrive *e;
	struct kpi_target *tg;
	__u64 arrive = now;
	__u32 srtt = 0;
	int src = KPI_ARRIVE_READ;

	if (!c)
		c = conn_add(key, fd, false);
	if (!c || !c->is_sock)
		return;
	s = bpf_map_lookup_elem(&socks, &c->sk);
	if (c->busy) {
		/* more of the same request (body): those segments are consumed */
		if (s)
			s->first_ts = 0;
		return;
	}
	c->busy = 1;
	if (s) {
		if (s->first_ts && s->first_ts <= now) {
			arrive = s->first_ts;
			src = KPI_ARRIVE_TCP;
		}
		srtt = s->srtt_us;
		s->first_ts = 0;
	}
	e = EV_NEW(kpi_ev_arrive, KPI_EV_ARRIVE, tgid, arrive);
	if (!e)
		return;
	e->fd = fd;
	e->src = src;
	e->t_read = now;
	e->srtt_us = srtt;
	e->bytes = ret;
	e->runq_ns = runq_of(tgid);
	/* the request reached a process whose probes are not in place yet:
	 * counted, so that what the trace may lack is said */
	tg = bpf_map_lookup_elem(&targets, &tgid);
	if (tg && tg->state == KPI_TARGET_PENDING)
		e->flags = KPI_ARRIVE_BEFORE_ATTACH;
	ev_send(e);
}

/* Per-token writes are kept in the connection and sent in batches.  A
 * write's time is its entry, when the daemon hands the bytes to the kernel:
 * they reach a local client inside the call, and a writer preempted there
 * (or doing softirq work) returns after the client has read them, so the
 * exit time would put the agent's first token after the client's. */
static __always_inline void write_done(__u32 tgid, int fd, long ret, __u64 t_enter)
{
	__u64 key = conn_key(tgid, fd);
	struct kpi_conn *c = bpf_map_lookup_elem(&conns, &key);
	__u32 n;

	if (!c || !c->busy)
		return;
	n = c->n_writes;
	if (n >= KPI_WRITE_BATCH) {     /* only if two threads raced here */
		writes_send(tgid, fd, c);
		n = 0;
	}
	c->writes[n & (KPI_WRITE_BATCH - 1)] = t_enter;
	c->bytes += ret;
	c->n_writes = n + 1;
	if (n + 1 == KPI_WRITE_BATCH)
		writes_send(tgid, fd, c);
}

/* A read or write that moved ret > 0 bytes, entered at t_enter (reads: 0). */
static __always_inline void sys_done(__u32 tgid, int fd, int kind, long ret, __u64 t_enter)
{
	if (kind == SYS_READ)
		read_done(tgid, fd, ret, bpf_ktime_get_ns());
	else
		write_done(tgid, fd, ret, t_enter);
}

/* ---- HTTP mode: payload prefixes of a target without probes ------------- */

/* One PAYLOAD record is built here (too big for the BPF stack) and sent at
 * its real size with bpf_ringbuf_output.  The slack lets an iovec be copied
 * at any offset below KPI_PAYLOAD_MAX with a length the verifier can bound. */
struct payload_scratch {
	struct kpi_ev_payload ev;
	unsigned char slack[KPI_PAYLOAD_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct payload_scratch);
} payload_buf SEC(".maps");

static __always_inline void http_close_send(__u32 tgid, int fd, __u32 by)
{
	struct kpi_ev_http_close *e = EV_NEW(kpi_ev_http_close, KPI_EV_HTTP_CLOSE, tgid,
					     bpf_ktime_get_ns());
	if (e) {
		e->fd = fd;
		e->by = by;
		ev_send(e);
	}
}

/* Sends the record: moved bytes, of which the first n are in e->data. */
static __always_inline void payload_send(struct kpi_ev_payload *e, __u64 n, __u64 moved)
{
	__u64 waiting;

	asm volatile("" : "+r"(n));     /* keep the bound check below for the verifier */
	if (n > KPI_PAYLOAD_MAX)
		return;
	e->moved = moved > 0xffffffffULL ? 0xffffffffU : (__u32)moved;
	e->captured = (__u32)n;
	waiting = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	if (bpf_ringbuf_output(&events, e, KPI_EV_PAYLOAD_HEAD + n,
			       waiting >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP))
		count(KPI_CNT_DROPS);
	else
		count(KPI_CNT_EVENTS);
}

/* One buffer of moved bytes at ubuf, its first KPI_PAYLOAD_MAX copied. */
static __always_inline void payload_buf_send(struct kpi_ev_payload *e, __u64 ubuf, __u64 moved)
{
	__u64 n = moved < KPI_PAYLOAD_MAX ? moved : KPI_PAYLOAD_MAX;

	asm volatile("" : "+r"(n));
	if (n > KPI_PAYLOAD_MAX)
		return;
	if (n && bpf_probe_read_user(e->data, n, (const void *)ubuf))
		n = 0;
	payload_send(e, n, moved);
}

/* An iovec array: moved is spread over the iovecs in order and they are
 * packed into as few records as fit (a chunked write is often a size line,
 * the data and a CRLF; nginx puts one iovec per pending event).  A record
 * ends where an iovec is not copied whole, so its captured bytes are always a
 * prefix of its moved ones; what the first KPI_PAYLOAD_IOVS iovecs do not
 * hold goes out uncaptured.  One iovec per bpf_loop step: the verifier checks
 * the step once, where an unrolled loop of 32 took it seconds. */
struct iov_walk {
	__u64 iov, n_iov;
	__u64 left;             /* bytes of ret not yet placed */
	__u64 in_rec;           /* moved bytes in the record being filled */
	__u64 off;              /* captured bytes in it */
};

static long iov_step(__u32 i, void *ctx)
{
	struct iov_walk *w = ctx;
	__u32 zero = 0;
	struct payload_scratch *sc = bpf_map_lookup_elem(&payload_buf, &zero);
	struct kpi_ev_payload *e;
	struct iovec v;
	__u64 piece, room, n, off;

	if (!sc || i >= w->n_iov || !w->left)
		return 1;
	e = &sc->ev;
	if (bpf_probe_read_user(&v, sizeof(v), (const void *)(w->iov + i * sizeof(v))))
		return 1;
	piece = v.iov_len < w->left ? v.iov_len : w->left;
	if (!piece)
		return 0;
	if (w->off && w->off + piece > KPI_PAYLOAD_MAX) {       /* a new record for it */
		payload_send(e, w->off, w->in_rec);
		w->off = 0;
		w->in_rec = 0;
	}
	off = w->off;
	asm volatile("" : "+r"(off));
	if (off > KPI_PAYLOAD_MAX)
		return 1;
	room = KPI_PAYLOAD_MAX - off;
	n = piece < room ? piece : room;
	asm volatile("" : "+r"(n));
	if (n > KPI_PAYLOAD_MAX)
		return 1;
	if (n && bpf_probe_read_user(e->data + off, n, v.iov_base))
		n = 0;
	w->off = off + n;
	w->in_rec += piece;
	w->left -= piece;
	if (n < piece) {                        /* the rest of it is a gap: the record ends */
		payload_send(e, w->off, w->in_rec);
		w->off = 0;
		w->in_rec = 0;
	}
	return 0;
}

/* The kernel has bpf_loop (5.17); without it the object still loads, and
 * vectored reads and writes go to the tracker as gaps. */
const volatile bool has_loop = false;

static __always_inline void payload_iov(struct kpi_ev_payload *e, __u64 iov, __u64 n_iov, long ret)
{
	struct iov_walk w = { .iov = iov, .n_iov = n_iov, .left = (__u64)ret };

	if (has_loop)
		bpf_loop(KPI_PAYLOAD_IOVS, iov_step, &w, 0);
	if (w.in_rec)
		payload_send(e, w.off, w.in_rec);
	if (w.left)
		payload_send(e, 0, w.left);    /* not captured: a gap for the tracker */
}

/* A read or write that moved bytes inside an SSL call: it names the call's
 * socket (the first one it touches) and times it, its ciphertext is dropped
 * (the call's return sends the plaintext). */
static __always_inline void tls_note(struct kpi_tls_call *tc, const struct sys_arg *a,
				     struct kpi_conn *c, __u64 now)
{
	struct sk_state *s;

	if (tc->fd == -1)
		tc->fd = a->fd;
	if (tc->fd != a->fd || (a->kind == SYS_READ) != (tc->dir == KPI_PAYLOAD_IN))
		return;
	if (a->kind != SYS_READ) {
		if (!tc->t_io)
			tc->t_io = a->ts;
		return;
	}
	tc->t_io = now;
	s = bpf_map_lookup_elem(&socks, &c->sk);
	if (s) {
		if (!tc->t_seg && s->first_ts && s->first_ts <= now)
			tc->t_seg = s->first_ts;
		tc->srtt_us = s->srtt_us;
		s->first_ts = 0;
	}
}

/* The first bytes a syscall moved (its first buffer or iovec), 0 when unreadable. */
static __always_inline __u32 first_word(const struct sys_arg *a, long ret)
{
	__u64 p = a->buf;
	struct iovec v;
	__u32 w = 0;

	if (ret < 4)
		return 0;
	if (a->shape == SHAPE_MSG) {
		struct user_msghdr m;
		if (bpf_probe_read_user(&m, sizeof(m), (const void *)p))
			return 0;
		p = (__u64)m.msg_iov;
	}
	if (a->shape != SHAPE_BUF) {
		if (bpf_probe_read_user(&v, sizeof(v), (const void *)p) || v.iov_len < 4)
			return 0;
		p = (__u64)v.iov_base;
	}
	bpf_probe_read_user(&w, sizeof(w), (const void *)p);
	return w;
}

#define WORD(a, b, c, d) ((__u32)(a) | (__u32)(b) << 8 | (__u32)(c) << 16 | (__u32)(d) << 24)

/* Whether a read's first bytes (first_word) begin a TLS record (content type
 * 20-23, version 3.x): only such reads are noted for a memory BIO's SSL_read. */
static __always_inline bool tls_record_start(__u32 w)
{
	return (w & 0xff) >= 0x14 && (w & 0xff) <= 0x17 && (w >> 8 & 0xff) == 0x03;
}

/* A connection the target made is followed while it speaks HTTP/1.1: its
 * first write a request line, or (one opened before the attach) its first
 * read a status line.  Anything else (a database's protocol, TLS, a server
 * that speaks first) is left at once: no payload copies for it, and nothing
 * for the agent's HTTP tracker to count as lost framing. */
/* A target's own HTTP connection: tcp_probe times the segments of its
 * answers (socks entry, its remote port in peer_ports). */
static __always_inline void client_answers_timed(const struct kpi_conn *c)
{
	struct sock *s = (struct sock *)c->sk;
	struct sk_state init = {};
	__u16 server_port;
	__u8 one = 1;

	if (!s)
		return;
	server_port = bpf_ntohs(BPF_CORE_READ(s, __sk_common.skc_dport));
	bpf_map_update_elem(&peer_ports, &server_port, &one, BPF_ANY);
	if (!bpf_map_update_elem(&socks, &c->sk, &init, BPF_NOEXIST))
		count(KPI_CNT_SOCKS_INS);
}

static __always_inline bool client_http(struct kpi_conn *c, const struct sys_arg *a, long ret)
{
	__u32 w;

	if (c->http)
		return true;
	w = first_word(a, ret);
	if (a->kind == SYS_READ ? w == WORD('H', 'T', 'T', 'P') :
	    w == WORD('G', 'E', 'T', ' ') || w == WORD('P', 'O', 'S', 'T') || w == WORD('P', 'U', 'T', ' ') ||
	    w == WORD('H', 'E', 'A', 'D') || w == WORD('D', 'E', 'L', 'E') || w == WORD('P', 'A', 'T', 'C') ||
	    w == WORD('O', 'P', 'T', 'I') || w == WORD('C', 'O', 'N', 'N') || w == WORD('T', 'R', 'A', 'C')) {
		c->http = 1;
		client_answers_timed(c);
		return true;
	}
	c->is_sock = 0;
	return false;
}

/* After a served socket's write: whether TCP holds bytes back (write_seq past
 * snd_nxt), noted in its socks entry until they go out; bytes held before
 * that are out now are sent first (held_check). */
static __always_inline bool held_after_write(const struct kpi_conn *c, __u32 tgid,
					     const struct sys_arg *a)
{
	struct tcp_sock *tp = (struct tcp_sock *)c->sk;
	__u32 write_seq = BPF_CORE_READ(tp, write_seq), snd_nxt = BPF_CORE_READ(tp, snd_nxt);
	__u64 sk = c->sk;
	struct sk_state *s = bpf_map_lookup_elem(&socks, &sk);

	if (!s)
		return false;
	if (s->held_ts)         /* out, and no packet of it seen: by this write */
		held_check(s, snd_nxt, a->ts);
	if (write_seq == snd_nxt)
		return false;
	if (!s->held_ts)
		__sync_fetch_and_add(&n_held, 1);
	s->held_seq = write_seq;
	s->held_ts = a->ts;
	s->held_tgid = tgid;
	s->held_fd = a->fd;
	return true;
}

/* A read or write of an HTTP-mode target returned ret: its bytes go to the
 * agent's HTTP tracker.  Reads are timed at their exit (and carry the first
 * unread segment's arrival), writes at their entry, as in USDT mode.
 * Inside an SSL call they only name and time it (tls_note). */
static __always_inline void http_done(__u32 tgid, const struct sys_arg *a, long ret)
{
	__u64 pt = bpf_get_current_pid_tgid();
	__u64 now = bpf_ktime_get_ns(), key = conn_key(tgid, a->fd);
	struct kpi_conn *c = bpf_map_lookup_elem(&conns, &key);
	struct kpi_tls_call *tc = bpf_map_lookup_elem(&tls_calls, &pt);
	struct payload_scratch *sc;
	struct kpi_ev_payload *e;
	struct sk_state *s;
	__u32 zero = 0;

	if (tc && tc->task_start != task_start32())
		tc = NULL;      /* left by a thread that died in its call; this one is not in one */
	if (!c)
		c = conn_add(key, a->fd, true);
	if (!c || !c->is_sock) {
		if (tc && tc->fd == -1)
			tc->fd = -2;    /* an SSL call on a socket it did not accept */
		return;
	}
	if (c->role == KPI_ROLE_CLIENT && ret > 0 && !client_http(c, a, ret))
		return;
	if (ret == 0 && a->kind == SYS_READ) {
		http_close_send(tgid, a->fd, KPI_CLOSE_BY_CLIENT);      /* EOF */
		return;
	}
	if (ret == -32 || ret == -104) {                                /* EPIPE, ECONNRESET */
		http_close_send(tgid, a->fd, KPI_CLOSE_BY_CLIENT);
		return;
	}
	if (ret <= 0)
		return;
	if (tc) {
		tls_note(tc, a, c, now);
		return;
	}
	sc = bpf_map_lookup_elem(&payload_buf, &zero);
	if (!sc)
		return;
	e = &sc->ev;
	e->h.type = KPI_EV_PAYLOAD;
	e->h.pid = tgid;
	e->fd = a->fd;
	e->t_seg = 0;
	e->srtt_us = 0;
	e->tid = (__u32)bpf_get_current_pid_tgid();
	e->role = c->role;
	e->flags = 0;
	if (a->kind == SYS_READ) {
		e->h.ts = now;
		e->dir = KPI_PAYLOAD_IN;
		s = bpf_map_lookup_elem(&socks, &c->sk);
		if (s) {
			/* a request: its first segment; a call's answer: its latest */
			__u64 seg = c->role == KPI_ROLE_CLIENT ? s->last_ts : s->first_ts;
			if (seg && seg <= now)
				e->t_seg = seg;
			e->srtt_us = s->srtt_us;
			s->first_ts = s->last_ts = 0;
		}
		if (c->role == KPI_ROLE_SERVED && tls_record_start(first_word(a, ret))) {
			/* the ciphertext an SSL_read through a memory BIO may decrypt next */
			struct kpi_tls_read lr = { .ts = now, .t_seg = e->t_seg, .fd = a->fd,
						   .srtt_us = e->srtt_us };
			bpf_map_update_elem(&tls_last_read, &pt, &lr, BPF_ANY);
		}
	} else {
		/* a call's request: when its first packet went out, where that
		 * happened inside the write (a served write keeps its entry) */
		e->h.ts = c->role == KPI_ROLE_CLIENT && a->xmit_ts ? a->xmit_ts : a->ts;
		e->dir = KPI_PAYLOAD_OUT;
		if (c->role == KPI_ROLE_SERVED && held_after_write(c, tgid, a))
			e->flags = KPI_PAYLOAD_F_UNSENT;
		if (c->role == KPI_ROLE_SERVED && a->shape != SHAPE_FILE &&
		    tls_record_start(first_word(a, ret))) {
			/* a record Go's tls.(*Conn).Write may be sending (kpi_tls.bpf.c) */
			struct kpi_tls_read lw = { .ts = e->h.ts, .fd = a->fd };
			bpf_map_update_elem(&tls_last_write, &key, &lw, BPF_ANY);
		}
	}
	if (a->shape == SHAPE_BUF) {
		payload_buf_send(e, a->buf, (__u64)ret);
	} else if (a->shape == SHAPE_FILE) {
		payload_send(e, 0, (__u64)ret);         /* a file's bytes: a gap the framing steps over */
	} else if (a->shape == SHAPE_IOV) {
		payload_iov(e, a->buf, a->cnt, ret);
	} else {
		struct user_msghdr m;
		if (bpf_probe_read_user(&m, sizeof(m), (const void *)a->buf))
			payload_send(e, 0, (__u64)ret);         /* a gap of ret bytes */
		else
			payload_iov(e, (__u64)m.msg_iov, m.msg_iovlen, ret);
	}
}

/* sys_exit after a sys_enter noted the fd. */
static __always_inline int sys_exit(long ret)
{
	__u64 pt = bpf_get_current_pid_tgid();
	struct sys_arg *a, arg;

	if (sys_in_task) {
		a = bpf_task_storage_get(&sys_task, bpf_get_current_task_btf(), 0, 0);
		if (!a || !a->kind)
			return 0;
		arg = *a;
		a->kind = 0;
	} else {
		a = bpf_map_lookup_elem(&sys_args, &pt);
		if (!a)
			return 0;
		arg = *a;
		if (!bpf_map_delete_elem(&sys_args, &pt))
			count(KPI_CNT_SYS_ARGS_DEL);
	}
	writing_end(&arg);
	if (arg.http)
		http_done(pt >> 32, &arg, ret);
	else if (ret > 0)
		sys_done(pt >> 32, arg.fd, arg.kind, ret, arg.ts);
	return 0;
}

/* sys_exit alone, for reads: the registers the task entered the syscall with
 * are still saved on its kernel stack (bpf_task_pt_regs), the fd in the first
 * argument's.  No sys_enter program and no map entry per read.  Writes need
 * their entry time and keep both programs (the agent loads these where the
 * kernel has bpf_task_pt_regs: exit_regs). */

static __always_inline int sys_exit_regs(long ret, int kind, int shape)
{
	__u64 pt = bpf_get_current_pid_tgid();
	__u32 tgid = pt >> 32;
	struct kpi_target *tg;
	struct pt_regs *regs;

	if (ret < 0 || !(tg = bpf_map_lookup_elem(&targets, &tgid)))
		return 0;
	regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	if (tg->flags & KPI_TARGET_F_HTTP) {
		struct sys_arg a = { .kind = kind, .shape = shape, .http = 1 };
		a.fd = (int)PT_REGS_PARM1_CORE_SYSCALL(regs);
		a.buf = PT_REGS_PARM2_CORE_SYSCALL(regs);
		a.cnt = (__u32)PT_REGS_PARM3_CORE_SYSCALL(regs);
		http_done(tgid, &a, ret);
		return 0;
	}
	if (ret > 0)
		sys_done(tgid, (int)PT_REGS_PARM1_CORE_SYSCALL(regs), kind, ret, 0);
	return 0;
}

/* Who ended a connection the target closes: the peer, when its FIN
 * (CLOSE_WAIT) or RST (CLOSE) came first.  A server that learns of a client
 * gone from epoll (EPOLLRDHUP, EPOLLERR) closes without a read or write that
 * fails, and this is where that shows (nginx does so mid-stream). */
static __always_inline unsigned int closer(__u64 sk)
{
	unsigned char st = sk ? BPF_CORE_READ((struct sock *)sk, __sk_common.skc_state) : 0;

	return st == 8 /* TCP_CLOSE_WAIT */ || st == 7 /* TCP_CLOSE */ ? KPI_CLOSE_AFTER_PEER : KPI_CLOSE_BY_SERVER;
}

/* shutdown(fd, SHUT_WR or SHUT_RDWR) of an HTTP-mode target's socket: its
 * FIN, which ends a body delimited by the close for the client, goes out
 * here, not at the close() that may follow it much later (Python's
 * socketserver, nginx's lingering close). */
static __always_inline int sys_shutdown(int fd, long how)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct kpi_target *tg;
	struct kpi_conn *c;
	__u64 key;

	if (how != 1 /* SHUT_WR */ && how != 2 /* SHUT_RDWR */)
		return 0;
	tg = bpf_map_lookup_elem(&targets, &tgid);
	if (!tg || !(tg->flags & KPI_TARGET_F_HTTP))
		return 0;
	key = conn_key(tgid, fd);
	c = bpf_map_lookup_elem(&conns, &key);
	if (c && c->is_sock)
		http_close_send(tgid, fd, KPI_CLOSE_SHUT_WR);
	return 0;
}

static __always_inline int sys_close(int fd)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct kpi_target *tg;
	__u64 key;
	struct kpi_conn *c;

	tg = bpf_map_lookup_elem(&targets, &tgid);
	if (!tg)
		return 0;
	key = conn_key(tgid, fd);
	c = bpf_map_lookup_elem(&conns, &key);
	if (!c)
		return 0;
	if (c->sk && !bpf_map_delete_elem(&socks, &c->sk))
		count(KPI_CNT_SOCKS_DEL);
	if (tg->flags & KPI_TARGET_F_HTTP) {
		if (c->is_sock)
			http_close_send(tgid, fd, closer(c->sk));
		bpf_map_delete_elem(&conns, &key);
		return 0;
	}
	writes_send(tgid, fd, c);
	if (c->busy) {
		struct kpi_ev_close *e = EV_NEW(kpi_ev_close, KPI_EV_CLOSE, tgid, bpf_ktime_get_ns());
		if (e) {
			e->fd = fd;
			ev_send(e);
		}
	}
	bpf_map_delete_elem(&conns, &key);
	return 0;
}

/* A target starts listening: its port filters tcp_probe from now, so the
 * first request's segment is seen even before the agent reads the target's
 * sockets (it does at every rescan, for ports bound some other way). */
/* A process that listens on a --port port becomes a target there, before it
 * can accept a connection: held (when holding) until the agent has chosen
 * its path (its USDT probes, or its HTTP exchanges), and the agent woken
 * with an EXEC event that says so. */
static __always_inline void listen_adopt(__u32 tgid)
{
	struct task_struct *t = (struct task_struct *)bpf_get_current_task();
	struct kpi_target v = { .since = bpf_ktime_get_ns(), .state = KPI_TARGET_PENDING };
	struct kpi_ev_exec *e;
	bool stopped;

	if (bpf_map_update_elem(&targets, &tgid, &v, BPF_NOEXIST))
		return;         /* full, or another thread of it got there first */
	stopped = hold_current(tgid, v.since, true);
	e = EV_NEW(kpi_ev_exec, KPI_EV_EXEC, tgid, v.since);
	if (!e)
		return;         /* the rescan finds it (and continues it) */
	e->ino = BPF_CORE_READ(t, mm, exe_file, f_inode, i_ino);
	e->state = v.state;
	e->held = stopped;
	e->at_listen = 1;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	ev_send_now(e);
}

static __always_inline int sys_listen(int fd)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	bool target = is_target(tgid);
	struct sock *sk;
	__u16 port;
	__u8 one = 1;

	if (!target && !watch_listen)
		return 0;
	sk = (struct sock *)fd_to_sk(fd);
	if (!sk)
		return 0;
	port = BPF_CORE_READ(sk, __sk_common.skc_num);
	if (!target) {
		if (!port || !bpf_map_lookup_elem(&watch_ports, &port))
			return 0;
		listen_adopt(tgid);
	}
	if (port)
		bpf_map_update_elem(&target_ports, &port, &one, BPF_ANY);
	return 0;
}

/* Tracepoint flavour: an entry program per syscall (syscalls:sys_enter_*);
 * at the exit, with exit_regs, a program per read (its fd from the saved
 * registers, no entry program loaded), and one program for every syscall
 * whose entry saved its arguments: the writes, and without exit_regs the
 * reads too. That one is verified once and attached to each of their
 * sys_exit tracepoints by the agent (the SEC below names the first), where
 * one copy per syscall made the verifier's work at start five to nine times
 * its size. */
#define SYS_TP_ENTER(name, kind, shape)                                           \
	SEC("tracepoint/syscalls/sys_enter_" #name)                               \
	int kpi_enter_##name(struct trace_event_raw_sys_enter *ctx)               \
	{ return sys_enter((int)ctx->args[0], kind, shape, ctx->args[1], ctx->args[2]); }
#define SYS_TP_READ(name, shape)                                                  \
	SYS_TP_ENTER(name, SYS_READ, shape)                                       \
	SEC("tracepoint/syscalls/sys_exit_" #name)                                \
	int kpi_exit_##name(struct trace_event_raw_sys_exit *ctx)                 \
	{ return sys_exit_regs(ctx->ret, SYS_READ, shape); }

SYS_TP_READ(read, SHAPE_BUF)
SYS_TP_READ(readv, SHAPE_IOV)
SYS_TP_READ(recvfrom, SHAPE_BUF)
SYS_TP_READ(recvmsg, SHAPE_MSG)
SYS_TP_ENTER(write, SYS_WRITE, SHAPE_BUF)
SYS_TP_ENTER(writev, SYS_WRITE, SHAPE_IOV)
SYS_TP_ENTER(sendto, SYS_WRITE, SHAPE_BUF)
SYS_TP_ENTER(sendmsg, SYS_WRITE, SHAPE_MSG)
SYS_TP_ENTER(sendfile64, SYS_WRITE, SHAPE_FILE)

SEC("tracepoint/syscalls/sys_exit_write")
int kpi_exit_saved(struct trace_event_raw_sys_exit *ctx)
{
	return sys_exit(ctx->ret);
}

SEC("tracepoint/syscalls/sys_enter_close")
int kpi_enter_close(struct trace_event_raw_sys_enter *ctx)
{
	return sys_close((int)ctx->args[0]);
}

SEC("tracepoint/syscalls/sys_enter_shutdown")
int kpi_enter_shutdown(struct trace_event_raw_sys_enter *ctx)
{
	return sys_shutdown((int)ctx->args[0], (long)ctx->args[1]);
}

SEC("tracepoint/syscalls/sys_enter_listen")
int kpi_enter_listen(struct trace_event_raw_sys_enter *ctx)
{
	return sys_listen((int)ctx->args[0]);
}

/* raw_tp flavour for kernels without syscall tracepoints: the agent writes
 * this arch's syscall numbers here before load (-1: not traced). */
const volatile long nr_read = -1, nr_readv = -1, nr_recvfrom = -1, nr_recvmsg = -1;
const volatile long nr_write = -1, nr_writev = -1, nr_sendto = -1, nr_sendmsg = -1;
const volatile long nr_close = -1, nr_listen = -1, nr_sendfile = -1, nr_shutdown = -1;

SEC("raw_tp/sys_enter")
int BPF_PROG(kpi_raw_sys_enter, struct pt_regs *regs, long id)
{
	__u64 buf, cnt;
	int fd;

	if (id < 0)
		return 0;
	fd = (int)PT_REGS_PARM1_CORE_SYSCALL(regs);
	buf = PT_REGS_PARM2_CORE_SYSCALL(regs);
	cnt = PT_REGS_PARM3_CORE_SYSCALL(regs);
	if (id == nr_read || id == nr_recvfrom)
		return sys_enter(fd, SYS_READ, SHAPE_BUF, buf, cnt);
	if (id == nr_readv)
		return sys_enter(fd, SYS_READ, SHAPE_IOV, buf, cnt);
	if (id == nr_recvmsg)
		return sys_enter(fd, SYS_READ, SHAPE_MSG, buf, cnt);
	if (id == nr_write || id == nr_sendto)
		return sys_enter(fd, SYS_WRITE, SHAPE_BUF, buf, cnt);
	if (id == nr_writev)
		return sys_enter(fd, SYS_WRITE, SHAPE_IOV, buf, cnt);
	if (id == nr_sendmsg)
		return sys_enter(fd, SYS_WRITE, SHAPE_MSG, buf, cnt);
	if (id == nr_sendfile)
		return sys_enter(fd, SYS_WRITE, SHAPE_FILE, 0, cnt);
	if (id == nr_close)
		return sys_close(fd);
	if (id == nr_shutdown)
		return sys_shutdown(fd, (long)buf);
	if (id == nr_listen)
		return sys_listen(fd);
	return 0;
}

SEC("raw_tp/sys_exit")
int BPF_PROG(kpi_raw_sys_exit, struct pt_regs *regs, long ret)
{
	return sys_exit(ret);
}

/* ---- sched: run-queue delay of the targets' threads ------------------- */

/* Adds one wait of a target thread to its process's total.  The wait ended
 * when `by` left the CPU: the process's own threads and the idle task are
 * summed here (on a quiet machine nearly every wake-up ends a short wait
 * behind the idle task: no event for those); anything else goes to the agent
 * as a RUNQ_BY event, so that a report can name what the engine waited
 * behind (the same attribution as runqslower's prev task: the task that ran
 * last, not every task that ran during the wait). */
static __always_inline void runq_add(__u32 tgid, __u64 delta, const struct runq_by *by)
{
	struct kpi_runq *tot = bpf_map_lookup_elem(&runq_total, &tgid);
	bool self = by->tgid == tgid, idle = by->tgid == 0;
	struct kpi_ev_runq_by *e;

	if (!delta)
		return;
	if (tot) {
		__sync_fetch_and_add(&tot->total, delta);
		if (self)
			__sync_fetch_and_add(&tot->self, delta);
		else if (idle)
			__sync_fetch_and_add(&tot->idle, delta);
	} else {
		struct kpi_runq v = { .total = delta, .self = self ? delta : 0, .idle = idle ? delta : 0 };
		bpf_map_update_elem(&runq_total, &tgid, &v, BPF_NOEXIST);
	}
	if (self || idle || !(e = EV_NEW(kpi_ev_runq_by, KPI_EV_RUNQ_BY, tgid, bpf_ktime_get_ns())))
		return;
	e->by_tgid = by->tgid;
	e->wait_ns = delta;
	__builtin_memcpy(e->comm, by->comm, sizeof(by->comm));
	ev_send(e);
}

/* The current task: the one leaving the CPU at sched_switch. */
static __always_inline void runq_by_current(struct runq_by *by)
{
	by->tgid = bpf_get_current_pid_tgid() >> 32;
	bpf_get_current_comm(by->comm, sizeof(by->comm));
}

/* raw_tp flavour: the scheduler's own accounting (CONFIG_SCHED_INFO) adds
 * every wait on a run queue to the thread's sched_info.run_delay, the figure
 * /proc/PID/task/TID/schedstat reports.  When a target thread leaves the CPU
 * its run_delay is complete up to now; what it grew since the thread last
 * left (kept in the thread's task storage) is added to its process's total.
 * That growth is the one wait that ended when the thread last got this CPU,
 * and runq_last holds who left the CPU then: each CPU's slot is the process
 * of the task that last left it, and nothing else switches while the thread
 * runs.  The agent primes the storage with each thread's run_delay when it
 * attaches; a thread without it started later and counts from its start.
 * One program on sched_switch and no wake-up program; every other switch on
 * the machine costs a helper call, one hash and one per-CPU lookup (reading
 * next's tgid there instead cost 90 ns a switch, 138 -> 228). */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} runq_seen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} runq_last SEC(".maps");

SEC("raw_tp/sched_switch")
int BPF_PROG(kpi_raw_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;    /* current is prev */
	struct kpi_target *tg = bpf_map_lookup_elem(&targets, &tgid);
	__u32 zero = 0, *last = bpf_map_lookup_elem(&runq_last, &zero);
	struct runq_by by = {};
	struct task_struct *t;
	__u64 *seen, delay, init;

	if (!last)
		return 0;
	by.tgid = *last;        /* who left this CPU when prev got it */
	*last = tgid;
	if (!tg)
		return 0;
	t = bpf_get_current_task_btf();
	delay = BPF_CORE_READ(t, sched_info.run_delay);
	seen = bpf_task_storage_get(&runq_seen, t, 0, 0);
	if (!seen) {
		/* not primed: started after the attach (all of its waits are
		 * the target's), else missed by the agent (count from now) */
		init = BPF_CORE_READ(t, start_time) > tg->since ? 0 : delay;
		seen = bpf_task_storage_get(&runq_seen, t, &init, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!seen)
			return 0;
	}
	/* the comm stays empty: the agent reads it from /proc (a per-switch
	 * copy of every task's comm would cost every switch on the machine) */
	if (delay > *seen)
		runq_add(tgid, delay - *seen, &by);
	*seen = delay;
	return 0;
}

/* Tracepoint flavour, for kernels without raw_tp or sched_info: marks a
 * target thread when it becomes runnable and takes the time it waited when
 * it is switched in.  Tracepoints see tids, not tgids: target_tids maps them. */
static __always_inline void runq_mark(__u32 tid)
{
	__u64 ts = bpf_ktime_get_ns();

	bpf_map_update_elem(&runq_start, &tid, &ts, BPF_ANY);
}

static __always_inline void runq_take(__u32 tgid, __u32 tid)
{
	__u64 *start = bpf_map_lookup_elem(&runq_start, &tid);
	struct runq_by by;
	__u64 delta;

	if (!start)
		return;
	delta = bpf_ktime_get_ns() - *start;
	bpf_map_delete_elem(&runq_start, &tid);
	runq_by_current(&by);
	runq_add(tgid, delta, &by);
}

static __always_inline __u32 tgid_of_tid(__u32 tid)
{
	__u32 *t = bpf_map_lookup_elem(&target_tids, &tid);
	return t ? *t : 0;
}

SEC("tracepoint/sched/sched_wakeup")
int kpi_tp_wakeup(struct trace_event_raw_sched_wakeup_template *ctx)
{
	if (ctx->pid && tgid_of_tid(ctx->pid))
		runq_mark(ctx->pid);
	return 0;
}

SEC("tracepoint/sched/sched_wakeup_new")
int kpi_tp_wakeup_new(struct trace_event_raw_sched_wakeup_template *ctx)
{
	if (ctx->pid && tgid_of_tid(ctx->pid))
		runq_mark(ctx->pid);
	return 0;
}

SEC("tracepoint/sched/sched_switch")
int kpi_tp_switch(struct trace_event_raw_sched_switch *ctx)
{
	__u32 prev = tgid_of_tid(ctx->prev_pid), next = tgid_of_tid(ctx->next_pid);

	if (prev && ctx->prev_pid && !(ctx->prev_state & TASK_REPORT_STATES))
		runq_mark(ctx->prev_pid);
	if (next)
		runq_take(next, ctx->next_pid);
	return 0;
}

/* ---- processes: a traced executable starts, a target ends --------------- */

/* A process whose comm (the executed file's name, cut to 15 characters) is
 * this is one too, before the agent has seen its file: "kpi-infer" in
 * discovery mode, the --exe file's name (a rebuilt file is a new inode);
 * empty with --pid.  The agent checks the path. */
const volatile char exec_comm[16] = {};
/* The sched tracepoint flavour keeps target_tids; the exec'ing thread goes
 * in at once, later threads at the agent's rescans. */
const volatile bool exec_tids = false;


static __always_inline bool comm_wanted(const char *c)
{
	if (!exec_comm[0])
		return false;
	for (int i = 0; i < 16; i++) {
		if (c[i] != exec_comm[i])
			return false;
		if (!c[i])
			break;
	}
	return true;
}

static __always_inline void exit_send(__u32 tgid, __u64 ts, __u32 execd)
{
	struct kpi_ev_exit *e = EV_NEW(kpi_ev_exit, KPI_EV_EXIT, tgid, ts);

	if (e) {
		e->execd = execd;
		ev_send_now(e);
	}
}

/* At the exec of a traced executable the process goes into `targets` here,
 * before its first instruction: syscalls, tcp and sched programs follow it
 * from then on, and so do the USDT probes when the agent has attached them
 * to the file already (state TRACED).  The agent is woken to do the rest
 * (ports, its own books, the file's probes when they are not there yet). */
SEC("tracepoint/sched/sched_process_exec")
int kpi_proc_exec(void *ctx)
{
	__u64 ts = bpf_ktime_get_ns();
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct task_struct *t = (struct task_struct *)bpf_get_current_task();
	__u64 ino = BPF_CORE_READ(t, mm, exe_file, f_inode, i_ino);
	__u32 *rule = bpf_map_lookup_elem(&exec_inodes, &ino);
	struct kpi_target v = { .since = ts };
	struct kpi_ev_exec *e;
	bool stopped = false;
	char comm[16];
	int added;

	bpf_get_current_comm(comm, sizeof(comm));
	if (rule)
		v.state = *rule;
	else if (comm_wanted(comm))
		v.state = KPI_TARGET_PENDING;
	if (v.state == KPI_TARGET_NONE) {
		/* a target that exec'd something else is no longer one */
		if (bpf_map_delete_elem(&targets, &tgid) == 0)
			exit_send(tgid, ts, 1);
		return 0;
	}
	added = bpf_map_update_elem(&targets, &tgid, &v, BPF_ANY);
	/* only with its entry in place: the agent attaches what targets holds */
	if (v.state == KPI_TARGET_PENDING && !added)
		stopped = hold_current(tgid, ts, false);
	if (exec_tids && !added)
		bpf_map_update_elem(&target_tids, &tgid, &tgid, BPF_ANY);
	/* without the event the agent still finds it at its next /proc scan */
	e = EV_NEW(kpi_ev_exec, KPI_EV_EXEC, tgid, ts);
	if (!e)
		return 0;
	e->ino = ino;
	e->state = v.state;
	e->added = added;
	e->held = stopped;
	__builtin_memcpy(e->comm, comm, sizeof(comm));
	ev_send_now(e);
	return 0;
}

/* A target traced from its HTTP exchange forks a process (nginx's workers,
 * gunicorn's, a pre-forking server's): the child holds the listening socket
 * and may accept at once, before the agent's next rescan (0.5 s) would find
 * it.  It becomes a target here, before it runs, with the parent's flags, and
 * the agent is woken as at a listen() (at_listen: made a target by the kernel
 * side, not by an exec).  Its threads are not new processes; a target traced
 * through its probes forks nothing it serves with. */
SEC("raw_tp/sched_process_fork")
int BPF_PROG(kpi_proc_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = BPF_CORE_READ(parent, tgid), ctgid = BPF_CORE_READ(child, tgid);
	struct kpi_target *p = bpf_map_lookup_elem(&targets, &ptgid);
	struct kpi_target v = { .since = bpf_ktime_get_ns() };
	struct kpi_ev_exec *e;

	if (!p || ctgid == ptgid || !(p->flags & KPI_TARGET_F_HTTP))
		return 0;
	v.state = p->state;
	v.flags = p->flags;
	if (bpf_map_update_elem(&targets, &ctgid, &v, BPF_NOEXIST))
		return 0;       /* full, or there already */
	if (exec_tids)
		bpf_map_update_elem(&target_tids, &ctgid, &ctgid, BPF_ANY);
	e = EV_NEW(kpi_ev_exec, KPI_EV_EXEC, ctgid, v.since);
	if (!e)
		return 0;       /* the rescan finds it */
	e->ino = BPF_CORE_READ(child, mm, exe_file, f_inode, i_ino);
	e->state = v.state;
	e->held = 0;
	e->at_listen = 1;
	bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), child->comm);
	ev_send_now(e);
	return 0;
}

/* A target's last thread exits: it leaves `targets` (nothing of it runs any
 * more) and the agent is woken to drop the rest. */
SEC("tracepoint/sched/sched_process_exit")
int kpi_proc_exit(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct task_struct *t = (struct task_struct *)bpf_get_current_task();

	if (!is_target(tgid))
		return 0;
	if (sys_in_task) {              /* a thread gone inside a syscall */
		struct sys_arg *a = bpf_task_storage_get(&sys_task, bpf_get_current_task_btf(), 0, 0);
		if (a && a->kind) {
			writing_end(a);
			a->kind = 0;
		}
	} else {
		__u64 pt = bpf_get_current_pid_tgid();
		struct sys_arg *a = bpf_map_lookup_elem(&sys_args, &pt);
		if (a) {
			writing_end(a);
			if (!bpf_map_delete_elem(&sys_args, &pt))
				count(KPI_CNT_SYS_ARGS_DEL);
		}
	}
	if (BPF_CORE_READ(t, signal, live.counter) != 0)
		return 0;
	bpf_map_delete_elem(&held, &tgid);      /* killed while held: nothing to continue */
	if (bpf_map_delete_elem(&targets, &tgid) == 0)
		exit_send(tgid, bpf_ktime_get_ns(), 0);
	return 0;
}
