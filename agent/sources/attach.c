/* attach.c - the BPF programs kpi-agent loads (flavours chosen from the kernel's
 * features) and the processes they follow: found at exec or in /proc, dropped at exit. */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "kpi.skel.h"
#include "agent/track/assemble.h"
#include "attach.h"
#include "links.h"
#include "hold.h"
#include "loader.h"
#include "agent/host/container.h"
#include "agent/host/host.h"
#include "agent/host/targets.h"
#include "usdt.h"

#ifndef PIDFD_THREAD
#define PIDFD_THREAD O_EXCL     /* linux/pidfd.h, Linux 6.9: a pidfd for one thread */
#endif

#define N_PROC_EVENTS 256       /* exec/exit events waiting for attach_pending */

struct target {
	pid_t pid;
	unsigned long long start_time;
	uint64_t since;                 /* its `targets` entry's: the entry a reused pid
					 * gets is not this one's to remove */
	struct usdt_file *file;         /* probes attached for every process of its file, */
	struct usdt_links ln;           /* or to this process alone */
	bool failed;                    /* attach failed: do not retry this process */
	bool http;                      /* HTTP mode: no USDT, payloads (KPI_TARGET_F_HTTP) */
	bool by_port;                   /* found on a --port: dropped when it leaves it */
};

/* An EXEC or EXIT record, kept from the ring-buffer callback (which must not
 * drain the ring itself, as a detach does) until attach_pending. */
struct proc_event {
	unsigned int type;              /* KPI_EV_EXEC or KPI_EV_EXIT */
	pid_t pid;
	uint64_t ts;
	unsigned int state;             /* EXEC: the enum kpi_target_state it was given */
	bool at_listen;                 /* EXEC: made a target by its listen() on a --port port */
};

struct attach {
	struct kpi_bpf *skel;
	const struct host_features *feat;
	struct attach_want want;
	struct ring_buffer *rb;
	struct assembler *asm_;
	struct side *sides[ATTACH_MAX_SIDES];        /* told the live targets */
	int n_sides;
	struct target targets[KPI_MAX_TARGETS];
	int n_targets;
	struct usdt_files files;             /* executables attached for every process */
	struct proc_event events[N_PROC_EVENTS];
	int n_events;
	struct bpf_link *global_links[64];   /* tracepoint / raw_tp programs */
	int n_global_links;
	struct hold *hold;                   /* the processes its programs stopped */
};

/* Run-queue delay from one raw_tp program reading the scheduler's own
 * timestamps; otherwise the sched tracepoints, which need the targets' tids. */
static bool sched_raw(const struct attach *at)
{
	return at->feat->raw_tp && at->feat->sched_info && at->feat->task_storage;
}

/* --pid or --port: these processes alone, no executable followed from its exec. */
static bool explicit_pids(const struct attach *at)
{
	return at->want.n_pids || at->want.n_ports;
}

/* ---- the BPF side of a target ---------------------------------------------------- */

static int target_get(struct attach *at, pid_t pid, struct kpi_target *v)
{
	__u32 key = (__u32)pid;

	return bpf_map__lookup_elem(at->skel->maps.targets, &key, sizeof(key), v, sizeof(*v), 0);
}

static void target_put(struct attach *at, pid_t pid, const struct kpi_target *v)
{
	__u32 key = (__u32)pid;

	bpf_map__update_elem(at->skel->maps.targets, &key, sizeof(key), v, sizeof(*v), BPF_ANY);
}

/* A process the exec or listen program stopped runs on: its file's probes
 * are attached, or will not be. Every path that is done with a new process
 * comes here, so that none stays stopped (hold.c). */
static void hold_done(struct attach *at, pid_t pid)
{
	hold_release(at->hold, pid);
}

void attach_watchdog_start(struct attach *at)
{
	hold_watchdog_start(at->hold);
}

void attach_hold_end(struct attach *at)
{
	if (at)
		hold_end(at->hold);
}

/* Removes pid's `targets` entry if it is still the one added at since (the
 * exit program may have removed it, and a new process with the same pid
 * have its own by now). */
static void target_drop(struct attach *at, pid_t pid, uint64_t since)
{
	struct kpi_target v;
	__u32 key = (__u32)pid;

	if (target_get(at, pid, &v) == 0 && v.since == since)
		bpf_map__delete_elem(at->skel->maps.targets, &key, sizeof(key), 0);
}

/* ---- executables attached for every process ------------------------------------ */

/* exec_inodes: the state a process of f gets at its exec. */
static void exec_rule(struct attach *at, const struct usdt_file *f)
{
	__u64 ino = (__u64)f->ino;
	__u32 state = f->state == USDT_FILE_TRACED ? KPI_TARGET_TRACED
		      : f->state == USDT_FILE_PER_PROCESS ? KPI_TARGET_PENDING : KPI_TARGET_NONE;

	bpf_map__update_elem(at->skel->maps.exec_inodes, &ino, sizeof(ino), &state, sizeof(state),
			     BPF_ANY);
}

static void exec_rule_gone(void *ctx, const struct usdt_file *f)
{
	struct attach *at = ctx;
	__u64 ino = (__u64)f->ino;

	bpf_map__delete_elem(at->skel->maps.exec_inodes, &ino, sizeof(ino), 0);
}

static bool file_in_use(void *ctx, const struct usdt_file *f)
{
	const struct attach *at = ctx;

	for (int i = 0; i < at->n_targets; i++)
		if (at->targets[i].file == f)
			return true;
	return false;
}

/* exe's file, its probes attached for every process when it is new.  NULL:
 * attach to the process alone (--pid; the kernel refused; no room).  Under
 * --port the file's probes serve every target that runs it too (ten pods of
 * one image: one attach), but a process of the file is a target only once
 * it listens there: no exec rule, and the handlers drop what a process that
 * is no target fires (is_target). */
static struct usdt_file *file_of(struct attach *at, const char *exe)
{
	struct usdt_file *f;
	bool fresh;

	if (at->want.n_pids || at->want.http_only)
		return NULL;
	f = usdt_file_get(&at->files, at->skel, exe, &fresh);
	if (!f)
		return NULL;
	if (fresh) {
		if (!at->want.n_ports)
			exec_rule(at, f);
		if (f->state == USDT_FILE_PER_PROCESS)
			fprintf(stderr, "kpi-agent: %s: cannot attach its USDT probes for every process "
				"that runs it (%s); attaching to each one when it is found instead, "
				"which misses what it does before\n", exe, strerror(errno));
	}
	return f->state == USDT_FILE_PER_PROCESS ? NULL : f;
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

/* ---- attaching to targets ------------------------------------------------------ */

/* Resolves pid's container once, at its attach (its rows then carry it,
 * even after it exits), and names it on a line of its own. */
static void say_container(pid_t pid)
{
	const struct container_info *ci = container_of_pid(pid);
	char name[160] = "", pod[330] = "";

	if (!ci)
		return;
	if (ci->name[0])
		snprintf(name, sizeof(name), " (%s)", ci->name);
	if (ci->pod_name[0])
		snprintf(pod, sizeof(pod), ", pod %s%s%s", ci->pod_namespace, ci->pod_namespace[0] ? "/" : "",
			 ci->pod_name);
	printf("pid %d is in %s container %.12s%s%s\n", pid, ci->runtime ? ci->runtime : "a", ci->id, name,
	       pod);
}

/* HTTP mode: the syscall programs copy its socket payloads (PAYLOAD records),
 * agent/http_path.c follows its exchanges. */
static int attach_http(struct attach *at, struct target *t, struct kpi_target *v, const char *exe,
		       const char *why)
{
	t->http = true;
	v->state = KPI_TARGET_TRACED;
	v->flags |= KPI_TARGET_F_HTTP;
	target_put(at, t->pid, v);
	printf("attached to pid %d (%s), HTTP mode (%s)\n", t->pid, exe, why);
	say_container(t->pid);
	return 0;
}

/* Follows pid: `targets` first (syscall handlers see the process from now
 * on; an entry the exec program wrote is kept, with its exec time), then
 * the USDT probes, of its whole file or of it alone.  exec_ts: when it
 * exec'd, as the exec program told (0: found in /proc, its exec unseen). */
static int attach_one(struct attach *at, pid_t pid, uint64_t exec_ts)
{
	uint64_t t0 = host_mono_ns();
	struct kpi_target v = { .since = t0, .state = KPI_TARGET_PENDING };
	char exe[PATH_MAX], missing[256];
	const char *failed = NULL;
	bool had_entry, traced_at_exec, held;
	struct target *t;

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
		if (!exec_ts)   /* one that exits at once (kpi-infer --help) is no news */
			fprintf(stderr, "kpi-agent: pid %d: no such process (or it exited)\n", pid);
		return -1;
	}
	at->n_targets++;
	had_entry = target_get(at, pid, &v) == 0;
	if (had_entry && !exec_ts)
		exec_ts = v.since;      /* its exec event was lost or is still to come */
	traced_at_exec = had_entry && v.state == KPI_TARGET_TRACED;
	t->since = v.since;
	if (sched_raw(at) && !had_entry)
		runq_prime(at, pid);    /* the exec program's entry counts from the exec */
	/* its ports first: the syscall programs tell the connections it serves
	 * from those it makes by them (bpf/kpi.bpf.c conn_add) from its first read */
	refresh_one(at, pid);
	if (!had_entry)
		target_put(at, pid, &v);
	if (at->want.http_only)
		return attach_http(at, t, &v, exe, "--http-only");
	t->file = file_of(at, exe);
	if (t->file)
		snprintf(missing, sizeof(missing), "%s", t->file->missing);
	if ((t->file && t->file->state != USDT_FILE_TRACED) ||
	    (!t->file && usdt_attach(at->skel, &t->ln, pid, exe, missing, sizeof(missing), &failed))) {
		/* a server without our probes, named on the command line */
		if (!failed && (explicit_pids(at) || at->want.exe)) {
			t->file = NULL;
			return attach_http(at, t, &v, exe, "no kpi probes");
		}
		if (failed)
			fprintf(stderr, "kpi-agent: pid %d (%s): cannot attach USDT probe kpi:%s (%s)\n",
				pid, exe, failed, strerror(errno));
		fprintf(stderr, "kpi-agent: pid %d (%s) is not traced: %s; is it a kpi-infer built with "
			"its USDT probes (abi/kpi_probes.d)?\n", pid, exe,
			missing[0] ? "its kpi probes are missing" : "attaching failed");
		t->failed = true;
		t->file = NULL;
		target_drop(at, pid, t->since);
		return -1;
	}
	if (v.state != KPI_TARGET_TRACED) {
		v.state = KPI_TARGET_TRACED;
		target_put(at, pid, &v);
	}
	if (missing[0])
		fprintf(stderr, "kpi-agent: pid %d has no call site for kpi:%s (those events will not "
			"be seen)\n", pid, missing);
	if (!exec_ts) {
		printf("attached to pid %d (%s)\n", pid, exe);
		say_container(pid);
		return 0;
	}
	held = hold_is_held(at->hold, pid);
	/* from its exec when the probes were on its file before it ran, or
	 * when it was held there until they were */
	printf("attached to pid %d (%s), traced %.1f ms after its exec (the agent knew after "
	       "%.1f ms)%s\n", pid, exe,
	       traced_at_exec ? 0.0 : (double)(host_mono_ns() - exec_ts) / 1e6,
	       (double)(t0 - exec_ts) / 1e6,
	       held ? ", held at its exec until then" : "");
	say_container(pid);
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
static void forget_maps(struct attach *at, const struct target *t)
{
	struct thread_ctx c = { at, t->pid };
	__u32 key = (__u32)t->pid;

	target_drop(at, t->pid, t->since);
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
	usdt_detach(&t->ln);
	forget_maps(at, t);
	assemble_forget_pid(at->asm_, (uint32_t)t->pid);
	if (announce && !t->failed)
		printf("detached from pid %d\n", t->pid);
	at->targets[idx] = at->targets[--at->n_targets];
}

static int find_target(const struct attach *at, pid_t pid)
{
	for (int i = 0; i < at->n_targets; i++)
		if (at->targets[i].pid == pid)
			return i;
	return -1;
}

/* In the container or pod --container / --pod ask for (any, without them). */
static bool selected(const struct attach *at, pid_t pid)
{
	return container_sel_match(at->want.sel, container_of_pid(pid));
}

static bool wanted(const struct attach *at, pid_t pid)
{
	if (!selected(at, pid))
		return false;
	if (!at->want.n_pids)
		return true;
	for (int i = 0; i < at->want.n_pids; i++)
		if (at->want.pids[i] == pid)
			return true;
	return false;
}

/* pid is on the --pid list. */
static bool wanted_pid(const struct attach *at, pid_t pid)
{
	for (int i = 0; i < at->want.n_pids; i++)
		if (at->want.pids[i] == pid)
			return true;
	return false;
}

/* The processes on the --port list now; n_found of found[] are taken. */
static int port_owners(struct attach *at, pid_t *found, int n_found, int max)
{
	for (int p = 0; p < at->want.n_ports && n_found < max; p++) {
		pid_t own[KPI_MAX_TARGETS];
		int n = target_port_owners(at->want.ports[p], own, KPI_MAX_TARGETS);
		for (int i = 0; i < n && n_found < max; i++) {
			bool dup = false;
			for (int k = 0; k < n_found; k++)
				dup |= found[k] == own[i];
			if (!dup)
				found[n_found++] = own[i];
		}
	}
	return n_found;
}

/* Every side object (TLS, llama.cpp, CUPTI) is told the live targets at
 * once; recheck on the rescan's clock. */
static void sides_sync(struct attach *at, bool recheck)
{
	struct side_live live[KPI_MAX_TARGETS];
	int n = 0;

	for (int i = 0; i < at->n_targets; i++)
		if (!at->targets[i].failed)
			live[n++] = (struct side_live){ at->targets[i].pid, at->targets[i].http };
	for (int k = 0; k < at->n_sides; k++)
		side_sync(at->sides[k], live, n, recheck);
}

void attach_rescan(struct attach *at)
{
	pid_t found[KPI_MAX_TARGETS], on_port[KPI_MAX_TARGETS];
	int n, n_port = port_owners(at, on_port, 0, KPI_MAX_TARGETS);

	for (int i = at->n_targets - 1; i >= 0; i--) {
		struct target *t = &at->targets[i];
		bool still = !t->by_port;
		for (int k = 0; k < n_port && !still; k++)
			still = on_port[k] == t->pid;
		if (target_start_time(t->pid) != t->start_time || !still)
			detach_one(at, i, true);
		else if (!t->failed)
			refresh_one(at, t->pid);
	}
	usdt_files_prune(&at->files, file_in_use, exec_rule_gone, at);
	/* --exe: its file's probes are in place before any process runs it */
	if (at->want.exe)
		file_of(at, at->want.exe);
	if (explicit_pids(at)) {
		n = 0;
		for (int i = 0; i < at->want.n_pids; i++)
			if (target_start_time(at->want.pids[i]))
				found[n++] = at->want.pids[i];
	} else {
		n = targets_scan(at->want.exe, found, KPI_MAX_TARGETS);
	}
	for (int i = 0; i < n; i++)
		if (find_target(at, found[i]) < 0 && wanted(at, found[i])) {
			attach_one(at, found[i], 0);
			hold_done(at, found[i]);        /* its exec event was lost */
		}
	for (int i = 0; i < n_port; i++) {
		if (find_target(at, on_port[i]) >= 0 || !selected(at, on_port[i]) ||
		    attach_one(at, on_port[i], 0))
			continue;
		if ((n = find_target(at, on_port[i])) >= 0)
			at->targets[n].by_port = !wanted_pid(at, on_port[i]);
	}
	sides_sync(at, true);
}

/* ---- processes starting and ending ------------------------------------------------ */

bool attach_event(struct attach *at, const void *rec, size_t size)
{
	const union kpi_event *e = rec;

	if (size < sizeof(e->h) || (e->h.type != KPI_EV_EXEC && e->h.type != KPI_EV_EXIT))
		return false;
	if (size < kpi_event_size(e->h.type))
		return false;   /* the assembler counts it as malformed */
	if (at->n_events < N_PROC_EVENTS)
		at->events[at->n_events++] = (struct proc_event){
			e->h.type, (pid_t)e->h.pid, e->h.ts,
			e->h.type == KPI_EV_EXEC ? e->exec.state : 0,
			e->h.type == KPI_EV_EXEC && e->exec.at_listen };
	/* else the rescan finds the process (or its exit) within RESCAN_NS */
	return true;
}

/* A process that exec'd a traced executable and exited before the agent got
 * to it (a lifetime shorter than the agent's delay on a busy machine): what
 * the kernel side kept of it goes, as at any target's exit. */
static void gone_before_attach(struct attach *at, const struct proc_event *ev)
{
	struct target t = { .pid = ev->pid, .since = ev->ts };

	forget_maps(at, &t);
	assemble_forget_pid(at->asm_, (uint32_t)ev->pid);
	printf("pid %d exited %.1f ms after its exec, before the agent got to it (%s)\n", ev->pid,
	       (double)(host_mono_ns() - ev->ts) / 1e6, ev->state == KPI_TARGET_TRACED
	       ? "traced from its exec all the same" : "its probes were not attached yet");
}

/* Whether pid has ended: gone, or a zombie (its /proc/PID/exe unreadable). */
static bool proc_gone(pid_t pid)
{
	char exe[PATH_MAX];

	return !target_start_time(pid) || target_exe_path(pid, exe, sizeof(exe));
}

/* A process exec'd a traced executable: it is in `targets` already. */
static void on_exec(struct attach *at, const struct proc_event *ev)
{
	int i = find_target(at, ev->pid), rc = -1;

	if (i >= 0 && (at->targets[i].since == ev->ts || ev->at_listen)) {
		hold_done(at, ev->pid);         /* the rescan found it first */
		return;
	}
	if (i >= 0)
		detach_one(at, i, true);        /* a target that exec'd itself anew */
	if (proc_gone(ev->pid)) {
		gone_before_attach(at, ev);
		return;
	}
	/* not a target after all where this fails: an inode number shared with
	 * another filesystem's file, or a file merely called kpi-infer that it
	 * has since stopped being */
	if ((ev->at_listen || target_matches(ev->pid, at->want.exe)) && selected(at, ev->pid)) {
		rc = attach_one(at, ev->pid, ev->ts);
		if (!rc && ev->at_listen && (i = find_target(at, ev->pid)) >= 0)
			at->targets[i].by_port = !wanted_pid(at, ev->pid);
	}
	hold_done(at, ev->pid);
	if (!rc)
		return;
	/* a lifetime that ended while the agent looked at it (the check above
	 * passed a moment before its exit, on a busy machine) is said as one
	 * that ended before, not left unsaid */
	if (proc_gone(ev->pid))
		gone_before_attach(at, ev);
	else
		target_drop(at, ev->pid, ev->ts);
}

void attach_pending(struct attach *at)
{
	bool any = at->n_events > 0;

	/* a detach drains the ring, which can queue more: taken in order */
	for (int i = 0; i < at->n_events; i++) {
		struct proc_event ev = at->events[i];
		int k = find_target(at, ev.pid);
		if (ev.type == KPI_EV_EXEC)
			on_exec(at, &ev);
		else if (k >= 0)
			detach_one(at, k, true);
	}
	at->n_events = 0;
	if (any)
		sides_sync(at, false);
}

/* ---- program selection --------------------------------------------------------- */

static bool is_write_syscall(const char *name)
{
	return !strcmp(name, "write") || !strcmp(name, "writev") || !strcmp(name, "sendto") ||
	       !strcmp(name, "sendmsg") || !strcmp(name, "sendfile64");
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
		if (!strcmp(sec, "tracepoint/syscalls/sys_enter_close") ||
		    !strcmp(sec, "tracepoint/syscalls/sys_enter_shutdown") ||
		    !strcmp(sec, "tracepoint/syscalls/sys_enter_listen"))
			load = sys_tp;
		else if (!strncmp(sec, "tracepoint/syscalls/sys_enter_", 30))
			/* a read's exit reads the fd itself; a write's time is its entry */
			load = sys_tp && (!exit_regs || is_write_syscall(sec + 30));
		else if (p == s->progs.kpi_exit_saved)
			load = sys_tp;  /* attached to every exit whose entry is loaded */
		else if (!strncmp(sec, "tracepoint/syscalls/sys_exit_", 29))
			load = exit_regs;
		else if (!strncmp(sec, "tracepoint/syscalls/", 20))
			load = sys_tp;
		else if (!strcmp(sec, "raw_tp/sys_enter") || !strcmp(sec, "raw_tp/sys_exit"))
			load = !sys_tp && at->feat->raw_tp;
		else if (!strcmp(sec, "raw_tp/sched_process_fork"))
			load = at->feat->raw_tp && at->feat->proc_tp;   /* HTTP targets' workers */
		else if (!strncmp(sec, "raw_tp/sched_", 13))
			load = sched_rawtp;
		else if (!strcmp(sec, "tracepoint/sched/sched_process_exec"))
			load = at->feat->proc_tp && !explicit_pids(at);
		else if (!strcmp(sec, "tracepoint/sched/sched_process_exit"))
			load = at->feat->proc_tp;
		else if (!strncmp(sec, "tracepoint/sched/", 17))
			load = !sched_rawtp && at->feat->sched_tp;
		else if (!strcmp(sec, "tracepoint/tcp/tcp_probe"))
			load = at->feat->tcp_probe_tp;
		else if (!strcmp(sec, "raw_tp/net_dev_start_xmit"))
			load = at->feat->raw_tp;        /* held bytes' send (HTTP mode) */
		bpf_program__set_autoload(p, load);
	}
	/* maps only the other flavour uses are not created: a kernel without
	 * task storage could not create runq_seen */
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
	s->rodata->nr_shutdown = SYS_shutdown;
	s->rodata->nr_recvfrom = SYS_recvfrom;
	s->rodata->nr_recvmsg = SYS_recvmsg;
	s->rodata->nr_sendto = SYS_sendto;
	s->rodata->nr_sendmsg = SYS_sendmsg;
	s->rodata->nr_sendfile = SYS_sendfile;
	s->rodata->nr_listen = SYS_listen;
	/* a file of this name is one before its first process is seen (the
	 * kernel's comm: the name's first 15 characters) */
	if (!explicit_pids(at)) {
		const char *base = at->want.exe ? strrchr(at->want.exe, '/') : NULL;
		snprintf((char *)s->rodata->exec_comm, sizeof(s->rodata->exec_comm), "%.15s",
			 base ? base + 1 : TARGET_DEFAULT_NAME);
	}
	s->rodata->exec_tids = !sched_rawtp;
	s->rodata->watch_listen = at->want.n_ports > 0;
	/* HTTP mode walks iovecs with bpf_loop where the kernel has it */
	s->rodata->has_loop = libbpf_probe_bpf_helper(BPF_PROG_TYPE_TRACEPOINT, BPF_FUNC_loop,
						       NULL) > 0;
	if (at->want.verbose)
		fprintf(stderr, "kpi-agent: syscalls via %s, run queue via %s, tcp arrival %s, "
			"new targets %s\n",
			exit_regs ? "sys_exit tracepoints for reads (fd from saved registers), enter/exit for writes"
			: sys_tp ? "sys_enter/sys_exit tracepoints" : "raw_tp sys_enter/sys_exit",
			sched_rawtp ? "raw_tp sched_switch (sched_info)"
			: at->feat->sched_tp ? "tracepoints" : "(off: no sched tracepoints)",
			at->feat->tcp_probe_tp ? "via tcp:tcp_probe" : "off (read() time is used)",
			explicit_pids(at) ? "none (--pid, --port)"
			: at->feat->proc_tp ? "at their exec (sched_process_exec), and in /proc"
			: "in /proc only (no sched_process_exec)");
}

static int global_link(struct attach *at, struct bpf_program *p, struct bpf_link *l, const char *where)
{
	if (!l) {
		fprintf(stderr, "kpi-agent: cannot attach %s (%s): %s\n", bpf_program__name(p), where,
			strerror(errno));
		return -1;
	}
	if (at->n_global_links < (int)(sizeof(at->global_links) / sizeof(at->global_links[0])))
		at->global_links[at->n_global_links++] = l;
	return 0;
}

/* kpi_exit_saved, attached by its SEC to sys_exit_write, at the other exits
 * whose entry programs save the arguments: the writes', and the reads' where
 * their exits cannot read the saved registers. */
static int attach_saved_exits(struct attach *at)
{
	static const char *const exits[] = { "sys_exit_writev", "sys_exit_sendto", "sys_exit_sendmsg",
					     "sys_exit_sendfile64", "sys_exit_read", "sys_exit_readv",
					     "sys_exit_recvfrom", "sys_exit_recvmsg" };
	struct bpf_program *p = at->skel->progs.kpi_exit_saved;
	size_t n = at->feat->task_regs ? 4 : 8;         /* the writes come first */

	for (size_t i = 0; i < n; i++)
		if (global_link(at, p, bpf_program__attach_tracepoint(p, "syscalls", exits[i]), exits[i]))
			return -1;
	return 0;
}

/* Attaches every loaded non-USDT program (USDT ones attach per target or file). */
int attach_global(struct attach *at)
{
	struct bpf_program *p;
	struct stat st;

	bpf_object__for_each_program(p, at->skel->obj) {
		const char *sec = bpf_program__section_name(p);
		if (!bpf_program__autoload(p) || !strcmp(sec, "usdt"))
			continue;
		if (global_link(at, p, bpf_program__attach(p), sec))
			return -1;
	}
	if (bpf_program__autoload(at->skel->progs.kpi_exit_saved) && attach_saved_exits(at))
		return -1;
	/* --port: whoever listens there from now on is a target from its listen() */
	for (int i = 0; i < at->want.n_ports; i++) {
		__u16 port = (__u16)at->want.ports[i];
		__u8 one = 1;
		bpf_map__update_elem(at->skel->maps.watch_ports, &port, sizeof(port), &one,
				     sizeof(one), BPF_ANY);
	}
	/* --exe: a process that runs it from now on is followed from its exec,
	 * even before the first rescan attaches the file's probes */
	if (at->want.exe && !stat(at->want.exe, &st)) {
		__u64 ino = (__u64)st.st_ino;
		__u32 state = KPI_TARGET_PENDING;
		bpf_map__update_elem(at->skel->maps.exec_inodes, &ino, sizeof(ino), &state,
				     sizeof(state), BPF_NOEXIST);
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
	at->hold = hold_new(skel, want->exec_hold && !want->n_pids);
	if (!at->hold) {
		free(at);
		return NULL;
	}
	return at;
}

void attach_set_consumers(struct attach *at, struct ring_buffer *rb, struct assembler *asm_)
{
	at->rb = rb;
	at->asm_ = asm_;
}

void attach_add_side(struct attach *at, struct side *s)
{
	if (s && at->n_sides < ATTACH_MAX_SIDES)
		at->sides[at->n_sides++] = s;
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
	/* the programs that hold first, then every hold: nothing the agent
	 * stopped stays stopped when it goes (hold_end) */
	hold_free(at->hold);
	/* every link at once (links.h): the global ones, then each target's and
	 * file's probes, each set detached in one wait */
	links_destroy(at->global_links, at->n_global_links);
	for (int i = at->n_targets - 1; i >= 0; i--)
		usdt_detach(&at->targets[i].ln);
	usdt_files_free(&at->files);
	free(at);
}
