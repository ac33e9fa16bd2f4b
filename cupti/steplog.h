/* steplog.h - which host batch step each GPU launch belongs to. CUPTI hands out
 * correlation ids in launch order, so a step is the range of ids from its first
 * launch to the next step's: the log keeps one (first id, step) per change. */
#ifndef KPI_CUPTI_STEPLOG_H
#define KPI_CUPTI_STEPLOG_H

#include <pthread.h>
#include <stdint.h>

#define KPI_STEPLOG_CAP 8192 /* step changes kept: far more than are in flight */

struct kpi_steplog_ent {
	uint32_t corr;  /* first correlation id of the run */
	uint64_t step;
};

struct kpi_steplog {
	pthread_mutex_t mu;
	struct kpi_steplog_ent e[KPI_STEPLOG_CAP]; /* ring, increasing corr */
	int head, n;
	uint64_t last_step; /* step of the newest entry, read without the lock */
	int have_last;
};

void kpi_steplog_init(struct kpi_steplog *l);

/* Launch-path fast check: true when `step` differs from the newest entry, i.e.
 * kpi_steplog_note must run. A relaxed read; a race costs one extra note. */
static inline int kpi_steplog_changed(const struct kpi_steplog *l, uint64_t step)
{
	return !__atomic_load_n(&l->have_last, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&l->last_step, __ATOMIC_RELAXED) != step;
}

/* Records that launches from correlation id corr on belong to step. An id
 * older than the newest entry (a racing thread) is inserted in order. */
void kpi_steplog_note(struct kpi_steplog *l, uint32_t corr, uint64_t step);

/* The step of correlation id corr: returns 1 and sets *step, or 0 when corr
 * is older than every entry kept (before the first note, or overwritten). */
int kpi_steplog_lookup(struct kpi_steplog *l, uint32_t corr, uint64_t *step);

#endif
