/* baseline.c - kpi-bench --baseline OLD.json: this run against a stored one
 * (its --json), a table of what moved, and a verdict past stated thresholds
 * for CI pipelines that gate a model or prompt change. */
#include "bench.h"

#include <jansson.h>
#include <math.h>
#include "schema/pct.h"
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

/* One figure of one run: its value and 95% interval (NAN: none, from too
 * few values or from a baseline written before kpi-bench kept them), and
 * how many values it came from. */
struct fig {
	double v, lo, hi;
	double n;
};

/* A percentile; a share of the requests in percent (errors: higher is worse;
 * within the SLO: lower is); goodput, shown only: in a closed loop it is
 * the throughput, which the latencies and the SLO share already judge. */
enum row_kind { ROW_PCT, ROW_ERR_RATE, ROW_SLO_SHARE, ROW_GOODPUT };

struct row {
	const char *name;
	enum row_kind kind;
	int ci;                 /* ROW_PCT: which of report_ci_pct */
	struct fig old, new;
};

static struct fig old_pct(json_t *old, const char *metric, int ci)
{
	char key[16];
	json_t *m = json_object_get(old, metric), *iv;
	snprintf(key, sizeof(key), "p%.0f_ci", report_ci_pct[ci]);
	iv = json_is_object(m) ? json_object_get(m, key) : NULL;
	snprintf(key, sizeof(key), "p%.0f", report_ci_pct[ci]);
	struct fig f = { num(old, metric, key), NAN, NAN, num(old, metric, "n") };
	if (json_is_array(iv) && json_array_size(iv) == 2) {
		f.lo = json_number_value(json_array_get(iv, 0));
		f.hi = json_number_value(json_array_get(iv, 1));
	}
	return f;
}

static struct fig new_pct(const struct report_stat *st, int ci)
{
	const double v[N_CI] = { st->p50, st->p90, st->p99 };
	struct fig f = { st->n ? v[ci] : NAN, st->ci_lo[ci], st->ci_hi[ci], (double)st->n };
	return f;
}

/* Wilson's 95% score interval of k of n requests, in percent. */
static struct fig share(double k, double n)
{
	const double z = 1.96;
	struct fig f = { NAN, NAN, NAN, n };
	if (!(n > 0) || isnan(k))
		return f;
	double c = (k + z * z / 2) / (n + z * z), h = z * sqrt(k * (n - k) / n + z * z / 4) / (n + z * z);
	f.v = 100 * k / n;
	f.lo = 100 * fmax(0, c - h);
	f.hi = 100 * fmin(1, c + h);
	return f;
}

/* k requests within the SLO over t seconds */
static struct fig goodput(double k, double t)
{
	struct fig f = { t > 0 ? k / t : NAN, NAN, NAN, k };
	return f;
}

/* The fewest values that bound report_ci_pct[ci] at the gate's level. */
static int ci_needs(int ci)
{
	size_t lo, hi;
	int n = 1;
	while (pct_ci_ranks((size_t)n, report_ci_pct[ci], REPORT_CI_LEVEL, &lo, &hi))
		n++;
	return n;
}

static void fig_text(char *b, size_t len, const struct fig *f)
{
	if (isnan(f->lo))
		snprintf(b, len, "%.2f", f->v);
	else
		snprintf(b, len, "%.2f [%.2f, %.2f]", f->v, f->lo, f->hi);
}

/* The verdict on one row: 1 worse, -1 better, 0 neither; why in note. A
 * change counts only when it is larger than the allowance (--max-regress,
 * and 1 ms; 1 point of errors) and the two runs' 95% intervals lie apart:
 * larger than what sampling alone moves. */
static int judge(const struct config *cfg, const struct row *r, char *note, size_t len)
{
	int lower_is_worse = r->kind == ROW_SLO_SHARE;
	double worse = lower_is_worse ? r->old.v - r->new.v : r->new.v - r->old.v;
	note[0] = 0;
	if (r->kind == ROW_GOODPUT) {
		snprintf(note, len, "shown only: judged by the latencies and the share within the SLO");
		return 0;
	}
	if (r->kind == ROW_PCT && (isnan(r->new.lo) || (isnan(r->old.lo) && r->old.n > 0 &&
						      r->old.n < ci_needs(r->ci)))) {
		snprintf(note, len, "not gated: p%.0f needs %d values in each run (%.0f, %.0f)", report_ci_pct[r->ci],
			 ci_needs(r->ci), r->old.n, r->new.n);
		return 0;
	}
	int big = r->kind == ROW_ERR_RATE || r->kind == ROW_SLO_SHARE ? fabs(worse) > BASELINE_ERR_PP :
		  fabs(worse) > fabs(r->old.v) * cfg->max_regress_pct / 100.0 &&
		  (r->kind != ROW_PCT || fabs(worse) > BASELINE_FLOOR_MS);
	/* apart: this run's interval clear of the baseline's (or of its value,
	 * for a baseline written before the intervals were kept) */
	double old_hi = isnan(r->old.hi) ? r->old.v : r->old.hi, old_lo = isnan(r->old.lo) ? r->old.v : r->old.lo;
	int up = r->new.lo > old_hi, down = r->new.hi < old_lo;
	int apart = lower_is_worse ? (worse > 0 ? down : up) : (worse > 0 ? up : down);
	if (big && !apart)
		snprintf(note, len, "within the runs' noise");
	if (!big || !apart)
		return 0;
	return worse > 0 ? 1 : -1;
}

/* Several runs of the old build as one baseline: the median value, and an
 * interval from the lowest to the highest of their intervals (or values),
 * so that the spread between runs counts as noise as well as each run's
 * sampling; none when one run alone has none. */
static struct fig combine(const struct fig *f, int n)
{
	double v[BASELINE_MAX];
	struct fig c = { NAN, INFINITY, -INFINITY, INFINITY };
	int k = 0, all_ci = 1;
	for (int i = 0; i < n; i++) {
		if (isnan(f[i].v))
			continue;
		v[k++] = f[i].v;
		all_ci &= !isnan(f[i].lo);
		c.lo = fmin(c.lo, isnan(f[i].lo) ? f[i].v : f[i].lo);
		c.hi = fmax(c.hi, isnan(f[i].hi) ? f[i].v : f[i].hi);
		c.n = isnan(f[i].n) ? c.n : fmin(c.n, f[i].n);
	}
	if (!k)
		return (struct fig){ NAN, NAN, NAN, NAN };
	for (int i = 1; i < k; i++)     /* insertion sort: a handful of runs */
		for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
			double t = v[j];
			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	c.v = k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
	if (!all_ci && k < 2)
		c.lo = c.hi = NAN;
	if (isinf(c.n))
		c.n = NAN;
	return c;
}

int baseline_compare(const struct config *cfg, struct run *run, FILE *out)
{
	json_t *old[BASELINE_MAX] = { 0 };
	int nb = cfg->n_baselines, rc = -1;
	for (int i = 0; i < nb; i++) {
		json_error_t jerr;
		old[i] = json_load_file(cfg->baseline_path[i], 0, &jerr);
		if (!old[i] || !json_is_object(old[i])) {
			fprintf(stderr, "kpi-bench: --baseline %s: cannot read it as kpi-bench --json output (%s, line %d)\n",
				cfg->baseline_path[i], jerr.text, jerr.line);
			goto out;
		}
	}
	struct report_summary s;
	report_summarize(run, &s);
	static const struct {
		const char *name, *metric;
		enum row_kind kind;
		int ci, m;
	} spec[] = {
		{ "TTFT p50 ms", "ttft_ms", ROW_PCT, CI_P50, M_TTFT }, { "TTFT p90 ms", "ttft_ms", ROW_PCT, CI_P90, M_TTFT },
		{ "TTFT p99 ms", "ttft_ms", ROW_PCT, CI_P99, M_TTFT }, { "TPOT p50 ms", "tpot_ms", ROW_PCT, CI_P50, M_TPOT },
		{ "TPOT p99 ms", "tpot_ms", ROW_PCT, CI_P99, M_TPOT }, { "e2e p99 ms", "e2e_ms", ROW_PCT, CI_P99, M_E2E },
		{ "within SLO %", NULL, ROW_SLO_SHARE, 0, 0 }, { "goodput req/s", NULL, ROW_GOODPUT, 0, 0 },
		{ "error rate %", NULL, ROW_ERR_RATE, 0, 0 },
	};
	int failed = 0, compared = 0;
	fprintf(out, "\nagainst %d baseline run%s (", nb, nb > 1 ? "s" : "");
	for (int i = 0; i < nb; i++)
		fprintf(out, "%s%s", i ? ", " : "", cfg->baseline_path[i]);
	fprintf(out, "): a figure fails when it is worse by more than %.0f%% (and %.1f ms; %.1f points for the error "
		"rate and the share within the SLO) and its 95%% interval [lo, hi] lies clear of the baseline's%s\n", cfg->max_regress_pct,
		BASELINE_FLOOR_MS, BASELINE_ERR_PP, nb > 1 ? " (the runs' lowest to highest)" : "");
	fprintf(out, "%-15s %26s %26s %9s  %s\n", "", "baseline", "this run", "change", "verdict");
	for (size_t i = 0; i < sizeof(spec) / sizeof(spec[0]); i++) {
		struct fig runs[BASELINE_MAX];
		struct row r = { .name = spec[i].name, .kind = spec[i].kind, .ci = spec[i].ci };
		for (int b = 0; b < nb; b++)
			runs[b] = r.kind == ROW_PCT ? old_pct(old[b], spec[i].metric, r.ci) :
				  r.kind == ROW_GOODPUT ? goodput(num(old[b], "slo_met", NULL), num(old[b], "duration_s", NULL)) :
				  r.kind == ROW_SLO_SHARE ? share(num(old[b], "slo_met", NULL), num(old[b], "requests", "completed")) :
				  share(num(old[b], "requests", "failed"), num(old[b], "requests", "completed"));
		r.old = combine(runs, nb);
		int slo = report_have_slo(cfg);
		r.new = r.kind == ROW_PCT ? new_pct(&s.m[spec[i].m], r.ci) :
			r.kind == ROW_GOODPUT ? goodput(slo ? (double)s.slo_met : NAN, run->wall_s) :
			r.kind == ROW_SLO_SHARE ? share(slo ? (double)s.slo_met : NAN, (double)run->n_res) :
			share((double)s.failed, (double)run->n_res);
		if (isnan(r.old.v) || isnan(r.new.v))
			continue;       /* not measured in one of the runs (no --slo, no stream) */
		compared++;
		char a[64], b[64], change[24], note[96];
		int v = judge(cfg, &r, note, sizeof(note));
		failed += v > 0;
		double d = r.new.v - r.old.v;
		if (r.kind == ROW_ERR_RATE || r.kind == ROW_SLO_SHARE)
			snprintf(change, sizeof(change), "%+.2f pp", d);
		else
			snprintf(change, sizeof(change), "%+.1f%%", r.old.v != 0 ? 100.0 * d / r.old.v : 0);
		fig_text(a, sizeof(a), &r.old);
		fig_text(b, sizeof(b), &r.new);
		fprintf(out, "%-15s %26s %26s %9s  %s%s%s\n", r.name, a, b, change,
			v > 0 ? "WORSE" : v < 0 ? "better" : r.kind == ROW_GOODPUT ? "-" : "ok", note[0] && r.kind != ROW_GOODPUT ? ": " : "",
			note);
	}
	if (!compared) {
		fprintf(stderr, "kpi-bench: --baseline %s: no figure in common with this run (was it written by "
			"kpi-bench --json?)\n", cfg->baseline_path[0]);
		goto out;
	}
	fprintf(out, "%s\n", failed ? "regression: this run is worse than the baseline past the thresholds"
				    : "no regression past the thresholds");
	rc = failed ? 1 : 0;
out:
	for (int i = 0; i < nb; i++)
		json_decref(old[i]);
	return rc;
}
