/* step_seqs.h - a batch step's sequence list (kpi:step__seqs) put back together
 * from its ring-buffer chunks; the GPU and the cost attribution both split by it. */
#ifndef KPI_STEP_SEQS_H
#define KPI_STEP_SEQS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "abi/kpi_step_seq.h"

struct step_seqs {
	struct kpi_step_seq *e;     /* [n] */
	uint32_t n, got;            /* entries in the step, entries received */
};

/* One chunk: entries [first, first + k) of a list of n_total (first == 0, or
 * another length, starts it over). Returns true when it completed the list. */
static inline bool step_seqs_add(struct step_seqs *l, uint32_t n_total, uint32_t first,
				 const struct kpi_step_seq *e, uint32_t k)
{
	if (first == 0 || l->n != n_total) {
		l->e = realloc(l->e, (n_total ? n_total : 1) * sizeof(*l->e));
		if (!l->e)
			abort();
		l->n = n_total;
		l->got = 0;
	}
	if (first >= n_total)
		return false;
	if (k > n_total - first)
		k = n_total - first;
	memcpy(l->e + first, e, k * sizeof(*e));
	l->got += k;
	return l->got >= l->n && l->got - k < l->n;
}

static inline bool step_seqs_complete(const struct step_seqs *l)
{
	return l->n && l->got >= l->n;
}

#endif
