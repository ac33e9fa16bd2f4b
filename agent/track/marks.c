/* marks.c - marks in order, phases between them and inter-token latency: the
 * arithmetic the assembler, the HTTP path and the llama.cpp join share. */
#include <math.h>
#include <stdlib.h>
#include "marks.h"
#include "schema/pct.h"

bool marks_clamp(uint64_t *m, int n)
{
	bool clamped = false;

	for (int i = 1; i < n; i++) {
		uint64_t prev = 0;
		for (int j = i - 1; j >= 0 && !prev; j--)
			prev = m[j];
		if (m[i] && m[i] < prev) {
			m[i] = prev;
			clamped = true;
		}
	}
	return clamped;
}

void marks_phases(const uint64_t *m, int n, int64_t *const *ph)
{
	for (int i = 0; i < n - 1; i++)
		*ph[i] = KPI_NULL;
	for (int i = 0; i < n - 1; i++) {
		if (i > 0 && !m[i])
			continue;
		int j = i + 1;
		while (j < n - 1 && !m[j])
			j++;
		*ph[i] = (int64_t)(m[j] - m[i]);
	}
}

/* p50 and p99 of the gaps by the trace's one percentile definition
 * (schema/pct.h), and the largest gap. */
void marks_itl(struct kpi_request_record *rec, const uint64_t *tok, size_t n_tok)
{
	size_t n = n_tok - 1;
	/* ns gaps are exact in a double up to 104 days */
	double *gap = malloc(n * sizeof(double));

	if (!gap)
		abort();
	rec->itl_max = 0;
	for (size_t i = 0; i < n; i++) {
		gap[i] = (double)(tok[i + 1] - tok[i]);
		if ((int64_t)gap[i] > rec->itl_max)
			rec->itl_max = (int64_t)gap[i];
	}
	rec->itl_p50 = llround(pct_select_f64(gap, n, 50));
	rec->itl_p99 = llround(pct_select_f64(gap, n, 99));
	free(gap);
}
