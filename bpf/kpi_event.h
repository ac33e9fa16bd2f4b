/* kpi_event.h - the event ABI between bpf/kpi.bpf.c and kpi-agent: fixed-size
 * plain types only, one struct per ring-buffer record, sizes pinned below. */
#ifndef KPI_EVENT_H
#define KPI_EVENT_H

#define KPI_REQID_LEN   64      /* x-request-id bytes kept (NUL included) */
#define KPI_MAX_TARGETS 64
#define KPI_MAX_CONNS   65536   /* tracked (pid, fd) connections */

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
	KPI_EV_RESP_START,      /* USDT response__start */
	KPI_EV_RESP_END,        /* USDT response__end */
	KPI_EV_WRITE,           /* sys_exit of a write/send on a connection with a request */
	KPI_EV_CLOSE,           /* close() of a connection that had a request in progress */
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
 * b max_tokens, c operation (enum kpi_operation, daemon/kpi_reasons.h). */
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
	char reqid[KPI_REQID_LEN]; /* ADMIT / REJECT: x-request-id */
};

_Static_assert(sizeof(struct kpi_event) == 136, "kpi_event ABI changed: update both sides");

#endif
