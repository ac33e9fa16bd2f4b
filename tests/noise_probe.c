/* noise_probe.c - measures when this machine stops running its programs: the
 * noise floor under the tests that compare a time the agent took with a
 * packet capture's (tests/lib/noisetest.py).
 *
 * One SCHED_FIFO thread per online CPU, pinned there, wakes every --period-us
 * on an absolute CLOCK_MONOTONIC deadline. A wake-up later than --min-us past
 * its deadline is a stall of that CPU: nothing of the guest ran there (the
 * hypervisor took the virtual CPU, or the kernel ran work nothing preempts),
 * and a thread of a traced program on it waited as long. At SIGTERM or
 * SIGINT it prints every stall, "cpu start_ns end_ns" in CLOCK_REALTIME (the
 * clock of a capture), and exits 0. "ready" on stdout says the threads run.
 *
 * usage: noise-probe [--period-us N] [--min-us N] [--priority N] */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_STALLS (1 << 16)   /* per CPU: at 1 kHz of stalls, a minute */

struct cpu_probe {
	pthread_t thread;
	int cpu;
	size_t n;
	uint64_t start[MAX_STALLS], end[MAX_STALLS];
};

static long period_ns = 200000, min_ns = 50000;
static int priority = 50;
static volatile sig_atomic_t stop;

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *probe_run(void *arg)
{
	struct cpu_probe *p = arg;
	cpu_set_t set;
	struct sched_param sp = { .sched_priority = priority };

	CPU_ZERO(&set);
	CPU_SET(p->cpu, &set);
	if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) ||
	    pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp)) {
		fprintf(stderr, "noise-probe: cpu %d: cannot pin a SCHED_FIFO thread there (run as root)\n", p->cpu);
		exit(2);
	}
	uint64_t next = mono_ns() + (uint64_t)period_ns;
	while (!stop) {
		struct timespec ts = { .tv_sec = (time_t)(next / 1000000000ull),
				       .tv_nsec = (long)(next % 1000000000ull) };
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR && !stop)
			;
		uint64_t now = mono_ns();
		if (now > next + (uint64_t)min_ns && p->n < MAX_STALLS) {
			p->start[p->n] = next;
			p->end[p->n] = now;
			p->n++;
		}
		next += (uint64_t)period_ns;
		if (next <= now)   /* behind by a period or more: start over from now */
			next = now + (uint64_t)period_ns;
	}
	return NULL;
}

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static long arg_long(const char *flag, const char *v, long lo, long hi)
{
	char *end;
	long x = v ? strtol(v, &end, 10) : 0;
	if (!v || *end || x < lo || x > hi) {
		fprintf(stderr, "noise-probe: %s wants a whole number from %ld to %ld\n", flag, lo, hi);
		exit(2);
	}
	return x;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--period-us"))
			period_ns = arg_long(argv[i], argv[i + 1], 20, 100000) * 1000, i++;
		else if (!strcmp(argv[i], "--min-us"))
			min_ns = arg_long(argv[i], argv[i + 1], 1, 1000000) * 1000, i++;
		else if (!strcmp(argv[i], "--priority"))
			priority = (int)arg_long(argv[i], argv[i + 1], 1, 99), i++;
		else {
			fprintf(stderr, "usage: noise-probe [--period-us N] [--min-us N] [--priority N]\n");
			return 2;
		}
	}
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	/* CLOCK_REALTIME - CLOCK_MONOTONIC from the tightest of a few reads */
	int64_t off = 0, best = INT64_MAX;
	for (int i = 0; i < 20; i++) {
		struct timespec a, r, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		clock_gettime(CLOCK_REALTIME, &r);
		clock_gettime(CLOCK_MONOTONIC, &b);
		int64_t ma = a.tv_sec * 1000000000ll + a.tv_nsec, mb = b.tv_sec * 1000000000ll + b.tv_nsec;
		if (mb - ma < best) {
			best = mb - ma;
			off = r.tv_sec * 1000000000ll + r.tv_nsec - (ma + mb) / 2;
		}
	}

	int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
	struct cpu_probe *probes = calloc((size_t)ncpu, sizeof(*probes));
	if (!probes) {
		fprintf(stderr, "noise-probe: out of memory\n");
		return 1;
	}
	for (int c = 0; c < ncpu; c++) {
		probes[c].cpu = c;
		if (pthread_create(&probes[c].thread, NULL, probe_run, &probes[c])) {
			fprintf(stderr, "noise-probe: pthread_create: %s\n", strerror(errno));
			return 1;
		}
	}
	printf("ready\n");
	fflush(stdout);
	sigset_t none;
	sigemptyset(&none);
	while (!stop)
		sigsuspend(&none);
	for (int c = 0; c < ncpu; c++)
		pthread_join(probes[c].thread, NULL);
	for (int c = 0; c < ncpu; c++)
		for (size_t i = 0; i < probes[c].n; i++)
			printf("%d %lld %lld\n", c, (long long)((int64_t)probes[c].start[i] + off),
			       (long long)((int64_t)probes[c].end[i] + off));
	return 0;
}
