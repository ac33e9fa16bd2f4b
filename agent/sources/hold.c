/* hold.c - the processes kpi-agent's programs stop at their exec or listen()
 * until they are traced: continued by the agent, its watchdog, its teardown,
 * or after it is gone by the next agent or `kpi-agent --release-held`.
 *
 * One owner per hold: an entry of the pinned `held` map (struct kpi_held,
 * bpf/kpi_event.h), written by the program that stops the process, ended by
 * whoever deletes it first (the delete is the claim); only then is the
 * process continued, through a pidfd, once its start time shows it is the
 * process that was stopped. Nothing else is ever continued: a process stopped
 * by anyone else has no entry. */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "kpi.skel.h"
#include "bpf/kpi_event.h"
#include "hold.h"
#include "agent/host/host.h"
#include "agent/host/targets.h"

#define BPF_FS "/sys/fs/bpf"
#define BPF_FS_MAGIC_ 0xcafe4a11
#define HOLD_MAX_NS (HOLD_MAX_MS * 1000000ull)

struct hold {
	struct kpi_bpf *skel;
	pid_t self;
	unsigned long long self_start;  /* this agent's starttime, clock ticks */
	pthread_t watchdog;
	bool watchdog_running;
	atomic_bool stop;               /* the watchdog's */
	atomic_bool ended;
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
	n = release_where(fd, keep_live_holders, NULL, "a kpi-agent that is gone");
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
		usleep(50000);
		struct sweep s = { h, host_mono_ns() };
		release_where(held_fd(h), keep_young, &s, "this agent while it was busy: continued "
			      "before its probes were attached (its early requests are counted as "
			      "arriving before the attach)");
	}
	return NULL;
}

void hold_watchdog_start(struct hold *h)
{
	if (!h || !h->skel->rodata->exec_hold || h->watchdog_running)
		return;
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
	if (held_fd(h) < 0 || !h->skel->bss)
		return;                 /* not loaded: nothing was held */
	/* first no new hold, then every one of ours ends; a program that was
	 * past the check when the stop came has run its microseconds 10 ms
	 * later, and what it held goes in the second pass */
	h->skel->bss->hold_stop = true;
	release_where(held_fd(h), keep_others, h, NULL);
	usleep(10000);
	release_where(held_fd(h), keep_others, h, NULL);
}

void hold_free(struct hold *h)
{
	hold_end(h);
	free(h);
}
