/* attach.c - the BPF programs kpi-agent loads (flavours chosen from the kernel's
 * features) and the processes they follow: USDT attach and detach per target. */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "kpi.skel.h"
#include "assemble.h"
#include "attach.h"
#include "gpu.h"
#include "host.h"
#include "targets.h"

#ifndef PIDFD_THREAD
#define PIDFD_THREAD O_EXCL     /* linux/pidfd.h, Linux 6.9: a pidfd for one thread */
#endif

/* USDT probe name -> its handler, in kpi_probes.d order. */
#define N_USDT 10

struct target {
	pid_t pid;
	unsigned long long start_time;
	struct bpf_link *links[N_USDT];
	bool failed;            /* attach failed: do not retry this process */
};

struct attach {
	struct kpi_bpf *skel;
	const struct host_features *feat;
	struct attach_want want;
	struct ring_buffer *rb;
	struct assembler *asm_;
	struct agent_gpu *gpu;               /* NULL: GPU collection off */
	struct target targets[KPI_MAX_TARGETS];
	int n_targets;
	struct bpf_link *global_links[64];   /* tracepoint / raw_tp programs */
	int n_global_links;
};

static const struct {
	const char *name;
	size_t prog_off;
} usdt_probes[N_USDT] = {
#define P(probe, prog) { probe, offsetof(struct kpi_bpf, progs.prog) }
	P("request__admitted", kpi_request_admitted),
	P("request__rejected", kpi_request_rejected),
	P("request__scheduled", kpi_request_scheduled),
	P("step__begin", kpi_step_begin),
	P("step__end", kpi_step_end),
	P("request__first_token", kpi_request_first_token),
	P("request__preempted", kpi_request_preempted),
	P("request__finished", kpi_request_finished),
	P("request__cancelled", kpi_request_cancelled),
	P("response__end", kpi_response_end),
#undef P
};

static struct bpf_program *usdt_prog(struct kpi_bpf *skel, int i)
{
	return *(struct bpf_program **)((char *)skel + usdt_probes[i].prog_off);
}

/* ---- attaching to targets ------------------------------------------------------ */

/* Run-queue delay from one raw_tp program reading the scheduler's own
 * timestamps; otherwise the sched tracepoints, which need the targets' tids. */
static bool sched_raw(const struct attach *at)
{
	return at->feat->raw_tp && at->feat->sched_info && at->feat->task_storage;
}

struct thread_ctx {
	struct attach *at;
	pid_t pid;
};

/* target_tids: tid -> tgid, for the sched tracepoint flavour */
static bool add_target_tid(void *ctx, int tid)
{
	struct thread_ctx *c = ctx;
	__u32 key = (__u32)tid, tgid = (__u32)c->pid;

	bpf_map__update_elem(c->at->skel->maps.target_tids, &key, sizeof(key), &tgid,
			     sizeof(tgid), BPF_ANY);
	return true;
}

/* Ports and threads change while a target runs: refreshed at every rescan. */
static void refresh_one(struct attach *at, pid_t pid)
{
	uint16_t ports[64];
	__u8 one = 1;
	int n = target_listen_ports(pid, ports, 64);

	for (int i = 0; i < n; i++)
		bpf_map__update_elem(at->skel->maps.target_ports, &ports[i], sizeof(ports[i]), &one,
				     sizeof(one), BPF_ANY);
	if (!sched_raw(at))
		target_each_thread(pid, add_target_tid, &(struct thread_ctx){ at, pid });
}

static bool prime_thread(void *ctx, int tid)
{
	struct thread_ctx *c = ctx;
	char path[96];
	unsigned long long run, delay;
	FILE *f;
	int fd = (int)syscall(SYS_pidfd_open, tid, PIDFD_THREAD);

	if (fd < 0)
		return true;
	snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", c->pid, tid);
	f = fopen(path, "r");
	if (f && fscanf(f, "%llu %llu", &run, &delay) == 2) {
		__u64 v = delay;
		bpf_map_update_elem(bpf_map__fd(c->at->skel->maps.runq_seen), &fd, &v, BPF_ANY);
	}
	if (f)
		fclose(f);
	close(fd);
	return true;
}

/* The raw_tp run-queue program counts what each thread's run_delay grew
 * since it last left the CPU; for the threads already running at attach,
 * "since" starts at their run_delay now, given to their task storage through
 * a pidfd (PIDFD_THREAD).  Where that fails a thread's first wait after the
 * attach is not counted. */
static void runq_prime(struct attach *at, pid_t pid)
{
	target_each_thread(pid, prime_thread, &(struct thread_ctx){ at, pid });
}

/* since: now, CLOCK_MONOTONIC (threads that start later are wholly the target's). */
static int attach_one(struct attach *at, pid_t pid, uint64_t since)
{
	struct target *t;
	char exe[PATH_MAX];
	__u32 key = (__u32)pid;

	if (at->n_targets == KPI_MAX_TARGETS) {
		fprintf(stderr, "kpi-agent: already tracing %d processes; pid %d is not traced\n",
			KPI_MAX_TARGETS, pid);
		return -1;
	}
	t = &at->targets[at->n_targets];
	memset(t, 0, sizeof(*t));
	t->pid = pid;
	t->start_time = target_start_time(pid);
	if (!t->start_time || target_exe_path(pid, exe, sizeof(exe))) {
		fprintf(stderr, "kpi-agent: pid %d: no such process (or it exited)\n", pid);
		return -1;
	}
	at->n_targets++;
	/* targets first: syscall handlers see the process from now on */
	if (sched_raw(at))
		runq_prime(at, pid);
	bpf_map__update_elem(at->skel->maps.targets, &key, sizeof(key), &since, sizeof(since),
			     BPF_ANY);
	refresh_one(at, pid);
	char missing[256] = "";
	int n_links = 0;
	for (int i = 0; i < N_USDT; i++) {
		t->links[i] = bpf_program__attach_usdt(usdt_prog(at->skel, i), pid, exe, "kpi",
						       usdt_probes[i].name, NULL);
		if (t->links[i]) {
			n_links++;
			continue;
		}
		if (errno == ENOENT) {
			/* a probe the build compiled out or never fires: the rest still work */
			size_t l = strlen(missing);
			snprintf(missing + l, sizeof(missing) - l, "%s%s", l ? ", " : "", usdt_probes[i].name);
			continue;
		}
		fprintf(stderr, "kpi-agent: pid %d (%s): cannot attach USDT probe kpi:%s (%s)\n",
			pid, exe, usdt_probes[i].name, strerror(errno));
		break;
	}
	if (n_links < N_USDT && (!t->links[0] || !t->links[N_USDT - 1] || missing[0] == 0)) {
		/* without admitted/response__end there is no request to record */
		fprintf(stderr, "kpi-agent: pid %d (%s) is not traced: %s; is it a kpi-infer built with "
			"its USDT probes (abi/kpi_probes.d)?\n", pid, exe,
			missing[0] ? "its kpi probes are missing" : "attaching failed");
		t->failed = true;
		for (int k = 0; k < N_USDT; k++) {
			bpf_link__destroy(t->links[k]);
			t->links[k] = NULL;
		}
		bpf_map__delete_elem(at->skel->maps.targets, &key, sizeof(key), 0);
		return -1;
	}
	if (missing[0])
		fprintf(stderr, "kpi-agent: pid %d has no call site for kpi:%s (those events will not "
			"be seen)\n", pid, missing);
	printf("attached to pid %d (%s)\n", pid, exe);
	return 0;
}

/* Walks map fd and deletes the entries for which gone(ctx, key, value)
 * returns true.  The next key is taken before the current one is deleted:
 * a hash map's walk from a key that no longer exists starts over.  Called
 * through map_prune(), which checks at compile time that the map's key and
 * value types fit its buffers. */
#define PRUNE_KEY_MAX 16
#define PRUNE_VALUE_MAX 128

static void map_prune_walk(int fd, bool (*gone)(void *ctx, const void *key, const void *value),
			   void *ctx)
{
	_Alignas(8) unsigned char k[2][PRUNE_KEY_MAX], v[PRUNE_VALUE_MAX];
	int cur = 0, more;

	more = bpf_map_get_next_key(fd, NULL, k[cur]) == 0;
	while (more) {
		more = bpf_map_get_next_key(fd, k[cur], k[!cur]) == 0;
		if (bpf_map_lookup_elem(fd, k[cur], v) == 0 && gone(ctx, k[cur], v))
			bpf_map_delete_elem(fd, k[cur]);
		cur = !cur;
	}
}

#define map_prune(fd, key_t, value_t, gone, ctx) do {                                      \
	_Static_assert(sizeof(key_t) <= PRUNE_KEY_MAX && sizeof(value_t) <= PRUNE_VALUE_MAX, \
		       "map_prune: " #key_t " -> " #value_t " does not fit its buffers");   \
	map_prune_walk(fd, gone, ctx);                                                     \
} while (0)

/* conns: (pid << 32 | fd) -> connection.  Write times the kernel still holds
 * go to the assembler first: the target is gone, so no response__end or close
 * will send them. */
static bool conn_of_pid(void *ctx, const void *key, const void *value)
{
	struct thread_ctx *c = ctx;
	const struct kpi_conn *conn = value;
	__u64 k = *(const __u64 *)key;

	if ((k >> 32) != (__u32)c->pid)
		return false;
	if (conn->n_writes && conn->n_writes <= KPI_WRITE_BATCH) {
		struct kpi_ev_write e = { 0 };
		kpi_write_event_fill(&e, (__u32)c->pid, (int)(__u32)k, conn, conn->n_writes);
		assemble_event(c->at->asm_, &e, sizeof(e));
	}
	return true;
}

/* target_tids: tid -> tgid */
static bool tid_of_pid(void *ctx, const void *key, const void *value)
{
	(void)key;
	return *(const __u32 *)value == (__u32)((struct thread_ctx *)ctx)->pid;
}

/* Removes every BPF map entry that belongs to pid. */
static void forget_maps(struct attach *at, pid_t pid)
{
	struct thread_ctx c = { at, pid };
	__u32 key = (__u32)pid;

	bpf_map__delete_elem(at->skel->maps.targets, &key, sizeof(key), 0);
	bpf_map__delete_elem(at->skel->maps.runq_total, &key, sizeof(key), 0);
	map_prune(bpf_map__fd(at->skel->maps.conns), __u64, struct kpi_conn, conn_of_pid, &c);
	if (!sched_raw(at))
		map_prune(bpf_map__fd(at->skel->maps.target_tids), __u32, __u32, tid_of_pid, &c);
}

static void detach_one(struct attach *at, int idx, bool announce)
{
	struct target *t = &at->targets[idx];

	/* events already in the ring belong to completed requests: keep them */
	ring_buffer__consume(at->rb);
	for (int i = 0; i < N_USDT; i++)
		bpf_link__destroy(t->links[i]);
	forget_maps(at, t->pid);
	assemble_forget_pid(at->asm_, (uint32_t)t->pid);
	if (announce && !t->failed)
		printf("detached from pid %d\n", t->pid);
	at->targets[idx] = at->targets[--at->n_targets];
}

static bool wanted(const struct attach *at, pid_t pid)
{
	if (!at->want.n_pids)
		return true;
	for (int i = 0; i < at->want.n_pids; i++)
		if (at->want.pids[i] == pid)
			return true;
	return false;
}

void attach_rescan(struct attach *at, uint64_t now)
{
	pid_t found[KPI_MAX_TARGETS];
	int n;

	for (int i = at->n_targets - 1; i >= 0; i--) {
		struct target *t = &at->targets[i];
		if (target_start_time(t->pid) != t->start_time)
			detach_one(at, i, true);
		else if (!t->failed)
			refresh_one(at, t->pid);
	}
	if (at->want.n_pids) {
		n = 0;
		for (int i = 0; i < at->want.n_pids; i++)
			if (target_start_time(at->want.pids[i]))
				found[n++] = at->want.pids[i];
	} else {
		n = targets_scan(at->want.exe, found, KPI_MAX_TARGETS);
	}
	for (int i = 0; i < n; i++) {
		bool known = false;
		for (int k = 0; k < at->n_targets && !known; k++)
			known = at->targets[k].pid == found[i];
		if (!known && wanted(at, found[i]))
			attach_one(at, found[i], now);
	}
	/* those that map libkpi_cupti.so also get their GPU kernels recorded */
	pid_t live[KPI_MAX_TARGETS];
	int n_live = 0;
	for (int i = 0; i < at->n_targets; i++)
		if (!at->targets[i].failed)
			live[n_live++] = at->targets[i].pid;
	agent_gpu_sync(at->gpu, live, n_live);
}

/* ---- program selection --------------------------------------------------------- */

static bool is_write_syscall(const char *name)
{
	return !strcmp(name, "write") || !strcmp(name, "writev") || !strcmp(name, "sendto") ||
	       !strcmp(name, "sendmsg");
}

void attach_choose_programs(struct attach *at)
{
	struct kpi_bpf *s = at->skel;
	struct bpf_program *p;
	bool sys_tp = at->feat->syscall_tp, sched_rawtp = sched_raw(at);
	bool exit_regs = sys_tp && at->feat->task_regs;

	bpf_object__for_each_program(p, s->obj) {
		const char *sec = bpf_program__section_name(p);
		bool load = true;
		if (!strcmp(sec, "tracepoint/syscalls/sys_enter_close"))
			load = sys_tp;
		else if (!strncmp(sec, "tracepoint/syscalls/sys_enter_", 30))
			/* a read's exit reads the fd itself; a write's time is its entry */
			load = sys_tp && (!exit_regs || is_write_syscall(sec + 30));
		else if (!strncmp(sec, "tracepoint/syscalls/", 20))
			load = sys_tp;
		else if (!strcmp(sec, "raw_tp/sys_enter") || !strcmp(sec, "raw_tp/sys_exit"))
			load = !sys_tp && at->feat->raw_tp;
		else if (!strncmp(sec, "raw_tp/sched_", 13))
			load = sched_rawtp;
		else if (!strncmp(sec, "tracepoint/sched/", 17))
			load = !sched_rawtp && at->feat->sched_tp;
		else if (!strcmp(sec, "tracepoint/tcp/tcp_probe"))
			load = at->feat->tcp_probe_tp;
		bpf_program__set_autoload(p, load);
	}
	/* maps only the other flavour uses are not created: a kernel without
	 * task storage could not create runq_seen */
	s->rodata->exit_regs = exit_regs;
	s->rodata->sys_in_task = at->feat->task_storage;
	bpf_map__set_autocreate(s->maps.sys_task, at->feat->task_storage);
	bpf_map__set_autocreate(s->maps.sys_args, !at->feat->task_storage);
	bpf_map__set_autocreate(s->maps.runq_seen, sched_rawtp);
	bpf_map__set_autocreate(s->maps.runq_last, sched_rawtp);
	bpf_map__set_autocreate(s->maps.runq_start, !sched_rawtp);
	bpf_map__set_autocreate(s->maps.target_tids, !sched_rawtp);
	s->rodata->nr_read = SYS_read;
	s->rodata->nr_readv = SYS_readv;
	s->rodata->nr_write = SYS_write;
	s->rodata->nr_writev = SYS_writev;
	s->rodata->nr_close = SYS_close;
	s->rodata->nr_recvfrom = SYS_recvfrom;
	s->rodata->nr_recvmsg = SYS_recvmsg;
	s->rodata->nr_sendto = SYS_sendto;
	s->rodata->nr_sendmsg = SYS_sendmsg;
	if (at->want.verbose)
		fprintf(stderr, "kpi-agent: syscalls via %s, run queue via %s, tcp arrival %s\n",
			exit_regs ? "sys_exit tracepoints for reads (fd from saved registers), enter/exit for writes"
			: sys_tp ? "sys_enter/sys_exit tracepoints" : "raw_tp sys_enter/sys_exit",
			sched_rawtp ? "raw_tp sched_switch (sched_info)"
			: at->feat->sched_tp ? "tracepoints" : "(off: no sched tracepoints)",
			at->feat->tcp_probe_tp ? "via tcp:tcp_probe" : "off (read() time is used)");
}

/* Attaches every loaded non-USDT program (USDT ones attach per target). */
int attach_global(struct attach *at)
{
	struct bpf_program *p;

	bpf_object__for_each_program(p, at->skel->obj) {
		if (!bpf_program__autoload(p) || !strcmp(bpf_program__section_name(p), "usdt"))
			continue;
		struct bpf_link *l = bpf_program__attach(p);
		if (!l) {
			fprintf(stderr, "kpi-agent: cannot attach %s (%s): %s\n", bpf_program__name(p),
				bpf_program__section_name(p), strerror(errno));
			return -1;
		}
		if (at->n_global_links < (int)(sizeof(at->global_links) / sizeof(at->global_links[0])))
			at->global_links[at->n_global_links++] = l;
	}
	return 0;
}

/* ---- the attach state ---------------------------------------------------------- */

struct attach *attach_new(struct kpi_bpf *skel, const struct host_features *feat,
			  const struct attach_want *want)
{
	struct attach *at = calloc(1, sizeof(*at));

	if (!at)
		return NULL;
	at->skel = skel;
	at->feat = feat;
	at->want = *want;
	return at;
}

void attach_set_consumers(struct attach *at, struct ring_buffer *rb, struct assembler *asm_,
			  struct agent_gpu *gpu)
{
	at->rb = rb;
	at->asm_ = asm_;
	at->gpu = gpu;
}

int attach_count(const struct attach *at)
{
	return at->n_targets;
}

int attach_live_pids(const struct attach *at, uint32_t *pids, int max)
{
	int n = 0;

	for (int i = 0; i < at->n_targets && n < max; i++)
		if (!at->targets[i].failed)
			pids[n++] = (uint32_t)at->targets[i].pid;
	return n;
}

void attach_free(struct attach *at)
{
	if (!at)
		return;
	for (int i = at->n_targets - 1; i >= 0; i--) {
		for (int k = 0; k < N_USDT; k++)
			bpf_link__destroy(at->targets[i].links[k]);
	}
	for (int i = 0; i < at->n_global_links; i++)
		bpf_link__destroy(at->global_links[i]);
	free(at);
}
