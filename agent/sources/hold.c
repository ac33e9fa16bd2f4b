/* hold.c - the processes kpi-agent's programs stop at their exec or listen()
 * until they are traced: continued by the agent, its watchdog, its teardown,
 * or after it is gone by the next agent or `kpi-agent --release-held`.
 *
 * One owner per hold: an entry of the pinned `held` map (struct kpi_held,
 * bpf/kpi_event.h), written by the program that stops the process, ended by
 * whoever deletes it first (the delete is the claim); only then is the
 * process continued, through a pidfd, once its start time shows it is the
 * process that was stopped. Nothing else is ever continued: a process stopped
 * by anyone else has no entry.
 *
 * The guard: a small process forked at the watchdog's start that outlives
 * the agent.  It sleeps in poll() on a socket to the agent and a pidfd of it;
 * every 50 ms it ends the holds of agents that are gone (the same rule as
 * --release-held, from the kill on), and once the agent has exited (every
 * file of it closed: its programs detached) it does so a last time and exits.
 * An agent that ends by its own teardown says so on the socket first and
 * waits for it.  So a SIGKILL of the agent alone, the OOM killer or a crash
 * leaves nothing stopped; a kill of both (a unit's final SIGKILL of its
 * cgroup) is what ExecStopPost='s --release-held and the next agent cover. */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <linux/capability.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kpi.skel.h"
#include "bpf/kpi_event.h"
#include "hold.h"
#include "agent/host/host.h"
#include "agent/host/privdrop.h"
#include "agent/host/targets.h"

#define BPF_FS "/sys/fs/bpf"
#define BPF_FS_MAGIC_ 0xcafe4a11
#define HOLD_MAX_NS (HOLD_MAX_MS * 1000000ull)
#define SWEEP_MS 50             /* the watchdog's and the guard's period */
#define GUARD_NAME "kpi-hold-guard"
#define GONE "a kpi-agent that is gone"
#ifndef CAP_BPF
#define CAP_BPF 39
#endif

struct hold {
	struct kpi_bpf *skel;
	pid_t self;
	unsigned long long self_start;  /* this agent's starttime, clock ticks */
	pthread_t watchdog;
	bool watchdog_running;
	atomic_bool stop;               /* the watchdog's */
	atomic_bool ended;
	pid_t guard;                    /* 0: none */
	int guard_sock, guard_pidfd;
};

/* ---- one hold ------------------------------------------------------------------ */

/* The clock ticks /proc/PID/stat counts a start time in, from the kernel's ns. */
static unsigned long long ticks_of_ns(unsigned long long ns)
{
	static long hz;

	if (!hz)
		hz = sysconf(_SC_CLK_TCK) > 0 ? sysconf(_SC_CLK_TCK) : 100;
	return ns / (1000000000ull / (unsigned long long)hz);
}

/* The agent that holds v still runs: the same process (pid and start time),
 * not ending.  One that was killed is gone from the moment the signal is
 * sent, not once the kernel has torn its programs down (about a second of
 * link detaches here) and its parent reaped it. */
static bool holder_alive(const struct kpi_held *v)
{
	return v->holder_start && target_start_time((pid_t)v->holder) == v->holder_start &&
	       !target_ending((pid_t)v->holder);
}

/* Ends the hold of pid that v describes: the entry first (whoever deletes it
 * owns the hold), then SIGCONT through a pidfd, if the pid is still the
 * process that was stopped.  A SIGCONT also drops a SIGSTOP the kernel has
 * not delivered yet. True when it was continued. */
static bool release_entry(int fd, __u32 pid, const struct kpi_held *v)
{
	int pfd;
	bool ok = false;

	if (bpf_map_delete_elem(fd, &pid))
		return false;           /* another released it first */
	pfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
	if (pfd < 0)
		return false;           /* gone */
	if (target_start_time((pid_t)pid) == ticks_of_ns(v->start_ns)) {
		ok = syscall(SYS_pidfd_send_signal, pfd, SIGCONT, NULL, 0) == 0;
		if (!ok)
			fprintf(stderr, "kpi-agent: pid %u was stopped at its %s and cannot be "
				"continued (%s): run kill -CONT %u\n", pid,
				v->at_listen ? "listen()" : "exec", strerror(errno), pid);
	}
	close(pfd);
	return ok;
}

/* Walks the map (fd): release_entry for each entry keep() says to end, with
 * what to say of it when why is set.  The next key is taken before the
 * current one is deleted. */
static int release_where(int fd, bool (*keep)(void *ctx, __u32 pid, const struct kpi_held *v),
			 void *ctx, const char *why)
{
	__u32 key, next;
	struct kpi_held v;
	int n = 0, more = bpf_map_get_next_key(fd, NULL, &next) == 0;

	while (more) {
		key = next;
		more = bpf_map_get_next_key(fd, &key, &next) == 0;
		if (bpf_map_lookup_elem(fd, &key, &v) || keep(ctx, key, &v))
			continue;
		if (!release_entry(fd, key, &v))
			continue;
		n++;
		if (why) {
			char comm[64];
			target_comm((pid_t)key, comm, sizeof(comm));
			printf("continued pid %u (%s), held at its %s for %.1f s by %s\n", key, comm,
			       v.at_listen ? "listen()" : "exec", (double)(host_mono_ns() - v.since) / 1e9, why);
		}
	}
	return n;
}

/* ---- holds of agents that are gone ----------------------------------------------- */

static bool keep_live_holders(void *ctx, __u32 pid, const struct kpi_held *v)
{
	(void)ctx;
	(void)pid;
	return holder_alive(v);
}

int hold_release_orphans(char *err, size_t len)
{
	int fd = bpf_obj_get(KPI_HELD_PIN), n;

	if (fd < 0 && errno == ENOENT)
		return 0;               /* no agent has held a process since the last boot */
	if (fd < 0) {
		snprintf(err, len, "cannot open %s (%s): run as root (CAP_BPF and CAP_KILL)",
			 KPI_HELD_PIN, strerror(errno));
		return -1;
	}
	n = release_where(fd, keep_live_holders, NULL, GONE);
	close(fd);
	return n;
}

/* ---- this agent's holds ------------------------------------------------------------ */

/* bpffs at /sys/fs/bpf (mounted when it is not) and the directory of the pin. */
static int pin_dir(char *err, size_t len)
{
	struct statfs fs;

	if ((statfs(BPF_FS, &fs) || fs.f_type != BPF_FS_MAGIC_) &&
	    mount("bpf", BPF_FS, "bpf", 0, "mode=0700")) {
		snprintf(err, len, "bpffs is not mounted at %s and mounting it failed (%s): mount it "
			 "with: mount -t bpf bpf %s", BPF_FS, strerror(errno), BPF_FS);
		return -1;
	}
	if (mkdir(KPI_HELD_DIR, 0700) && errno != EEXIST) {
		snprintf(err, len, "cannot create %s: %s", KPI_HELD_DIR, strerror(errno));
		return -1;
	}
	return 0;
}

struct hold *hold_new(struct kpi_bpf *skel, bool enabled)
{
	struct hold *h = calloc(1, sizeof(*h));
	char err[256];

	if (!h)
		return NULL;
	h->skel = skel;
	h->self = getpid();
	h->self_start = target_start_time(h->self);
	skel->rodata->exec_hold = enabled;
	skel->rodata->holder_tgid = (__u32)h->self;
	skel->rodata->holder_start = h->self_start;
	if (!enabled)
		return h;
	if (pin_dir(err, sizeof(err)))
		fprintf(stderr, "kpi-agent: %s; a process held at its exec is then continued only "
			"by this agent (not after a crash, nor by kpi-agent --release-held)\n", err);
	else
		bpf_map__set_pin_path(skel->maps.held, KPI_HELD_PIN);
	return h;
}

static int held_fd(const struct hold *h)
{
	return h ? bpf_map__fd(h->skel->maps.held) : -1;
}

bool hold_is_held(const struct hold *h, pid_t pid)
{
	__u32 key = (__u32)pid;
	struct kpi_held v;

	return held_fd(h) >= 0 && bpf_map_lookup_elem(held_fd(h), &key, &v) == 0;
}

bool hold_release(struct hold *h, pid_t pid)
{
	__u32 key = (__u32)pid;
	struct kpi_held v;
	int fd = held_fd(h);

	if (fd < 0 || bpf_map_lookup_elem(fd, &key, &v) || v.holder != (__u32)h->self)
		return false;           /* not held, or another agent's hold */
	return release_entry(fd, key, &v);
}

struct sweep {
	const struct hold *h;
	uint64_t now;
};

/* The watchdog keeps the holds of other live agents, and this agent's
 * younger than HOLD_MAX_NS. */
static bool keep_young(void *ctx, __u32 pid, const struct kpi_held *v)
{
	const struct sweep *s = ctx;

	(void)pid;
	if (v->holder != (__u32)s->h->self)
		return holder_alive(v);
	return s->now - v->since < HOLD_MAX_NS;
}

static bool keep_others(void *ctx, __u32 pid, const struct kpi_held *v)
{
	(void)pid;
	return v->holder != (__u32)((const struct hold *)ctx)->self;
}

/* Every 50 ms. Its own thread, so that nothing the main loop waits on can
 * keep a daemon stopped; it touches only `held`, never a target's entry. */
static void *hold_watchdog(void *arg)
{
	struct hold *h = arg;
	sigset_t all;

	sigfillset(&all);       /* SIGINT and SIGTERM are the main loop's */
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	while (!atomic_load(&h->stop)) {
		usleep(SWEEP_MS * 1000);
		struct sweep s = { h, host_mono_ns() };
		release_where(held_fd(h), keep_young, &s, "this agent while it was busy: continued "
			      "before its probes were attached (its early requests are counted as "
			      "arriving before the attach)");
	}
	return NULL;
}

/* ---- the guard ------------------------------------------------------------------------ */

/* Closes every descriptor but stdin, stdout, stderr and keep[0..2] (sorted
 * here): the guard must not keep the agent's programs attached, its trace
 * open or its sockets alive. */
static void guard_close_others(int keep[3])
{
	unsigned int from = 3;

	for (int i = 0; i < 3; i++)
		for (int j = i + 1; j < 3; j++)
			if (keep[j] < keep[i]) {
				int t = keep[i];
				keep[i] = keep[j];
				keep[j] = t;
			}
	for (int i = 0; i < 3; i++) {
		if ((unsigned int)keep[i] > from)
			syscall(SYS_close_range, from, (unsigned int)keep[i] - 1, 0);
		if ((unsigned int)keep[i] + 1 > from)
			from = (unsigned int)keep[i] + 1;
	}
	syscall(SYS_close_range, from, ~0u, 0);
}

/* The guard process: never returns.  held: the map; sock: the agent's end
 * says "done" (a byte) or closes as the agent exits; agent: a pidfd that
 * turns readable once the agent has exited, every thread of it. */
static void guard_run(int held, int sock, int agent)
{
	static const int quiet[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2 };
	struct pollfd p[2] = { { .fd = sock, .events = POLLIN }, { .fd = agent, .events = POLLIN } };
	sigset_t none;
	char b;

	prctl(PR_SET_NAME, GUARD_NAME, 0, 0, 0);
	guard_close_others((int[3]){ held, sock, agent });
	/* a stop of the agent (Ctrl-C, a unit's SIGTERM to its cgroup) is the
	 * agent's to handle: the guard waits for what the agent does */
	for (size_t i = 0; i < sizeof(quiet) / sizeof(quiet[0]); i++)
		signal(quiet[i], SIG_IGN);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* sweeping the map and SIGCONT to another user's process: no more */
	if (privdrop_narrow((1ull << CAP_BPF) | (1ull << CAP_KILL)))
		fprintf(stderr, "kpi-agent: %s: capset: %s\n", GUARD_NAME, strerror(errno));
	for (;;) {
		int r = poll(p, 2, SWEEP_MS);
		if (r > 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
			if (read(sock, &b, 1) == 1)
				_exit(0);               /* the agent's teardown ended its holds */
			p[0].fd = -1;                   /* its files are closed: it is exiting */
		}
		if (r > 0 && (p[1].revents & POLLIN)) {
			/* its programs are detached: no hold comes after these two
			 * sweeps (the second for a program that was inside) */
			release_where(held, keep_live_holders, NULL, GONE);
			usleep(10000);
			release_where(held, keep_live_holders, NULL, GONE);
			fflush(stdout);
			_exit(0);
		}
		release_where(held, keep_live_holders, NULL, GONE);
		fflush(stdout);
	}
}

/* Forks the guard; before any thread of the agent (the child's copy of
 * the process is then consistent). */
static void guard_start(struct hold *h)
{
	int sv[2], self = (int)syscall(SYS_pidfd_open, getpid(), 0);
	pid_t pid;

	if (self < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		fprintf(stderr, "kpi-agent: cannot start the hold guard (%s): after a kill of the agent "
			"a held process waits for the next agent or kpi-agent --release-held\n",
			strerror(errno));
		if (self >= 0)
			close(self);
		return;
	}
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		close(sv[0]);
		guard_run(held_fd(h), sv[1], self);
	}
	close(sv[1]);
	close(self);
	if (pid < 0) {
		fprintf(stderr, "kpi-agent: cannot start the hold guard (fork: %s): after a kill of "
			"the agent a held process waits for the next agent or kpi-agent "
			"--release-held\n", strerror(errno));
		close(sv[0]);
		return;
	}
	h->guard = pid;
	h->guard_sock = sv[0];
	h->guard_pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
}

/* The agent's holds are ended: the guard is told and waited for (2 s at
 * most: one that someone stopped is left to end on its own). */
static void guard_end(struct hold *h)
{
	char done = 1;

	if (!h->guard)
		return;
	if (send(h->guard_sock, &done, 1, MSG_NOSIGNAL) == 1 && h->guard_pidfd >= 0)
		poll(&(struct pollfd){ .fd = h->guard_pidfd, .events = POLLIN }, 1, 2000);
	waitpid(h->guard, NULL, WNOHANG);
	close(h->guard_sock);
	if (h->guard_pidfd >= 0)
		close(h->guard_pidfd);
	h->guard = 0;
}

void hold_watchdog_start(struct hold *h)
{
	if (!h || !h->skel->rodata->exec_hold || h->watchdog_running)
		return;
	guard_start(h);
	if (pthread_create(&h->watchdog, NULL, hold_watchdog, h))
		fprintf(stderr, "kpi-agent: cannot start the exec-hold watchdog (%s): a process held at "
			"its exec waits for the main loop\n", strerror(errno));
	else
		h->watchdog_running = true;
}

void hold_end(struct hold *h)
{
	if (!h || atomic_exchange(&h->ended, true))
		return;
	if (h->watchdog_running) {
		atomic_store(&h->stop, true);
		pthread_join(h->watchdog, NULL);
		h->watchdog_running = false;
	}
	if (held_fd(h) >= 0 && h->skel->bss) {
		/* first no new hold, then every one of ours ends; a program that
		 * was past the check when the stop came has run its microseconds
		 * 10 ms later, and what it held goes in the second pass */
		h->skel->bss->hold_stop = true;
		release_where(held_fd(h), keep_others, h, NULL);
		usleep(10000);
		release_where(held_fd(h), keep_others, h, NULL);
	}
	guard_end(h);
}

void hold_free(struct hold *h)
{
	hold_end(h);
	free(h);
}
