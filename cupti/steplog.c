/* steplog.c - correlation id -> host step (see steplog.h). Written once per step
 * change from CUPTI's launch callback, read once per record on CUPTI's buffer thread. */
#include "cupti/steplog.h"

void kpi_steplog_init(struct kpi_steplog *l)
{
	pthread_mutex_init(&l->mu, NULL);
	l->head = l->n = 0;
	l->last_step = 0;
	l->have_last = 0;
}

static struct kpi_steplog_ent *ent(struct kpi_steplog *l, int i)
{
	return &l->e[(l->head + i) % KPI_STEPLOG_CAP];
}

void kpi_steplog_note(struct kpi_steplog *l, uint32_t corr, uint64_t step)
{
	pthread_mutex_lock(&l->mu);
	if (l->n && ent(l, l->n - 1)->step == step) {
		pthread_mutex_unlock(&l->mu);
		return;
	}
	if (l->n == KPI_STEPLOG_CAP) {
		l->head = (l->head + 1) % KPI_STEPLOG_CAP;
		l->n--;
	}
	int i = l->n++;
	/* keep corr increasing: shift newer entries up (rare: concurrent launchers) */
	while (i > 0 && ent(l, i - 1)->corr > corr) {
		*ent(l, i) = *ent(l, i - 1);
		i--;
	}
	if (i > 0 && ent(l, i - 1)->corr == corr) {
		/* same id noted twice (runtime and driver callback): the later note wins */
		ent(l, i - 1)->step = step;
		for (int j = i; j < l->n - 1; j++)
			*ent(l, j) = *ent(l, j + 1);
		l->n--;
	} else {
		ent(l, i)->corr = corr;
		ent(l, i)->step = step;
	}
	__atomic_store_n(&l->last_step, ent(l, l->n - 1)->step, __ATOMIC_RELAXED);
	__atomic_store_n(&l->have_last, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&l->mu);
}

int kpi_steplog_lookup(struct kpi_steplog *l, uint32_t corr, uint64_t *step)
{
	int found = 0;

	pthread_mutex_lock(&l->mu);
	if (l->n && ent(l, 0)->corr <= corr) {
		int lo = 0, hi = l->n; /* last entry with corr <= id: in [lo, hi) */
		while (hi - lo > 1) {
			int mid = (lo + hi) / 2;
			if (ent(l, mid)->corr <= corr)
				lo = mid;
			else
				hi = mid;
		}
		*step = ent(l, lo)->step;
		found = 1;
	}
	pthread_mutex_unlock(&l->mu);
	return found;
}
