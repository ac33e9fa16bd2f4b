/* sweep.c - kpi-bench --sweep: runs one load after another against a server
 * to find the highest it sustains within the SLO, confirms it and finds the
 * knee, then reports it as a table and JSON (html.c draws the page). */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/common/trace.h"
#include "tools/kpi-bench/bench.h"

/* The knee: the last load before the curve bends, the median e2e having
 * doubled over the lower loads' or the load not having been sustained
 * (steady.c); none when no load bent it. */
#define KNEE_E2E_FACTOR 2.0

struct sweeper {
	const struct config *base;
	volatile sig_atomic_t *stop;
	struct sweep sw;
	int runs;               /* measured runs so far: points, confirmations, repeats */
	bool unreachable;
};

/* ---- one point ------------------------------------------------------------- */

static void point_fill(struct sweep_point *pt, const struct run *run)
{
	struct report_summary s;
	report_summarize(run, &s);
	pt->requests = (long)run->n_res;
	pt->ok = s.ok;
	pt->failed = s.failed;
	pt->slo_met = s.slo_met;
	pt->wall_s = run->wall_s;
	pt->throughput_rps = s.req_s;
	pt->goodput_rps = s.goodput;
	pt->output_tok_s = s.out_tok_s;
	pt->in_flight_mean = s.in_flight_mean;
	const struct report_stat *t = &s.m[M_TTFT], *p = &s.m[M_TPOT], *e = &s.m[M_E2E];
	pt->ttft_p50 = t->n ? t->p50 : -1;
	pt->ttft_p99 = t->n ? t->p99 : -1;
	pt->tpot_p50 = p->n ? p->p50 : -1;
	pt->tpot_p99 = p->n ? p->p99 : -1;
	pt->e2e_p50 = e->n ? e->p50 : -1;
	pt->e2e_p99 = e->n ? e->p99 : -1;
	pt->t0 = run->t0;
	pt->t_end = run->t_end;
	double lo = -1, hi = -1;
	for (size_t i = 0; i < run->n_res; i++) {
		double t = run->res[i].t_sent;
		if (t >= 0 && (lo < 0 || t < lo))
			lo = t;
		if (t > hi)
			hi = t;
	}
	pt->span_s = hi > lo ? (hi - lo) / 1e3 : 0;
	/* what the arrivals came to (a few dozen Poisson draws stray from the
	 * asked rate by several percent) and what came back */
	pt->sent_rps = pt->steady.sent_rps;
	size_t o = 0;
	for (int i = 0; i < run->n_err_keys && o < sizeof(pt->errors); i++)
		o += (size_t)snprintf(pt->errors + o, sizeof(pt->errors) - o, "%s%s x%ld", i ? ", " : "",
				      run->err_key[i], run->err_count[i]);
}

/* A first load where nothing connected: the server is not there, and every
 * further load would say the same. */
static bool run_unreachable(const struct run *run, long ok)
{
	if (ok)
		return false;
	for (int i = 0; i < run->n_err_keys; i++)
		if (!strcmp(run->err_key[i], "connect")) {
			fprintf(stderr, "kpi-bench: no request reached the server: %s\n", run->first_err[i]);
			return true;
		}
	return false;
}

/* What a run is for, for the progress line. */
enum run_kind { RUN_POINT, RUN_CONFIRM, RUN_REPEAT };

/* Runs load into *pt: a point of the curve, or (for_s > 0) a confirmation
 * that sends for for_s seconds and at least min_n requests. Returns 0, 1
 * when interrupted (pt not filled), -1 when the run could not happen. */
static int measure(struct sweeper *w, double load, struct sweep_point *pt, enum run_kind kind, double for_s,
		   long min_n)
{
	struct config cfg = *w->base;
	if (w->sw.kind == SWEEP_RATE) {
		cfg.mode = MODE_RATE;
		cfg.rate = load;
	} else {
		cfg.mode = MODE_CONCURRENCY;
		cfg.concurrency = lround(load);
	}
	if (for_s > 0) {
		cfg.requests = 0;
		cfg.duration = for_s;
		cfg.min_requests = min_n;
	}
	/* a confirmation that can no longer meet the SLO has missed: its
	 * remaining seconds would only say so again */
	cfg.stop_when_missed = kind == RUN_CONFIRM;
	cfg.quiet = true;
	const char *unit = sweep_load_unit(&w->sw);
	if (!w->base->quiet) {
		if (kind == RUN_REPEAT)
			fprintf(stderr, "kpi-bench: knee repeat %d: %g %s ...\n", w->sw.n_repeats + 1, load, unit);
		else if (kind == RUN_CONFIRM)
			fprintf(stderr, "kpi-bench: confirming %g %s for %.1f s ...\n", load, unit, for_s);
		else
			fprintf(stderr, "kpi-bench: sweep point %zu: %g %s ...\n", w->sw.n + 1, load, unit);
	}
	struct run run = { 0 };
	int rc = client_measure(&cfg, &run, w->stop);
	if (!rc && run.interrupted)
		rc = 1;
	if (!rc) {
		report_apply_slo(&cfg, &run);
		memset(pt, 0, sizeof(*pt));
		pt->load = load;
		pt->order = w->runs++;
		steady_judge(&cfg, &run, &pt->steady);
		point_fill(pt, &run);
		pt->share = pt->requests ? (double)pt->slo_met / pt->requests : 0;
		/* a load the server did not sustain has not met the SLO, whatever
		 * share its requests reached before the queue caught up with them */
		pt->stopped_missed = run.stopped_missed;
		pt->missed = run.missed;
		pt->most_sent = run.most_sent;
		pt->meets = pt->requests > 0 && pt->share >= w->base->slo_share && pt->steady.sustained &&
			    !run.stopped_missed;
		if (run_unreachable(&run, pt->ok)) {
			w->unreachable = true;
			rc = -1;
		}
	}
	free(run.res);
	free(run.itl);
	return rc;
}

/* Adds a point, keeping them sorted by load; returns 0, 1 (interrupted) or -1. */
static int sweep_at(struct sweeper *w, double load, bool *meets)
{
	struct sweep *sw = &w->sw;
	if (sw->n == sw->cap) {
		sw->cap = sw->cap ? sw->cap * 2 : 16;
		struct sweep_point *np = realloc(sw->pts, sw->cap * sizeof(*np));
		if (!np) {
			fprintf(stderr, "kpi-bench: out of memory for sweep point %zu\n", sw->n + 1);
			return -1;
		}
		sw->pts = np;
	}
	struct sweep_point pt;
	int rc = measure(w, load, &pt, RUN_POINT, 0, 0);
	if (rc)
		return rc;
	size_t i = sw->n;
	while (i && sw->pts[i - 1].load > load) {
		sw->pts[i] = sw->pts[i - 1];
		i--;
	}
	sw->pts[i] = pt;
	sw->n++;
	*meets = pt.meets;
	return 0;
}

/* ---- the search ------------------------------------------------------------ */

/* Whether point i is past the knee, against the least median e2e of the
 * loads below it (one slow low point must not move the baseline). */
static bool bent(const struct sweep *sw, size_t i)
{
	const struct sweep_point *p = &sw->pts[i];
	double base = -1;
	for (size_t j = 0; j < i; j++)
		if (sw->pts[j].e2e_p50 > 0 && (base < 0 || sw->pts[j].e2e_p50 < base))
			base = sw->pts[j].e2e_p50;
	return base > 0 && (p->e2e_p50 < 0 || p->e2e_p50 > KNEE_E2E_FACTOR * base || !p->steady.sustained);
}

/* The first point that bends the curve and stays bent at the next load up
 * (a single slow point on a shared machine is noise, not a knee); 0: none. */
static size_t first_bend(const struct sweep *sw)
{
	for (size_t i = 1; i < sw->n; i++)
		if (bent(sw, i) && (i + 1 == sw->n || bent(sw, i + 1)))
			return i;
	return 0;
}

/* The ladder: --sweep-steps, or doubling from --sweep-start to --sweep-max
 * (which is run last when the doubling steps over it). An open-loop ladder
 * stops once a load missed the SLO and one has bent the curve (often the
 * same); a closed loop runs every level, the curve past saturation being
 * cheap to draw. first_bad/last_good: -1 none. */
static int ladder(struct sweeper *w, double *last_good, double *first_bad)
{
	const struct config *cfg = w->base;
	*last_good = *first_bad = -1;
	for (int k = 0;; k++) {
		double load;
		if (cfg->n_sweep_steps) {
			if (k == cfg->n_sweep_steps)
				return 0;
			load = cfg->sweep_steps[k];
		} else {
			load = cfg->sweep_start * pow(2, k);
			if (load > cfg->sweep_max * (1 + 1e-9)) {
				if (cfg->sweep_start * pow(2, k - 1) >= cfg->sweep_max * (1 - 1e-9))
					return 0;
				load = cfg->sweep_max;
			}
		}
		bool ok;
		int rc = sweep_at(w, load, &ok);
		if (rc)
			return rc;
		if (ok && *first_bad < 0)
			*last_good = load;
		if (!ok && *first_bad < 0)
			*first_bad = load;
		if (*first_bad > 0 && w->sw.kind == SWEEP_RATE && first_bend(&w->sw))
			return 0;
		if (load >= cfg->sweep_max * (1 - 1e-9) && !cfg->n_sweep_steps)
			return 0;
	}
}

/* Between the last good and the first bad load, halving the gap until
 * bad/good - 1 <= --sweep-precision (or, for concurrency, adjacent levels). */
static int bisect(struct sweeper *w, double good, double bad)
{
	bool conc = w->sw.kind == SWEEP_CONCURRENCY;
	while (bad / good - 1 > w->base->sweep_precision && !(conc && bad - good <= 1)) {
		double mid = conc ? floor((good + bad) / 2) : (good + bad) / 2;
		bool ok;
		int rc = sweep_at(w, mid, &ok);
		if (rc)
			return rc;
		if (ok)
			good = mid;
		else
			bad = mid;
	}
	return 0;
}

/* The answer: the highest load below the lowest one that missed the SLO
 * (unsustained loads miss it) and below any whose confirmation missed; the
 * knee: see KNEE_E2E_FACTOR. */
static void sweep_conclude(struct sweep *sw)
{
	sw->best = sw->knee = -1;
	sw->top_held = sw->n > 0 && !sw->cap_load;
	for (size_t i = 0; i < sw->n; i++) {
		if (!sw->pts[i].meets || (sw->cap_load && sw->pts[i].load >= sw->cap_load)) {
			sw->top_held = false;
			break;
		}
		sw->best = (int)i;
	}
	size_t b = first_bend(sw);
	if (b)
		sw->knee = (int)b - 1;
}

/* How long a confirmation of load sends: as long as the longest point did,
 * so that a queue the points were too short to see has as long to build, or
 * --confirm-duration when longer (the answer is claimed to hold that long);
 * and at least as many requests as a point at or below load sent (points
 * of --requests N). */
static double longest_span(const struct sweep *sw, double load, long *most)
{
	double s = 0;
	*most = 0;
	for (size_t i = 0; i < sw->n; i++) {
		s = fmax(s, sw->pts[i].span_s);
		if (sw->pts[i].load <= load && sw->pts[i].requests > *most)
			*most = sw->pts[i].requests;
	}
	return s;
}

/* Runs the answer again; while the run misses, the answer becomes a cap and
 * the search bisects below it, at most SWEEP_MAX_CONFIRMS times. */
static int confirm(struct sweeper *w)
{
	struct sweep *sw = &w->sw;
	while (sw->best >= 0 && sw->n_confirms < SWEEP_MAX_CONFIRMS) {
		double load = sw->pts[sw->best].load;
		long most;
		double for_s = fmax(longest_span(sw, load, &most), w->base->confirm_s);
		struct sweep_point *c = &sw->confirms[sw->n_confirms];
		int rc = measure(w, load, c, RUN_CONFIRM, fmax(for_s, 1e-3), most);
		if (rc)
			return rc;
		sw->n_confirms++;
		if (c->meets) {
			sw->confirmed = true;
			return 0;
		}
		sw->cap_load = load;
		sweep_conclude(sw);
		if (sw->best < 0)
			return 0;
		rc = bisect(w, sw->pts[sw->best].load, load);
		if (rc)
			return rc;
		sweep_conclude(sw);
	}
	return 0;
}

static int run_sweep(struct sweeper *w)
{
	double good, bad;
	int rc = ladder(w, &good, &bad);
	if (!rc && good > 0 && bad > 0)
		rc = bisect(w, good, bad);
	sweep_conclude(&w->sw);
	if (!rc)
		rc = confirm(w);
	for (long k = 0; !rc && w->sw.knee >= 0 && k < w->base->knee_repeats; k++) {
		rc = measure(w, w->sw.pts[w->sw.knee].load, &w->sw.repeats[k], RUN_REPEAT, 0, 0);
		if (!rc)
			w->sw.n_repeats++;
	}
	if (rc == 1)
		w->sw.interrupted = true;
	return rc < 0 ? -1 : 0;
}

/* ---- server-side phases from a kpi-agent trace ------------------------------- */

static long phases_of(struct trace *t, struct sweep_point *p)
{
	const struct trace_row *rows;
	/* the point's requests arrived between its start and its last answer;
	 * the warm-up before and the next point after fall outside */
	int n = trace_rows(t, (int64_t)(p->t0 * 1e9), (int64_t)(p->t_end * 1e9) + 1, &rows);
	if (n <= 0)
		return n;
	for (int ph = 0; ph < PH_N; ph++) {
		double sum = 0;
		for (int i = 0; i < n; i++)
			sum += rows[i].phase[ph];
		p->phase_ms[ph] = sum / n / 1e6;
	}
	p->phase_n = n;
	return n;
}

/* The agent writes a request's row once it ends, batched: give the last
 * point's rows a few seconds to land. */
static void sweep_phases(const struct config *cfg, struct sweep *sw)
{
	_Static_assert(PH_N == 5, "struct sweep_point holds five phases");
	char err[512];
	struct trace *t = trace_open(cfg->trace_db, err, sizeof(err));
	if (!t) {
		fprintf(stderr, "kpi-bench: --trace-db: %s; the page will have no phases\n", err);
		sw->trace_note = "the trace could not be opened";
		return;
	}
	const struct sweep_point *last = NULL;
	for (size_t i = 0; i < sw->n; i++)
		if (!last || sw->pts[i].order > last->order)
			last = &sw->pts[i];
	for (int tries = 0; last && tries < 50; tries++) {
		struct sweep_point probe = *last;
		if (phases_of(t, &probe) >= last->ok)
			break;
		usleep(100000);
	}
	long found = 0;
	for (size_t i = 0; i < sw->n; i++) {
		long n = phases_of(t, &sw->pts[i]);
		found += n > 0 ? n : 0;
	}
	if (!found) {
		fprintf(stderr, "kpi-bench: --trace-db %s holds no request of this sweep; was kpi-agent "
			"tracing this server (kpi-agent --pid PID) while it ran?\n", cfg->trace_db);
		sw->trace_note = "the trace holds no request of this sweep";
	}
	trace_close(t);
}

/* ---- text ---------------------------------------------------------------- */

static void ms_cell(FILE *f, double v)
{
	if (v >= 0)
		fprintf(f, " %9.2f", v);
	else
		fprintf(f, " %9s", "-");
}

static void text_row(FILE *f, const struct sweep_point *p, bool phases)
{
	fprintf(f, "%11g %6ld %6ld %5ld %8.2f %8.2f %6.1f%% %9.1f", p->load, p->requests, p->ok, p->failed,
		p->throughput_rps, p->goodput_rps, 100 * p->share, p->output_tok_s);
	ms_cell(f, p->ttft_p50);
	ms_cell(f, p->ttft_p99);
	ms_cell(f, p->tpot_p50);
	ms_cell(f, p->tpot_p99);
	fprintf(f, "  %-6s %-6s", p->steady.sustained ? "yes" : "NO", p->meets ? "met" : "MISSED");
	if (phases && p->phase_n)
		fprintf(f, "  %.2f/%.2f/%.2f/%.2f/%.2f", p->phase_ms[0], p->phase_ms[1], p->phase_ms[2],
			p->phase_ms[3], p->phase_ms[4]);
	if (!p->steady.sustained)
		fprintf(f, "  not sustained: %s", p->steady.why);
	if (p->errors[0])
		fprintf(f, "  errors: %s", p->errors);
	fputc('\n', f);
}

/* "99.6% of 2250 requests within the SLO over 10.0 s, sustained" */
static void confirm_text(char *out, size_t len, const struct sweep_point *c)
{
	if (c->stopped_missed) {
		snprintf(out, len, "stopped after %.1f s: %ld requests had missed the SLO, more than its share "
			 "allows of the %ld the run could send", c->wall_s, c->missed, c->most_sent);
		return;
	}
	snprintf(out, len, "%.1f%% of %ld requests within the SLO over %.1f s, %s%s", 100 * c->share, c->requests,
		 c->span_s,
		 c->steady.sustained ? "sustained" : "not sustained: ", c->steady.sustained ? "" : c->steady.why);
}

static double rel_diff(double a, double b)
{
	double m = (a + b) / 2;
	return m > 0 ? fabs(a - b) / m * 100 : 0;
}

static void text_answer(FILE *f, const struct config *cfg, const struct sweep *sw, const char *slo)
{
	const char *unit = sweep_load_unit(sw);
	char line[256];
	for (int k = 0; k < sw->n_confirms; k++) {
		const struct sweep_point *c = &sw->confirms[k];
		confirm_text(line, sizeof(line), c);
		fprintf(f, "confirming %g %s: %s: %s\n", c->load, unit, line,
			c->meets ? "met" : "MISSED, searching below it");
	}
	if (sw->best < 0 && sw->n_confirms) {
		fprintf(f, "max load meeting the SLO: none confirmed: every answer the points gave missed when run "
			"again as long as the longest point; the server's capacity is below %g %s or too noisy to hold: "
			"lower --sweep-start, lengthen --duration or loosen --slo\n", sw->cap_load, unit);
	} else if (sw->best < 0) {
		fprintf(f, "max load meeting the SLO: none; even %g %s missed it: lower --sweep-start or loosen --slo\n",
			sw->n ? sw->pts[0].load : cfg->sweep_start, unit);
	} else {
		const struct sweep_point *b = &sw->pts[sw->best];
		if (sw->confirmed)
			confirm_text(line, sizeof(line), &sw->confirms[sw->n_confirms - 1]);
		fprintf(f, "max load meeting the SLO: %g %s (%.0f%% of requests within %s, sustained); %s%s%s\n",
			b->load, unit, 100 * cfg->slo_share, slo, sw->confirmed ? "confirmed: " : "not confirmed",
			sw->confirmed ? line : (sw->n_confirms ? " (no confirmation left)" : ""),
			sw->top_held ? "; it held at the highest load tried: raise --sweep-max" : "");
		fprintf(f, "  there: %.2f req/s, %.1f output tok/s, TTFT p50 %.2f ms p99 %.2f ms, TPOT p50 %.2f ms p99 %.2f ms\n",
			b->throughput_rps, b->output_tok_s, b->ttft_p50, b->ttft_p99, b->tpot_p50, b->tpot_p99);
	}
	if (sw->knee < 0)
		fprintf(f, "knee: not reached: no load up to %g %s bent the curve\n", sw->n ? sw->pts[sw->n - 1].load : 0, unit);
	else
		fprintf(f, "knee: %g %s (the last load before the median e2e doubled over the lower loads' or the "
			"load was not sustained)\n", sw->pts[sw->knee].load, unit);
	if (sw->n_repeats == 2) {
		const struct sweep_point *a = &sw->repeats[0], *b = &sw->repeats[1];
		fprintf(f, "noise: the knee run twice more: %.2f and %.2f req/s (%.1f%% apart), SLO met by %.1f%% "
			"and %.1f%%, TTFT p99 %.2f and %.2f ms (%.1f%% apart)\n", a->throughput_rps, b->throughput_rps,
			rel_diff(a->throughput_rps, b->throughput_rps), 100 * a->share, 100 * b->share,
			a->ttft_p99, b->ttft_p99, rel_diff(a->ttft_p99, b->ttft_p99));
	}
}

static void sweep_text(FILE *f, const struct config *cfg, const struct sweep *sw)
{
	char slo[128];
	report_slo_text(cfg, slo, sizeof(slo));
	char per[80];
	if (cfg->requests && cfg->duration)
		snprintf(per, sizeof(per), "%ld requests or %g s", cfg->requests, cfg->duration);
	else if (cfg->requests)
		snprintf(per, sizeof(per), "%ld requests", cfg->requests);
	else
		snprintf(per, sizeof(per), "%g s (at least %ld requests)", cfg->duration, cfg->min_requests);
	fprintf(f, "kpi-bench sweep: %s, %s %s, prompt-len %s, max-tokens %s%s, SLO %s for %.0f%% of requests, "
		"%s per point after %ld warm-up, seed %llu\n", sw->kind == SWEEP_RATE ? "rate" : "concurrency",
		cfg->url, cfg->endpoint == EP_CHAT ? "chat" : "completions", cfg->prompt_len.spec,
		cfg->max_tokens.spec, cfg->ignore_eos ? ", ignore-eos" : "", slo, 100 * cfg->slo_share, per,
		cfg->warmup, cfg->seed);
	if (sw->interrupted)
		fprintf(f, "interrupted: the %zu points below finished; the one running was dropped\n", sw->n);
	bool phases = false;
	for (size_t i = 0; i < sw->n; i++)
		phases |= sw->pts[i].phase_n > 0;
	fprintf(f, "%11s %6s %6s %5s %8s %8s %7s %9s %9s %9s %9s %9s  %-6s %-6s%s\n", sweep_load_unit(sw), "reqs",
		"ok", "fail", "req/s", "good/s", "met", "out tok/s", "ttft p50", "ttft p99", "tpot p50", "tpot p99",
		"steady", "SLO", phases ? "  server ms: net-in/queue/prefill/decode/net-out" : "");
	for (size_t i = 0; i < sw->n; i++)
		text_row(f, &sw->pts[i], phases);
	text_answer(f, cfg, sw, slo);
}

/* ---- JSON ---------------------------------------------------------------- */

static json_t *ms_json(double v)
{
	return v >= 0 ? json_real(v) : json_null();
}

static json_t *point_json(const struct sweep *sw, const struct sweep_point *p)
{
	bool rate = sw->kind == SWEEP_RATE;
	json_t *o = json_object();
	/* a closed loop offers no rate; an open loop's concurrency is what
	 * it came to: requests in flight on average */
	json_object_set_new(o, "offered_rate", rate ? json_real(p->load) : json_null());
	json_object_set_new(o, "concurrency", rate ? json_real(p->in_flight_mean) : json_integer(lround(p->load)));
	json_object_set_new(o, "run", json_integer(p->order));
	json_object_set_new(o, "requests", json_integer(p->requests));
	json_object_set_new(o, "ok", json_integer(p->ok));
	json_object_set_new(o, "failed", json_integer(p->failed));
	json_object_set_new(o, "slo_met", json_integer(p->slo_met));
	json_object_set_new(o, "slo_share", json_real(p->share));
	json_object_set_new(o, "meets_slo", json_boolean(p->meets));
	json_object_set_new(o, "duration_s", json_real(p->wall_s));
	json_object_set_new(o, "sent_rps", json_real(p->sent_rps));
	json_object_set_new(o, "sending_s", json_real(p->span_s));
	json_object_set_new(o, "achieved_rps", json_real(p->steady.achieved_rps));
	json_object_set_new(o, "sustained", json_boolean(p->steady.sustained));
	json_object_set_new(o, "not_sustained", p->steady.sustained ? json_null() : json_string(p->steady.why));
	json_object_set_new(o, "ttft_p50_first_third_ms", ms_json(p->steady.ttft_first));
	json_object_set_new(o, "ttft_p50_last_third_ms", ms_json(p->steady.ttft_last));
	json_object_set_new(o, "e2e_p50_first_third_ms", ms_json(p->steady.e2e_first));
	json_object_set_new(o, "e2e_p50_last_third_ms", ms_json(p->steady.e2e_last));
	json_object_set_new(o, "throughput_rps", json_real(p->throughput_rps));
	json_object_set_new(o, "goodput_rps", json_real(p->goodput_rps));
	json_object_set_new(o, "output_tok_s", json_real(p->output_tok_s));
	json_object_set_new(o, "ttft_p50_ms", ms_json(p->ttft_p50));
	json_object_set_new(o, "ttft_p99_ms", ms_json(p->ttft_p99));
	json_object_set_new(o, "tpot_p50_ms", ms_json(p->tpot_p50));
	json_object_set_new(o, "tpot_p99_ms", ms_json(p->tpot_p99));
	json_object_set_new(o, "e2e_p50_ms", ms_json(p->e2e_p50));
	json_object_set_new(o, "e2e_p99_ms", ms_json(p->e2e_p99));
	json_object_set_new(o, "errors", json_string(p->errors));
	json_object_set_new(o, "stopped_missed", json_boolean(p->stopped_missed));
	json_object_set_new(o, "missed", p->most_sent > 0 ? json_integer(p->missed) : json_null());
	json_object_set_new(o, "most_sent", p->most_sent > 0 ? json_integer(p->most_sent) : json_null());
	if (p->phase_n)
		json_object_set_new(o, "server_phases_ms", json_pack("{s:I, s:f, s:f, s:f, s:f, s:f}",
			"requests", (json_int_t)p->phase_n, "net_in", p->phase_ms[0], "queue", p->phase_ms[1],
			"prefill", p->phase_ms[2], "decode", p->phase_ms[3], "net_out", p->phase_ms[4]));
	else
		json_object_set_new(o, "server_phases_ms", json_null());
	return o;
}

static json_t *settings_json(const struct config *cfg)
{
	return json_pack("{s:s, s:s, s:s, s:b, s:I, s:o, s:o, s:I, s:f, s:f, s:o, s:o, s:o}",
		"url", cfg->url, "prompt_len", cfg->prompt_len.spec, "max_tokens", cfg->max_tokens.spec,
		"ignore_eos", cfg->ignore_eos, "seed", (json_int_t)cfg->seed,
		"requests_per_point", cfg->requests ? json_integer(cfg->requests) : json_null(),
		"min_requests_per_point", cfg->min_requests ? json_integer(cfg->min_requests) : json_null(),
		"warmup", (json_int_t)cfg->warmup, "burstiness", cfg->burstiness, "slo_share", cfg->slo_share,
		"duration_per_point_s", cfg->duration > 0 ? json_real(cfg->duration) : json_null(),
		"confirm_duration_s", cfg->confirm_s > 0 ? json_real(cfg->confirm_s) : json_null(),
		"slo", json_pack("{s:o, s:o, s:o}", "ttft_ms", ms_json(cfg->slo_ttft > 0 ? cfg->slo_ttft : -1),
				 "tpot_ms", ms_json(cfg->slo_tpot > 0 ? cfg->slo_tpot : -1),
				 "e2e_ms", ms_json(cfg->slo_e2e > 0 ? cfg->slo_e2e : -1)));
}

static void answer_json(json_t *root, const struct sweep *sw)
{
	bool rate = sw->kind == SWEEP_RATE;
	const struct sweep_point *b = sw->best >= 0 ? &sw->pts[sw->best] : NULL;
	/* a closed loop's max rate is what it served at its best level */
	json_object_set_new(root, "max_slo_rate", !b ? json_null() : json_real(rate ? b->load : b->throughput_rps));
	json_object_set_new(root, "max_slo_concurrency", b && !rate ? json_integer(lround(b->load)) : json_null());
	json_object_set_new(root, "at_max_slo", b ? point_json(sw, b) : json_null());
	json_object_set_new(root, "slo_held_at_highest_load", json_boolean(sw->top_held));
	json_object_set_new(root, "max_slo_confirmed", json_boolean(sw->confirmed));
	json_t *conf = json_array();
	for (int i = 0; i < sw->n_confirms; i++)
		json_array_append_new(conf, point_json(sw, &sw->confirms[i]));
	json_object_set_new(root, "confirmations", conf);
	json_object_set_new(root, "confirm_cap", sw->cap_load ? json_real(sw->cap_load) : json_null());
	json_object_set_new(root, "knee", sw->knee >= 0 ? point_json(sw, &sw->pts[sw->knee]) : json_null());
	json_t *reps = json_array();
	for (int i = 0; i < sw->n_repeats; i++)
		json_array_append_new(reps, point_json(sw, &sw->repeats[i]));
	json_object_set_new(root, "knee_repeats", reps);
	if (sw->n_repeats == 2) {
		const struct sweep_point *a = &sw->repeats[0], *c = &sw->repeats[1];
		json_object_set_new(root, "knee_noise", json_pack("{s:f, s:f, s:f}",
			"throughput_diff_pct", rel_diff(a->throughput_rps, c->throughput_rps),
			"slo_share_diff", fabs(a->share - c->share),
			"ttft_p99_diff_pct", rel_diff(a->ttft_p99, c->ttft_p99)));
	} else {
		json_object_set_new(root, "knee_noise", json_null());
	}
}

static int sweep_json(const char *path, const struct config *cfg, const struct sweep *sw)
{
	json_t *root = json_object();
	json_object_set_new(root, "sweep", json_string(sw->kind == SWEEP_RATE ? "rate" : "concurrency"));
	json_object_set_new(root, "settings", settings_json(cfg));
	json_object_set_new(root, "interrupted", json_boolean(sw->interrupted));
	json_t *pts = json_array();
	for (size_t i = 0; i < sw->n; i++)
		json_array_append_new(pts, point_json(sw, &sw->pts[i]));
	json_object_set_new(root, "points", pts);
	answer_json(root, sw);
	return report_dump_json(root, path);
}

/* ---- the whole sweep --------------------------------------------------------- */

int sweep_main(const struct config *cfg, volatile sig_atomic_t *stop)
{
	if (cfg->trace_db) {
		char err[512];
		struct trace *t = trace_open(cfg->trace_db, err, sizeof(err));
		if (!t) {
			fprintf(stderr, "kpi-bench: --trace-db: %s\n", err);
			return 1;
		}
		trace_close(t);
	}
	struct sweeper w = { .base = cfg, .stop = stop, .sw = { .kind = cfg->sweep, .best = -1, .knee = -1 } };
	int failed = run_sweep(&w);
	if (cfg->trace_db && w.sw.n)
		sweep_phases(cfg, &w.sw);
	bool json_stdout = cfg->json_path && !strcmp(cfg->json_path, "-");
	sweep_text(json_stdout ? stderr : stdout, cfg, &w.sw);
	int rc = 0;
	if (cfg->json_path && sweep_json(cfg->json_path, cfg, &w.sw))
		rc = 1;
	if (cfg->html_path && html_write(cfg->html_path, cfg, &w.sw))
		rc = 1;
	long ok = 0;
	for (size_t i = 0; i < w.sw.n; i++)
		ok += w.sw.pts[i].ok;
	free(w.sw.pts);
	if (w.sw.interrupted)
		return 130;
	if (failed || !ok) {
		if (!w.unreachable && !failed)
			fprintf(stderr, "kpi-bench: no request of the sweep succeeded; see the errors above\n");
		return 1;
	}
	return rc;
}
