/* host.c - privilege check, tracefs mount and kernel feature probes; the
 * agent picks its program flavours (tracepoint / raw_tp) from the result. */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <linux/bpf.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>
#include "host.h"

#define TRACEFS "/sys/kernel/tracing"
#define TRACEFS_MAGIC 0x74726163
#define CAP_PERFMON_BIT 38
#define CAP_BPF_BIT 39

static unsigned long long cap_eff(void)
{
	char line[256];
	unsigned long long v = 0;
	FILE *fp = fopen("/proc/self/status", "r");

	if (!fp)
		return 0;
	while (fgets(line, sizeof(line), fp))
		if (sscanf(line, "CapEff: %llx", &v) == 1)
			break;
	fclose(fp);
	return v;
}

/* The initial pid namespace's inode (PROC_PID_INIT_INO, include/linux/proc_ns.h). */
#define PID_NS_INIT_INO 0xEFFFFFFCU

int host_check_pid_ns(char *err, size_t len)
{
	char line[256];
	int levels = 0, host_pid = 0, own_pid = 0;
	struct stat st;
	FILE *f = fopen("/proc/self/status", "re");

	/* NSpid: the pid in each pid namespace from the procfs's down to ours */
	while (f && fgets(line, sizeof(line), f)) {
		char *p = line + 6;
		if (strncmp(line, "NSpid:", 6))
			continue;
		for (char *end; (void)(end = NULL), strtol(p, &end, 10), end != p; p = end) {
			int v = (int)strtol(p, NULL, 10);
			if (!levels++)
				host_pid = v;
			own_pid = v;
		}
		break;
	}
	if (f)
		fclose(f);
	if (levels > 1) {
		snprintf(err, len, "this agent runs in a pid namespace of its own (its pid %d is %d outside it): "
			 "the kernel's events carry the host's pids and it would trace nothing: run it in the "
			 "host's pid namespace (e.g. podman run --pid=host / hostPID: true, or without "
			 "unshare --pid)", own_pid, host_pid);
		return -1;
	}
	/* a procfs of its own namespace shows one level: the namespace's inode says */
	if (!stat("/proc/self/ns/pid", &st) && st.st_ino != PID_NS_INIT_INO) {
		snprintf(err, len, "this agent runs in a pid namespace of its own (pid:[%lu], not the host's "
			 "pid:[%u]): the kernel's events carry the host's pids and it would trace nothing: run "
			 "it in the host's pid namespace (e.g. podman run --pid=host / hostPID: true, or "
			 "without unshare --pid)", (unsigned long)st.st_ino, PID_NS_INIT_INO);
		return -1;
	}
	return 0;
}

int host_check_privileges(char *err, size_t len)
{
	unsigned long long caps;
	bool bpf, perfmon;

	if (geteuid() == 0)
		return 0;
	caps = cap_eff();
	bpf = caps >> CAP_BPF_BIT & 1;
	perfmon = caps >> CAP_PERFMON_BIT & 1;
	if (bpf && perfmon)
		return 0;
	snprintf(err, len, "kpi-agent needs root, or the capabilities CAP_BPF and CAP_PERFMON; "
		 "missing: %s%s%s. Run it as root (sudo kpi-agent ...) or grant them: "
		 "sudo setcap cap_bpf,cap_perfmon+ep build/kpi-agent",
		 bpf ? "" : "CAP_BPF", !bpf && !perfmon ? ", " : "", perfmon ? "" : "CAP_PERFMON");
	return -1;
}

int host_ensure_tracefs(bool *mounted, char *err, size_t len)
{
	struct statfs fs;

	*mounted = false;
	if (statfs(TRACEFS, &fs) == 0 && fs.f_type == TRACEFS_MAGIC)
		return 0;
	if (mount("tracefs", TRACEFS, "tracefs", 0, NULL) == 0) {
		*mounted = true;
		return 0;
	}
	snprintf(err, len, "tracefs is not mounted at %s and mounting it failed (%s): run as root "
		 "or mount it with: mount -t tracefs tracefs %s", TRACEFS, strerror(errno), TRACEFS);
	return -1;
}

static bool exists(const char *path)
{
	return access(path, F_OK) == 0;
}

/* Loads a two-instruction raw_tp program and attaches it to sched_switch:
 * some kernels and sandboxes refuse raw tracepoints while tracepoints work. */
static bool probe_raw_tp(void)
{
	struct bpf_insn insns[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	int prog, link;

	prog = bpf_prog_load(BPF_PROG_TYPE_RAW_TRACEPOINT, "kpi_probe", "GPL", insns, 2, NULL);
	if (prog < 0)
		return false;
	link = bpf_raw_tracepoint_open("sched_switch", prog);
	close(prog);
	if (link < 0)
		return false;
	close(link);
	return true;
}

/* Whether programs of type t may call both helpers. */
static bool helpers(enum bpf_prog_type t, enum bpf_func_id a, enum bpf_func_id b)
{
	return libbpf_probe_bpf_helper(t, a, NULL) > 0 && libbpf_probe_bpf_helper(t, b, NULL) > 0;
}

/* KPI_AGENT_DISABLE=raw_tp,sched_info,...: behave as on a kernel without
 * them, so the fallback flavours can be tested on a kernel that has all. */
static void disable_named(struct host_features *f, const char *list)
{
	static const struct { const char *name; size_t off; } names[] = {
		{ "syscall_tp", offsetof(struct host_features, syscall_tp) },
		{ "raw_tp", offsetof(struct host_features, raw_tp) },
		{ "tcp_probe_tp", offsetof(struct host_features, tcp_probe_tp) },
		{ "sched_tp", offsetof(struct host_features, sched_tp) },
		{ "task_storage", offsetof(struct host_features, task_storage) },
		{ "task_regs", offsetof(struct host_features, task_regs) },
		{ "sched_info", offsetof(struct host_features, sched_info) },
		{ "proc_tp", offsetof(struct host_features, proc_tp) },
		{ "btf", offsetof(struct host_features, btf) },
		{ "ringbuf", offsetof(struct host_features, ringbuf) },
		{ "uprobe", offsetof(struct host_features, uprobe) },
		{ "usdt_sem", offsetof(struct host_features, usdt_sem) },
	};
	char buf[256], *save = NULL;

	if (!list)
		return;
	snprintf(buf, sizeof(buf), "%s", list);
	for (char *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
		bool known = false;
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (!strcmp(w, names[i].name)) {
				*(bool *)((char *)f + names[i].off) = false;
				known = true;
			}
		if (!known)
			fprintf(stderr, "kpi-agent: KPI_AGENT_DISABLE: no feature '%s' (see --help); "
				"ignored\n", w);
	}
}

void host_probe_kernel(struct host_features *f)
{
	f->btf = exists("/sys/kernel/btf/vmlinux");
	/* libbpf's probe says 0 for "no such map type" and for EPERM alike:
	 * a plain array map tells the two apart */
	int fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, NULL, 4, 4, 1, NULL);

	f->bpf_refused = fd < 0 && (errno == EPERM || errno == EACCES);
	if (fd >= 0)
		close(fd);
	f->ringbuf = !f->bpf_refused && libbpf_probe_bpf_map_type(BPF_MAP_TYPE_RINGBUF, NULL) > 0;
	f->uprobe = exists("/sys/bus/event_source/devices/uprobe/type");
	f->usdt_sem = exists("/sys/bus/event_source/devices/uprobe/format/ref_ctr_offset");
	disable_named(f, getenv("KPI_AGENT_DISABLE"));
}

int host_check_kernel(const struct host_features *f, char *err, size_t len)
{
	if (!f->btf)
		snprintf(err, len, "this kernel has no BTF (/sys/kernel/btf/vmlinux is missing), which the "
			 "BPF programs need to read kernel structures: boot a kernel built with "
			 "CONFIG_DEBUG_INFO_BTF=y (Debian 11 and later ship one)");
	else if (!f->ringbuf && f->bpf_refused)
		snprintf(err, len, "the kernel refused to create a BPF map (%s): run kpi-agent with "
			 "CAP_BPF, e.g. as root on the host or in a privileged container "
			 "(podman run --privileged --pid=host)", strerror(EPERM));
	else if (!f->ringbuf)
		snprintf(err, len, "this kernel has no BPF ring buffer (BPF_MAP_TYPE_RINGBUF): boot "
			 "Linux 5.8 or later (Debian 12's 6.1 has it)");
	else if (!f->uprobe)
		snprintf(err, len, "this kernel has no uprobe support (no "
			 "/sys/bus/event_source/devices/uprobe): USDT probes cannot be traced; "
			 "use a kernel built with CONFIG_UPROBE_EVENTS=y");
	else if (!f->syscall_tp && !f->raw_tp)
		snprintf(err, len, "this kernel has neither syscall tracepoints nor raw "
			 "tracepoints: socket reads and writes cannot be traced; use a kernel built "
			 "with CONFIG_FTRACE_SYSCALLS=y");
	else
		return 0;
	return -1;
}

void host_probe_features(struct host_features *f)
{
	host_probe_kernel(f);
	f->syscall_tp = exists(TRACEFS "/events/syscalls/sys_enter_read/id") &&
			exists(TRACEFS "/events/syscalls/sys_exit_write/id");
	f->tcp_probe_tp = exists(TRACEFS "/events/tcp/tcp_probe/id");
	f->sched_tp = exists(TRACEFS "/events/sched/sched_switch/id");
	f->proc_tp = exists(TRACEFS "/events/sched/sched_process_exec/id") &&
		     exists(TRACEFS "/events/sched/sched_process_exit/id");
	f->raw_tp = probe_raw_tp();
	f->task_storage = helpers(BPF_PROG_TYPE_RAW_TRACEPOINT, BPF_FUNC_task_storage_get,
				  BPF_FUNC_get_current_task_btf);
	f->task_regs = helpers(BPF_PROG_TYPE_TRACEPOINT, BPF_FUNC_task_pt_regs,
			       BPF_FUNC_get_current_task_btf);
	/* CONFIG_SCHED_INFO: the scheduler keeps each thread's run-queue delay */
	f->sched_info = exists("/proc/self/schedstat");
	disable_named(f, getenv("KPI_AGENT_DISABLE"));
}

uint64_t host_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
