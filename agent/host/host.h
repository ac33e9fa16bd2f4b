/* host.h - what the agent checks about the machine before loading BPF:
 * privileges, tracefs, and which program types this kernel accepts. */
#ifndef KPI_HOST_H
#define KPI_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct host_features {
	bool syscall_tp;    /* syscalls:sys_{enter,exit}_* tracepoints exist */
	bool raw_tp;        /* raw tracepoints load and attach */
	bool tcp_probe_tp;  /* tcp:tcp_probe tracepoint exists */
	bool sched_tp;      /* sched:sched_switch tracepoint exists */
	bool proc_tp;       /* sched:sched_process_{exec,exit} exist: a traced
			     * executable's process is followed from its exec */
	bool uprobe;        /* uprobe PMU exists (USDT needs it) */
	bool task_storage;  /* raw_tp programs may keep state in a task's local
			     * storage */
	bool task_regs;     /* tracepoint programs may read the current task's
			     * saved user registers (bpf_task_pt_regs) */
	bool sched_info;    /* the scheduler keeps each thread's run-queue
			     * delay (CONFIG_SCHED_INFO): with raw_tp and task
			     * storage, sched_switch alone measures it */
	/* host_probe_kernel's, which --version reports: */
	bool btf;           /* /sys/kernel/btf/vmlinux: the programs' CO-RE
			     * relocations need it (CONFIG_DEBUG_INFO_BTF) */
	bool ringbuf;       /* BPF_MAP_TYPE_RINGBUF (Linux 5.8+) */
	bool bpf_refused;   /* the ring buffer's probe could not create a map
			     * (no CAP_BPF: a container that is not
			     * privileged): ringbuf is then unknown */
	bool usdt_sem;      /* uprobes with a reference counter (4.20+): a
			     * USDT probe's semaphore is raised while attached */
};

/* 0 when root or holding CAP_BPF + CAP_PERFMON; else -1 and a message
 * saying exactly what is missing and what to do. */
int host_check_privileges(char *err, size_t len);
/* 0 when the agent runs in the host's (the initial) pid namespace; else -1
 * and a message saying what to change: the BPF programs see host pids, the
 * agent would attach to its namespace's and then record nothing. */
int host_check_pid_ns(char *err, size_t len);
/* Mounts tracefs at /sys/kernel/tracing when missing. *mounted says whether
 * this call mounted it. */
int host_ensure_tracefs(bool *mounted, char *err, size_t len);
/* Every feature; host_probe_kernel's first. */
void host_probe_features(struct host_features *f);
/* BTF, ring buffer, uprobes, USDT semaphores only: no tracefs, no program
 * load (what --version says). KPI_AGENT_DISABLE applies to both. */
void host_probe_kernel(struct host_features *f);
/* 0 when the kernel has what the agent cannot run without (BTF, the ring
 * buffer, uprobes, syscall or raw tracepoints); else -1 and one line saying
 * what is missing and what to do. */
int host_check_kernel(const struct host_features *f, char *err, size_t len);
/* CLOCK_MONOTONIC in ns: the clock of bpf_ktime_get_ns, so of every BPF timestamp. */
uint64_t host_mono_ns(void);

#endif
