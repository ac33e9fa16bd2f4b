/* baseline.c - kpi-bench --baseline OLD.json: this run against a stored one
 * (its --json), a table of what moved, and a verdict past stated thresholds
 * for CI pipelines that gate a model or prompt change. */
#include "bench.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* A percentile may grow by --max-regress percent and, so that a few tenths of
 * a millisecond on a fast path never fail a build, by at least this much. */
#define BASELINE_FLOOR_MS 1.0
/* The error rate may rise by this many percentage points. */
#define BASELINE_ERR_PP 1.0

static double num(json_t *o, const char *key, const char *sub)
{
	json_t *v = json_object_get(o, key);
	if (sub)
		v = json_is_object(v) ? json_object_get(v, sub) : NULL;
	return json_is_number(v) ? json_number_value(v) : NAN;
}

struct row {
	const char *name;
	double old, new;
	int higher_is_worse;
	int pp;                 /* a rate in percentage points, not a latency */
};

int baseline_compare(const struct config *cfg, struct run *run, FILE *out)
{
	json_error_t jerr;
	json_t *old = json_load_file(cfg->baseline_path, 0, &jerr);
	if (!old || !json_is_object(old)) {
		fprintf(stderr, "kpi-bench: --baseline %s: cannot read it as kpi-bench --json output (%s, line %d)\n",
			cfg->baseline_path, jerr.text, jerr.line);
		json_decref(old);
		return -1;
	}
	struct report_summary s;
	report_summarize(run, &s);
	double old_done = num(old, "requests", "completed"), old_failed = num(old, "requests", "failed");
	double new_done = (double)run->n_res;
	struct row rows[] = {
		{ "TTFT p50 ms", num(old, "ttft_ms", "p50"), s.m[M_TTFT].n ? s.m[M_TTFT].p50 : NAN, 1, 0 },
		{ "TTFT p90 ms", num(old, "ttft_ms", "p90"), s.m[M_TTFT].n ? s.m[M_TTFT].p90 : NAN, 1, 0 },
		{ "TTFT p99 ms", num(old, "ttft_ms", "p99"), s.m[M_TTFT].n ? s.m[M_TTFT].p99 : NAN, 1, 0 },
		{ "TPOT p50 ms", num(old, "tpot_ms", "p50"), s.m[M_TPOT].n ? s.m[M_TPOT].p50 : NAN, 1, 0 },
		{ "TPOT p99 ms", num(old, "tpot_ms", "p99"), s.m[M_TPOT].n ? s.m[M_TPOT].p99 : NAN, 1, 0 },
		{ "e2e p99 ms", num(old, "e2e_ms", "p99"), s.m[M_E2E].n ? s.m[M_E2E].p99 : NAN, 1, 0 },
		{ "goodput req/s", num(old, "goodput_rps", NULL), report_have_slo(cfg) ? s.goodput : NAN, 0, 0 },
		{ "error rate %", old_done > 0 ? 100.0 * old_failed / old_done : NAN,
		  new_done > 0 ? 100.0 * (double)s.failed / new_done : NAN, 1, 1 },
	};
	int failed = 0, compared = 0;
	fprintf(out, "\nagainst baseline %s (fails past +%.0f%% on a percentile and +%.1f ms, -%.0f%% goodput, "
		"+%.1f points of errors):\n", cfg->baseline_path, cfg->max_regress_pct, BASELINE_FLOOR_MS,
		cfg->max_regress_pct, BASELINE_ERR_PP);
	fprintf(out, "%-15s %10s %10s %9s  %s\n", "", "baseline", "this run", "change", "verdict");
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct row *r = &rows[i];
		if (isnan(r->old) || isnan(r->new))
			continue;       /* not measured in one of the runs (no --slo, no stream) */
		compared++;
		double d = r->new - r->old;
		double rel = r->old != 0 ? 100.0 * d / r->old : (d == 0 ? 0 : INFINITY);
		double worse = r->higher_is_worse ? d : -d;
		int bad;
		if (r->pp)
			bad = worse > BASELINE_ERR_PP;
		else if (r->higher_is_worse)
			bad = worse > BASELINE_FLOOR_MS && worse > r->old * cfg->max_regress_pct / 100.0;
		else
			bad = worse > r->old * cfg->max_regress_pct / 100.0;
		int better = worse < 0 && !r->pp && fabs(rel) > cfg->max_regress_pct;
		failed += bad;
		char change[24];
		if (r->pp)
			snprintf(change, sizeof(change), "%+.2f pp", d);
		else
			snprintf(change, sizeof(change), "%+.1f%%", rel);
		fprintf(out, "%-15s %10.2f %10.2f %9s  %s\n", r->name, r->old, r->new, change,
			bad ? "WORSE" : better ? "better" : "ok");
	}
	json_decref(old);
	if (!compared) {
		fprintf(stderr, "kpi-bench: --baseline %s: no figure in common with this run (was it written by "
			"kpi-bench --json?)\n", cfg->baseline_path);
		return -1;
	}
	fprintf(out, "%s\n", failed ? "regression: this run is worse than the baseline past the thresholds"
				    : "no regression past the thresholds");
	return failed ? 1 : 0;
}
