/* kpi_event.h - the event ABI between bpf/kpi.bpf.c and kpi-agent: fixed-size
 * plain types only, a common header and one struct per record type, sizes
 * pinned below.  Contracts with the daemon (reasons, id length) are abi/'s. */
#ifndef KPI_EVENT_H
#define KPI_EVENT_H

#include "abi/kpi_request_id.h"

#define KPI_MAX_TARGETS 64
#define KPI_MAX_CONNS   65536   /* tracked (pid, fd) connections */
#define KPI_WRITE_BATCH 8       /* write times one WRITE event carries */
#define KPI_PAYLOAD_MAX 4096    /* bytes of one read/write piece a PAYLOAD record carries */
#define KPI_PAYLOAD_IOVS 32     /* iovecs of a readv/writev/sendmsg/recvmsg followed */
#define KPI_PD_ADDR_LEN 64      /* "host:port" bytes of a worker's address kept (NUL included) */

enum kpi_event_type {
	KPI_EV_ARRIVE = 1,      /* first bytes of a request read on a connection */
	KPI_EV_ADMIT,           /* USDT request__admitted */
	KPI_EV_REJECT,          /* USDT request__rejected */
	KPI_EV_SCHED,           /* USDT request__scheduled */
	KPI_EV_STEP_BEGIN,      /* USDT step__begin */
	KPI_EV_STEP_END,        /* USDT step__end */
	KPI_EV_FIRST,           /* USDT request__first_token */
	KPI_EV_PREEMPT,         /* USDT request__preempted */
	KPI_EV_FINISH,          /* USDT request__finished */
	KPI_EV_CANCEL,          /* USDT request__cancelled */
	KPI_EV_RESP_START,      /* no longer sent: nothing used the time of USDT
				 * response__start, and its uprobe trap cost a
				 * microsecond a request; the number stays taken */
	KPI_EV_RESP_END,        /* USDT response__end */
	KPI_EV_WRITE,           /* sys_enter times of writes/sends on a connection with a
				 * request, batched in the kernel (see writes[]) */
	KPI_EV_CLOSE,           /* close() of a connection that had a request in progress */
	KPI_EV_RUNQ_BY,         /* a target thread's run-queue wait that ended when another
				 * process's task left the CPU (see struct kpi_runq) */
	KPI_EV_EXEC,            /* a process began running a traced executable */
	KPI_EV_EXIT,            /* a target's last thread exited, or it exec'd another program */
	KPI_EV_PAYLOAD,         /* HTTP-mode target: a prefix of one socket read/write piece */
	KPI_EV_HTTP_CLOSE,      /* HTTP-mode target: a socket connection ended */
	KPI_EV_TLS_PAYLOAD,     /* HTTP-mode target: the plaintext of one SSL_read/SSL_write
				 * (bpf/kpi_tls.bpf.c), laid out as PAYLOAD */
	KPI_EV_SOCK,            /* a target's TCP connection seen first: its role and addresses */
	/* disaggregated prefill and decode (docs/disaggregation.md) */
	KPI_EV_ROUTE,           /* USDT route__decision: a router chose a request's workers */
	KPI_EV_KV_SEND_START,   /* USDT kv__send_start: a prefill worker's KV stream begins */
	KPI_EV_KV_SEND_END,     /* USDT kv__send_end */
	KPI_EV_KV_RECV_START,   /* USDT kv__recv_start: a decode worker's KV stream header arrived */
	KPI_EV_KV_RECV_END,     /* USDT kv__recv_end: the KV is in and checked, or it failed */
	KPI_EV_SLOT_WAIT,       /* USDT kv__slot_wait: a request with its KV waits for a slot */
	KPI_EV_PREFIX_HIT,      /* USDT request__prefix_hit */
	KPI_EV_HTTP_SENT,       /* HTTP-mode target: what TCP held back after a write went out */
	KPI_EV_TYPE_MAX,
};

/* Where t_arrive came from. */
enum kpi_arrive_src {
	KPI_ARRIVE_TCP = 1,     /* tcp:tcp_probe, first data segment */
	KPI_ARRIVE_READ = 2,    /* sys_exit of the first read() returning bytes */
};

/* ARRIVE flags. */
#define KPI_ARRIVE_BEFORE_ATTACH 1u   /* the target was followed but its USDT probes
				       * were not attached yet (KPI_TARGET_PENDING) */

/* Value of the BPF `targets` map, keyed by tgid: a process the programs
 * follow.  The agent writes it when it finds one in /proc; the exec program
 * writes it at the exec of a traced executable, before its first instruction. */
enum kpi_target_state {
	KPI_TARGET_NONE = 0,    /* exec_inodes only: a file never traced (no probes) */
	KPI_TARGET_PENDING,     /* syscalls, tcp and sched followed; USDT not attached yet */
	KPI_TARGET_TRACED,      /* USDT attached too (to the process, or to its file) */
};

/* kpi_target.flags */
#define KPI_TARGET_F_HTTP 1u    /* no USDT: follow its HTTP exchanges from socket payloads
				 * (PAYLOAD, HTTP_CLOSE) instead of ARRIVE/WRITE/CLOSE */

/* Value of the BPF `held` map, keyed by tgid: a process an agent's program
 * stopped (SIGSTOP) at its exec or at its listen() on a --port port, until
 * that agent continues it.  The map is pinned at KPI_HELD_PIN and shared by
 * every agent on the host, so that a hold outlives no agent: one that starts,
 * or `kpi-agent --release-held`, continues the holds of an agent that is gone.
 * Start times are the kernel's start_boottime (ns), the clock of /proc/PID/stat's
 * starttime (in clock ticks): a pid reused by another process is not that one. */
struct kpi_held {
	unsigned long long start_ns;    /* the held process's start_boottime */
	unsigned long long since;       /* CLOCK_MONOTONIC ns it was stopped */
	unsigned long long holder_start;  /* its agent's starttime, clock ticks (/proc) */
	unsigned int holder;            /* its agent's tgid */
	unsigned int at_listen;         /* 1: stopped at listen(), 0: at its exec */
};
#define KPI_HELD_MAX 1024
#define KPI_HELD_DIR "/sys/fs/bpf/kpiscope"
#define KPI_HELD_PIN KPI_HELD_DIR "/held_v1"   /* _vN: a new layout is a new file */

struct kpi_target {
	unsigned long long since;       /* CLOCK_MONOTONIC ns it was added (its exec, or
					 * the agent's attach): threads that start later
					 * are wholly the target's */
	unsigned int state;             /* enum kpi_target_state */
	unsigned int flags;             /* KPI_TARGET_F_* */
};


/* Indexes of the BPF `counters` per-CPU array. */
enum kpi_counter {
	KPI_CNT_DROPS = 0,      /* ring buffer full: event lost */
	KPI_CNT_EVENTS,         /* events submitted */
	KPI_CNT_CONN_FULL,      /* conns map full: connection not tracked */
	/* Entries put into and taken out of the LRU tables: what the kernel
	 * evicted is inserted - deleted - still there (the agent counts those). */
	KPI_CNT_SOCKS_INS,
	KPI_CNT_SOCKS_DEL,
	KPI_CNT_SYS_ARGS_INS,
	KPI_CNT_SYS_ARGS_DEL,
	KPI_CNT_TLS_CALLS_INS,  /* tls_calls: an SSL call entered, and returned */
	KPI_CNT_TLS_CALLS_DEL,
	KPI_CNT_GO_TLS_CLOSED,  /* a Go TLS call whose socket closed before it returned: not read */
	KPI_CNT_MAX,
};

/* Common header of every ring-buffer record: the type says which struct
 * below follows it; each is sent at its own size (kpi_event_size). */
struct kpi_ev_hdr {
	unsigned int type;      /* enum kpi_event_type */
	unsigned int pid;       /* tgid of the target */
	unsigned long long ts;  /* CLOCK_MONOTONIC ns (bpf_ktime_get_ns) */
};

/* ARRIVE: the first bytes of a request read on a connection; ts is the
 * arrival (the first data segment, or the read itself: src). */
struct kpi_ev_arrive {
	struct kpi_ev_hdr h;
	int fd;
	unsigned int src;               /* enum kpi_arrive_src */
	unsigned long long t_read;      /* sys_exit time of the read */
	long long bytes;                /* bytes that read returned */
	unsigned long long runq_ns;     /* the target's cumulative run-queue delay */
	unsigned int srtt_us;           /* smoothed RTT of the connection */
	unsigned int flags;             /* KPI_ARRIVE_BEFORE_ATTACH */
};

/* ADMIT: USDT request__admitted(id, fd, prompt_tokens, max_tokens, request_id, operation). */
struct kpi_ev_admit {
	struct kpi_ev_hdr h;
	unsigned long long id;          /* the daemon's request id */
	int fd;
	int prompt_tokens;
	int max_tokens;
	int operation;                  /* enum kpi_operation (abi/kpi_reasons.h) */
	char reqid[KPI_REQID_LEN];      /* x-request-id */
};

/* REJECT: USDT request__rejected(fd, status, reason, request_id). */
struct kpi_ev_reject {
	struct kpi_ev_hdr h;
	int fd;
	int http_status;
	int reason;                     /* enum kpi_reject_reason (abi/kpi_reasons.h) */
	int _pad;
	char reqid[KPI_REQID_LEN];
};

/* SCHED, FIRST, PREEMPT, CANCEL: USDT probes whose one argument is the request id. */
struct kpi_ev_req {
	struct kpi_ev_hdr h;
	unsigned long long id;
};

/* FINISH: USDT request__finished(id, output_tokens, finish_reason). */
struct kpi_ev_finish {
	struct kpi_ev_hdr h;
	unsigned long long id;
	int output_tokens;
	int finish_reason;              /* enum kpi_finish_reason (abi/kpi_reasons.h) */
};

/* STEP_BEGIN: USDT step__begin(step, prefill_tokens, decode_seqs, kv_used, kv_free). */
struct kpi_ev_step_begin {
	struct kpi_ev_hdr h;
	unsigned long long step;
	int prefill_tokens;
	int decode_seqs;
	int kv_used;                    /* KV blocks */
	int kv_free;
};

/* STEP_END: USDT step__end(step). */
struct kpi_ev_step_end {
	struct kpi_ev_hdr h;
	unsigned long long step;
};

/* RESP_END: USDT response__end(id, fd, http_status). */
struct kpi_ev_resp_end {
	struct kpi_ev_hdr h;
	unsigned long long id;          /* 0: a response with no engine request */
	int fd;
	int http_status;
	unsigned long long runq_ns;     /* the target's cumulative run-queue delay */
};

/* WRITE: the sys_enter times of n (1..KPI_WRITE_BATCH) writes on a connection
 * with a request, in order; h.ts is the last of them.  One event per token
 * write cost a ring-buffer record and an agent wake-up share per token; the
 * kernel keeps them in the connection until the batch is full, the response
 * ends or the connection closes. */
struct kpi_ev_write {
	struct kpi_ev_hdr h;
	int fd;
	unsigned int n;
	long long bytes;                /* bytes those writes moved */
	unsigned long long writes[KPI_WRITE_BATCH];
};

/* CLOSE: close() of a connection that had a request in progress. */
struct kpi_ev_close {
	struct kpi_ev_hdr h;
	int fd;
	int _pad;
};

/* RUNQ_BY: one run-queue wait of a target thread that ended when another
 * process's task left the CPU (see struct kpi_runq). */
struct kpi_ev_runq_by {
	struct kpi_ev_hdr h;
	unsigned int by_tgid;           /* the other process */
	unsigned int _pad;
	unsigned long long wait_ns;
	char comm[16];                  /* its task's comm; empty from the raw_tp
					 * flavour (the agent reads /proc) */
};

/* EXEC: a process began running a traced executable (sched_process_exec);
 * h.ts is the exec.  The exec program added it to `targets` already. */
struct kpi_ev_exec {
	struct kpi_ev_hdr h;
	unsigned long long ino;         /* the executable's inode number */
	unsigned int state;             /* enum kpi_target_state it was given */
	int added;                      /* 0, or the error adding it to targets gave */
	char comm[16];
	unsigned int held;              /* 1: stopped until the agent continues it */
	unsigned int at_listen;         /* 1: not an exec: a listen() on a --port port made it one */
};

/* EXIT: a target's last thread exited (sched_process_exit), or the target
 * exec'd a program that is not traced; `targets` no longer holds it. */
struct kpi_ev_exit {
	struct kpi_ev_hdr h;
	unsigned int execd;             /* 1: it exec'd another program, 0: it exited */
	unsigned int _pad;
};

/* PAYLOAD direction. */
enum kpi_payload_dir {
	KPI_PAYLOAD_IN = 0,     /* the target read these bytes */
	KPI_PAYLOAD_OUT = 1,    /* the target wrote them */
};

/* What a target is on a connection (PAYLOAD, SOCK). */
enum kpi_conn_role {
	KPI_ROLE_SERVED = 0,    /* accepted on one of the targets' listening ports */
	KPI_ROLE_CLIENT = 1,    /* HTTP mode: one it connect()ed (a proxy's upstream, a
				 * gateway's calls): its writes are requests */
};

/* PAYLOAD: one piece (a buffer, or consecutive iovecs) of a socket read or
 * write of an HTTP-mode target that moved bytes.  h.ts: a read's sys_exit, a write's
 * sys_enter.  Sent at offsetof(data) + captured bytes: kpi_event_size gives
 * the fixed part, the agent checks captured against the record's size. */
struct kpi_ev_payload {
	struct kpi_ev_hdr h;
	int fd;
	unsigned int dir;               /* enum kpi_payload_dir */
	unsigned int moved;             /* bytes of this piece that went through the socket */
	unsigned int captured;          /* of them, the first ones in data (<= KPI_PAYLOAD_MAX) */
	unsigned long long t_seg;       /* reads: the first data segment not consumed before
					 * this read (tcp_probe); on a client connection (a
					 * call's answer) the latest one; 0 unknown */
	unsigned int srtt_us;           /* reads: the connection's smoothed RTT, 0 unknown */
	unsigned int tid;               /* the thread that read or wrote */
	unsigned int role;              /* enum kpi_conn_role */
	unsigned int flags;             /* KPI_PAYLOAD_F_* */
	unsigned char data[KPI_PAYLOAD_MAX];
};
#define KPI_EV_PAYLOAD_HEAD 56  /* offsetof(struct kpi_ev_payload, data) */
/* A served socket's write after which TCP still held bytes back (write_seq past
 * snd_nxt: a client that reads late does not ACK, the congestion window is full):
 * they are on the wire at the HTTP_SENT for its fd that follows. */
#define KPI_PAYLOAD_F_UNSENT 1u
/* A TLS_PAYLOAD write that made no syscall inside its SSL_write (a memory BIO:
 * Node's): its record goes out with the socket's next write outside an SSL
 * call, the ciphertext PAYLOAD of its fd that follows, and is timed there. */
#define KPI_PAYLOAD_F_LATER 2u

/* TLS_PAYLOAD is a struct kpi_ev_payload too: the plaintext an SSL_read
 * returned or an SSL_write took, in the record of the socket whose read or
 * write syscall the same thread made inside the call (docs/agent.md, TLS).
 * h.ts: that syscall's time, as for PAYLOAD (the last read that returned
 * bytes; the entry of the first write); t_seg and srtt_us as for PAYLOAD.
 * fd is the socket's, or KPI_TLS_FD_UNKNOWN when the call made no syscall
 * and its SSL object was never seen to make one. */
#define KPI_TLS_FD_UNKNOWN (-1)

/* Value of the BPF `tls_calls` map (kpi.bpf.c, shared with kpi_tls.bpf.c),
 * keyed by pid_tgid: the SSL_read/SSL_write a thread is in.  The uprobe at
 * its entry writes it, the syscall handlers note the socket and the times
 * of the reads/writes made inside it, the return probe sends the record. */
struct kpi_tls_call {
	unsigned long long ssl;         /* the SSL * */
	unsigned long long buf;         /* its plaintext buffer */
	unsigned long long out_len;     /* _ex calls: the size_t * of bytes moved, else 0 */
	unsigned long long t_enter;     /* uprobe entry */
	unsigned long long t_io;        /* reads: exit of the last one that returned bytes;
					 * writes: entry of the first one; 0 none */
	unsigned long long t_seg;       /* reads: the earliest unread segment (tcp_probe), 0 none */
	int fd;                         /* socket of the syscalls inside, -1 none yet,
					 * -2 a socket the target did not accept (its upstream) */
	unsigned int dir;               /* enum kpi_payload_dir */
	unsigned int srtt_us;
	unsigned int task_start;        /* the thread's start_time (low 32 bits of its ns): an
					 * entry left by a thread that died inside its call is
					 * not taken for the call of a new thread given its id */
};

/* Value of the BPF `tls_last_read` map (kpi.bpf.c, shared with kpi_tls.bpf.c),
 * keyed by pid_tgid: the last read of a served socket the thread made outside
 * an SSL call.  An SSL library that reads through a memory BIO (Node's
 * OpenSSL, inside its executable) makes no syscall inside SSL_read: the
 * ciphertext came from this read, on this thread, just before the call. */
struct kpi_tls_read {
	unsigned long long ts;          /* the read's exit */
	unsigned long long t_seg;       /* its first unread segment (tcp_probe), 0 none */
	int fd;
	unsigned int srtt_us;
};

/* HTTP_SENT: the bytes TCP held back after a write (KPI_PAYLOAD_F_UNSENT) of
 * the socket fd went out; ts: the ACK that let them go (tcp_probe), or the
 * entry of the write that found them gone with no ACK since. */
struct kpi_ev_http_sent {
	struct kpi_ev_hdr h;
	int fd;
	unsigned int _pad;
};

/* HTTP_CLOSE: an HTTP-mode target's socket connection ended. */
enum kpi_closer {
	KPI_CLOSE_BY_SERVER = 0,        /* the target closed the fd */
	KPI_CLOSE_BY_CLIENT = 1,        /* a read returned 0, or a write EPIPE / ECONNRESET */
	KPI_CLOSE_AFTER_PEER = 2,       /* the target closed the fd after the peer's FIN or RST */
	KPI_CLOSE_SHUT_WR = 3,          /* the target shut its side down (shutdown SHUT_WR or
					 * SHUT_RDWR): its FIN went out, the fd stays open */
};
struct kpi_ev_http_close {
	struct kpi_ev_hdr h;
	int fd;
	unsigned int by;                /* enum kpi_closer */
};

/* SOCK: a target's TCP connection (AF_INET or AF_INET6) that the programs
 * began to follow (its first read, or in HTTP mode its first read or write):
 * sent once per (pid, fd) until it closes, so that the agent can tie the two
 * ends of one loopback connection together (schema/008_hops.sql). */
struct kpi_ev_sock {
	struct kpi_ev_hdr h;
	int fd;
	unsigned int role;              /* enum kpi_conn_role */
	unsigned short family;          /* AF_INET (2) or AF_INET6 (10) */
	unsigned short lport;           /* local port, host order */
	unsigned short rport;           /* peer port, host order */
	unsigned short _pad;
	unsigned char laddr[16];        /* AF_INET: the first 4 bytes, network order */
	unsigned char raddr[16];
};

/* ROUTE: USDT route__decision(id, fd, request_id, policy, decode, prefill) of
 * kpi-infer --role router: the request read on fd goes to decode, which gets
 * its KV from prefill.  The router's admission of the request. */
struct kpi_ev_route {
	struct kpi_ev_hdr h;
	unsigned long long id;          /* the router's request id */
	int fd;                         /* the client's connection */
	int policy;                     /* enum kpi_route_policy (abi/kpi_reasons.h) */
	char reqid[KPI_REQID_LEN];      /* x-request-id, passed on to both workers */
	char decode[KPI_PD_ADDR_LEN];   /* "host:port" */
	char prefill[KPI_PD_ADDR_LEN];  /* "" when none is named (the decode worker prefills) */
};

/* KV_SEND_START, KV_RECV_START: USDT kv__send_start / kv__recv_start(id,
 * request_id, fd, bytes, blocks, peer): a request's KV stream begins on the
 * prefill worker, or its header reached the decode worker. */
struct kpi_ev_kv_start {
	struct kpi_ev_hdr h;
	unsigned long long id;          /* the worker's own request id */
	unsigned long long bytes;       /* KV bytes the stream carries (its payload) */
	int fd;                         /* prefill: the decode worker's connection; decode:
					 * its connection to the prefill worker */
	int blocks;                     /* the worker's KV blocks for the prompt */
	char peer[KPI_PD_ADDR_LEN];     /* the other worker, "host:port" */
};

/* KV_SEND_END, KV_RECV_END: USDT kv__send_end(id, fd, bytes, status) /
 * kv__recv_end(id, fd, bytes, blocks, status). */
struct kpi_ev_kv_end {
	struct kpi_ev_hdr h;
	unsigned long long id;
	unsigned long long bytes;       /* KV bytes sent, or received */
	int fd;
	int blocks;                     /* recv_end only; -1 for send_end */
	int status;                     /* enum kpi_kv_status (abi/kpi_kv_wire.h), 0 ok */
	int _pad;
};

/* SLOT_WAIT: USDT kv__slot_wait(id, waiting_ahead, blocks_needed, blocks_free,
 * running, max_running): a decode worker's request, its KV in hand, joins
 * the queue for a running slot; the wait ends at its request__scheduled. */
struct kpi_ev_slot_wait {
	struct kpi_ev_hdr h;
	unsigned long long id;
	int waiting_ahead;
	int blocks_needed;
	int blocks_free;
	int running;
	int max_running;                /* --max-seqs */
	int _pad;
};

/* PREFIX_HIT: USDT request__prefix_hit(id, cached_tokens). */
struct kpi_ev_prefix_hit {
	struct kpi_ev_hdr h;
	unsigned long long id;
	int cached_tokens;
	int _pad;
};

/* Any record, for code that holds one whatever its type (the agent's tests,
 * the WRITE it rebuilds from the map); the ring carries each at its own size. */
union kpi_event {
	struct kpi_ev_hdr h;
	struct kpi_ev_arrive arrive;
	struct kpi_ev_admit admit;
	struct kpi_ev_reject reject;
	struct kpi_ev_req req;
	struct kpi_ev_finish finish;
	struct kpi_ev_step_begin step_begin;
	struct kpi_ev_step_end step_end;
	struct kpi_ev_resp_end resp_end;
	struct kpi_ev_write write;
	struct kpi_ev_close close;
	struct kpi_ev_runq_by runq_by;
	struct kpi_ev_exec exec;
	struct kpi_ev_exit exit;
	struct kpi_ev_payload payload;
	struct kpi_ev_http_close http_close;
	struct kpi_ev_http_sent http_sent;
	struct kpi_ev_sock sock;
	struct kpi_ev_route route;
	struct kpi_ev_kv_start kv_start;
	struct kpi_ev_kv_end kv_end;
	struct kpi_ev_slot_wait slot_wait;
	struct kpi_ev_prefix_hit prefix_hit;
};

/* The size a record of this type has in the ring; 0 for a type not sent. */
static inline __attribute__((always_inline)) unsigned int kpi_event_size(unsigned int type)
{
	switch (type) {
	case KPI_EV_ARRIVE: return sizeof(struct kpi_ev_arrive);
	case KPI_EV_ADMIT: return sizeof(struct kpi_ev_admit);
	case KPI_EV_REJECT: return sizeof(struct kpi_ev_reject);
	case KPI_EV_SCHED:
	case KPI_EV_FIRST:
	case KPI_EV_PREEMPT:
	case KPI_EV_CANCEL: return sizeof(struct kpi_ev_req);
	case KPI_EV_FINISH: return sizeof(struct kpi_ev_finish);
	case KPI_EV_STEP_BEGIN: return sizeof(struct kpi_ev_step_begin);
	case KPI_EV_STEP_END: return sizeof(struct kpi_ev_step_end);
	case KPI_EV_RESP_END: return sizeof(struct kpi_ev_resp_end);
	case KPI_EV_WRITE: return sizeof(struct kpi_ev_write);
	case KPI_EV_CLOSE: return sizeof(struct kpi_ev_close);
	case KPI_EV_RUNQ_BY: return sizeof(struct kpi_ev_runq_by);
	case KPI_EV_EXEC: return sizeof(struct kpi_ev_exec);
	case KPI_EV_EXIT: return sizeof(struct kpi_ev_exit);
	case KPI_EV_PAYLOAD: return KPI_EV_PAYLOAD_HEAD;        /* + captured */
	case KPI_EV_HTTP_CLOSE: return sizeof(struct kpi_ev_http_close);
	case KPI_EV_HTTP_SENT: return sizeof(struct kpi_ev_http_sent);
	case KPI_EV_TLS_PAYLOAD: return KPI_EV_PAYLOAD_HEAD;    /* + captured */
	case KPI_EV_SOCK: return sizeof(struct kpi_ev_sock);
	case KPI_EV_ROUTE: return sizeof(struct kpi_ev_route);
	case KPI_EV_KV_SEND_START:
	case KPI_EV_KV_RECV_START: return sizeof(struct kpi_ev_kv_start);
	case KPI_EV_KV_SEND_END:
	case KPI_EV_KV_RECV_END: return sizeof(struct kpi_ev_kv_end);
	case KPI_EV_SLOT_WAIT: return sizeof(struct kpi_ev_slot_wait);
	case KPI_EV_PREFIX_HIT: return sizeof(struct kpi_ev_prefix_hit);
	default: return 0;
	}
}

/* Value of the BPF `conns` map, keyed (tgid << 32 | fd).  The agent reads it
 * when a target exits, to take the write times no response__end will send. */
struct kpi_conn {
	unsigned long long sk;  /* struct sock *, 0 when the fd is not a socket */
	unsigned char busy;     /* a request is in progress on this connection */
	unsigned char is_sock;
	unsigned char n_writes; /* write times waiting in writes[] */
	unsigned char role;     /* enum kpi_conn_role */
	unsigned char http;     /* KPI_ROLE_CLIENT: its first bytes looked like HTTP/1.1 */
	unsigned char pad[3];
	long long bytes;        /* bytes those writes moved */
	unsigned long long writes[KPI_WRITE_BATCH]; /* sys_enter times not yet sent */
};

/* Value of the BPF `runq_total` map, keyed by tgid: run-queue delay of the
 * target's threads, ns, since the attach.  Of it, self: the waits that ended
 * when another thread of the same process left the CPU; idle: those that
 * ended when the idle task did (a wake-up onto an idle CPU, or a thread
 * pulled to one).  Those two are only summed; each of the rest is a RUNQ_BY
 * event. */
struct kpi_runq {
	unsigned long long total;
	unsigned long long self;
	unsigned long long idle;
};

_Static_assert(sizeof(struct kpi_conn) == 88, "kpi_conn ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_ev_hdr) == 16, "kpi_ev_hdr ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_ev_arrive) == 56, "kpi_ev_arrive ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_ev_admit) == 40 + KPI_REQID_LEN, "kpi_ev_admit ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_ev_reject) == 32 + KPI_REQID_LEN, "kpi_ev_reject ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_ev_req) == 24, "kpi_ev_req ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_ev_finish) == 32, "kpi_ev_finish ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_ev_step_begin) == 40, "kpi_ev_step_begin ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_ev_step_end) == 24, "kpi_ev_step_end ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_ev_resp_end) == 40, "kpi_ev_resp_end ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_ev_write) == 32 + 8 * KPI_WRITE_BATCH, "kpi_ev_write ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_ev_close) == 24, "kpi_ev_close ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_ev_runq_by) == 48, "kpi_ev_runq_by ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_ev_exec) == 56, "kpi_ev_exec ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_ev_exit) == 24, "kpi_ev_exit ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_ev_payload) == KPI_EV_PAYLOAD_HEAD + KPI_PAYLOAD_MAX, "kpi_ev_payload ABI changed: update both sides");
_Static_assert(__builtin_offsetof(struct kpi_ev_payload, data) == KPI_EV_PAYLOAD_HEAD, "kpi_ev_payload ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_ev_http_close) == 24, "kpi_ev_http_close ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_ev_http_sent) == 24, "kpi_ev_http_sent ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_tls_call) == 64, "kpi_tls_call ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_tls_read) == 24, "kpi_tls_read ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_ev_sock) == 64, "kpi_ev_sock ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_ev_route) == 32 + KPI_REQID_LEN + 2 * KPI_PD_ADDR_LEN, "kpi_ev_route ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_ev_kv_start) == 40 + KPI_PD_ADDR_LEN, "kpi_ev_kv_start ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_ev_kv_end) == 48, "kpi_ev_kv_end ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_ev_slot_wait) == 48, "kpi_ev_slot_wait ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_ev_prefix_hit) == 32, "kpi_ev_prefix_hit ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_runq) == 24, "kpi_runq ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_target) == 16, "kpi_target ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_held) == 32, "kpi_held ABI changed: update both sides (and KPI_HELD_PIN's version)");

/* The WRITE event for the n (1..KPI_WRITE_BATCH) write times c holds, timed at
 * the last of them.  The kernel sends it when the batch fills, the response
 * ends or the connection closes; the agent builds the same one from the map
 * for a target that exits first. */
static inline __attribute__((always_inline)) void
kpi_write_event_fill(struct kpi_ev_write *e, unsigned int pid, int fd, const struct kpi_conn *c,
		     unsigned int n)
{
	e->h.type = KPI_EV_WRITE;
	e->h.pid = pid;
	e->h.ts = c->writes[(n - 1) & (KPI_WRITE_BATCH - 1)];
	e->fd = fd;
	e->n = n;
	e->bytes = c->bytes;
	__builtin_memcpy(e->writes, c->writes, sizeof(c->writes));
}

#endif
