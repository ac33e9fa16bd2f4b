/* kpi_event.h - the event ABI between bpf/kpi.bpf.c and kpi-agent: fixed-size
 * plain types only, one struct per ring-buffer record, sizes pinned below. */
#ifndef KPI_EVENT_H
#define KPI_EVENT_H

#include "abi/kpi_request_id.h"

#define KPI_MAX_TARGETS 64
#define KPI_MAX_CONNS   65536   /* tracked (pid, fd) connections */
#define KPI_WRITE_BATCH 8       /* write times one WRITE event carries */

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
				 * process's task left the CPU (see struct kpi_runq): a = that
				 * process's tgid, runq_ns = the wait, reqid = the task's comm
				 * (empty from the raw_tp flavour: the agent reads /proc) */
	KPI_EV_TYPE_MAX,
};

/* Where t_arrive came from. */
enum kpi_arrive_src {
	KPI_ARRIVE_TCP = 1,     /* tcp:tcp_probe, first data segment */
	KPI_ARRIVE_READ = 2,    /* sys_exit of the first read() returning bytes */
};

/* Indexes of the BPF `counters` per-CPU array. */
enum kpi_counter {
	KPI_CNT_DROPS = 0,      /* ring buffer full: event lost */
	KPI_CNT_EVENTS,         /* events submitted */
	KPI_CNT_CONN_FULL,      /* conns map full: connection not tracked */
	KPI_CNT_MAX,
};

/* One ring-buffer record.  The header is common; the union member is chosen
 * by type.  a..d are the probe's integer arguments in declaration order (id,
 * fd and the request-id string have their own fields); ADMIT: a prompt_tokens,
 * b max_tokens, c operation (enum kpi_operation, abi/kpi_reasons.h). */
struct kpi_event {
	unsigned int type;      /* enum kpi_event_type */
	unsigned int pid;       /* tgid of the target */
	unsigned long long ts;  /* CLOCK_MONOTONIC ns (bpf_ktime_get_ns) */
	unsigned long long id;  /* daemon request id / step id; 0 when none */
	int fd;                 /* connection fd, -1 when none */
	int a, b, c, d;         /* probe arguments (see agent/assemble.c) */
	unsigned int srtt_us;   /* ARRIVE: smoothed RTT of the connection */
	unsigned long long ts2; /* ARRIVE: sys_exit time of the read */
	unsigned long long runq_ns; /* cumulative run-queue delay of the target */
	long long bytes;        /* WRITE / ARRIVE: bytes moved */
	union {
		char reqid[KPI_REQID_LEN]; /* ADMIT / REJECT: x-request-id */
		/* WRITE: the sys_enter times of `a` (1..KPI_WRITE_BATCH) writes in
		 * order; ts is the last of them.  One event per token write cost a
		 * ring-buffer record and an agent wake-up share per token; the
		 * kernel keeps them in the connection until the batch is full,
		 * the response ends or the connection closes. */
		unsigned long long writes[KPI_WRITE_BATCH];
	};
};

/* Value of the BPF `conns` map, keyed (tgid << 32 | fd).  The agent reads it
 * when a target exits, to take the write times no response__end will send. */
struct kpi_conn {
	unsigned long long sk;  /* struct sock *, 0 when the fd is not a socket */
	unsigned char busy;     /* a request is in progress on this connection */
	unsigned char is_sock;
	unsigned char n_writes; /* write times waiting in writes[] */
	unsigned char pad[5];
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
_Static_assert(sizeof(struct kpi_event) == 136, "kpi_event ABI changed: update both sides");
_Static_assert(sizeof(struct kpi_runq) == 24, "kpi_runq ABI changed: update both sides");

/* The WRITE event for the n (1..KPI_WRITE_BATCH) write times c holds, timed at
 * the last of them.  The kernel sends it when the batch fills, the response
 * ends or the connection closes; the agent builds the same one from the map
 * for a target that exits first.  Other fields are the caller's (zeroed). */
static inline __attribute__((always_inline)) void
kpi_write_event_fill(struct kpi_event *e, unsigned int pid, int fd, const struct kpi_conn *c,
		     unsigned int n)
{
	e->type = KPI_EV_WRITE;
	e->pid = pid;
	e->ts = c->writes[(n - 1) & (KPI_WRITE_BATCH - 1)];
	e->fd = fd;
	e->a = (int)n;
	e->bytes = c->bytes;
	__builtin_memcpy(e->writes, c->writes, sizeof(c->writes));
}

#endif
