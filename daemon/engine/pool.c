/* pool.c - job dispatch through one atomic ticket (generation << 32 | next
 * task). Whoever is running claims tasks with a CAS, the caller included; the
 * caller waits only for tasks that were claimed, never for a worker that has
 * not woken up, so a descheduled worker on a busy machine costs nothing but
 * its share of the work. */
#include "daemon/engine/pool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SPIN_ITERS 2000 /* a few us to ~0.3 ms of polling (pause latency varies by CPU) before sleeping */

struct job {
	pool_fn fn;
	void *arg;
	int n_tasks;
};

struct pool {
	int n;
	pthread_t *tids; /* [n - 1] */
	/* job[g & 1] describes generation g; a reader validates what it read by
	 * the CAS on ticket, which fails once the generation has moved on */
	struct job job[2];
	_Alignas(64) _Atomic uint64_t ticket;
	_Alignas(64) atomic_int done;    /* tasks finished in the current generation */
	_Alignas(64) atomic_uint wake;   /* futex word, bumped on every publish */
	atomic_int sleepers;
	atomic_bool stop;
};

struct worker_arg {
	struct pool *p;
	int index;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* Claims and runs tasks of the current generation until none are left. */
static bool run_tasks(struct pool *p, int thread)
{
	bool ran = false;
	for (;;) {
		uint64_t t = atomic_load_explicit(&p->ticket, memory_order_acquire);
		const struct job *j = &p->job[(t >> 32) & 1];
		pool_fn fn = j->fn;
		void *arg = j->arg;
		int n = j->n_tasks;
		uint32_t i = (uint32_t)t;
		if ((int)i >= n)
			return ran;
		if (!atomic_compare_exchange_weak(&p->ticket, &t, t + 1))
			continue;
		fn(arg, (int)i, thread);
		atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
		ran = true;
	}
}

static void *worker_main(void *varg)
{
	struct worker_arg *wa = varg;
	struct pool *p = wa->p;
	int index = wa->index;
	free(wa);
	for (;;) {
		unsigned w = atomic_load(&p->wake);
		if (atomic_load(&p->stop))
			break;
		if (run_tasks(p, index))
			continue;
		int spins = 0;
		while (atomic_load_explicit(&p->wake, memory_order_acquire) == w) {
			if (++spins < SPIN_ITERS) {
				cpu_relax();
				continue;
			}
			atomic_fetch_add(&p->sleepers, 1);
			if (atomic_load(&p->wake) == w)
				syscall(SYS_futex, &p->wake, FUTEX_WAIT_PRIVATE, w, NULL, NULL, 0);
			atomic_fetch_sub(&p->sleepers, 1);
			spins = 0;
		}
	}
	return NULL;
}

static void wake_all(struct pool *p)
{
	atomic_fetch_add_explicit(&p->wake, 1, memory_order_release);
	if (atomic_load(&p->sleepers) > 0)
		syscall(SYS_futex, &p->wake, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

struct pool *pool_create(int n_threads)
{
	struct pool *p = calloc(1, sizeof(*p));
	p->n = n_threads < 1 ? 1 : n_threads;
	p->tids = calloc(p->n, sizeof(*p->tids));
	for (int i = 0; i < p->n - 1; i++) {
		struct worker_arg *wa = malloc(sizeof(*wa));
		wa->p = p;
		wa->index = i + 1;
		if (pthread_create(&p->tids[i], NULL, worker_main, wa) != 0) {
			free(wa);
			p->n = i + 1;
			pool_destroy(p);
			return NULL;
		}
	}
	return p;
}

void pool_destroy(struct pool *p)
{
	if (!p)
		return;
	atomic_store(&p->stop, true);
	wake_all(p);
	for (int i = 0; i < p->n - 1; i++)
		pthread_join(p->tids[i], NULL);
	free(p->tids);
	free(p);
}

int pool_threads(const struct pool *p)
{
	return p->n;
}

void pool_run(struct pool *p, pool_fn fn, void *arg, int n_tasks)
{
	if (p->n == 1 || n_tasks <= 1) {
		for (int t = 0; t < n_tasks; t++)
			fn(arg, t, 0);
		return;
	}
	uint64_t g = (atomic_load(&p->ticket) >> 32) + 1;
	p->job[g & 1] = (struct job){ fn, arg, n_tasks };
	atomic_store_explicit(&p->done, 0, memory_order_relaxed);
	atomic_store_explicit(&p->ticket, g << 32, memory_order_release);
	wake_all(p);
	run_tasks(p, 0);
	/* only claimed tasks are left: their threads are running them */
	int spins = 0;
	while (atomic_load_explicit(&p->done, memory_order_acquire) < n_tasks) {
		if (++spins < 4000)
			cpu_relax();
		else
			sched_yield();
	}
}
