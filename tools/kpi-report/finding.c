/* finding.c - kpi-report's list of findings, which every analysis (analyze.c,
 * agents.c) adds to and the renderings read strongest first. */
#include <stdlib.h>
#include <string.h>
#include "tools/kpi-report/report.h"

struct rp_finding *rp_add_finding(struct report *r, const char *cause, const char *phase, double score, int order)
{
	if (r->nf >= RP_MAX_FINDINGS) return NULL;
	struct rp_finding *f = &r->f[r->nf++];
	memset(f, 0, sizeof(*f));
	f->cause = cause;
	f->phase = phase;
	f->score = score;
	f->order = order;
	return f;
}

static int cmp_finding(const void *a, const void *b)
{
	const struct rp_finding *x = a, *y = b;
	if (x->score != y->score) return x->score < y->score ? 1 : -1;
	return x->order - y->order;
}

void rp_sort_findings(struct report *r)
{
	qsort(r->f, (size_t)r->nf, sizeof(r->f[0]), cmp_finding);
}
