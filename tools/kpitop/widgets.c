/* widgets.c - kpitop's screen, htop-style: each widget is a fill function
 * (values from struct kt_data) and a draw function (cells on the canvas). */
#include "tools/kpitop/kpitop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const kt_sort_name[KS_N] = { "arrival", "age", "TTFT", "e2e", "TPOT" };
static const char phase_glyph[PH_N] = { 'N', 'Q', 'P', 'D', 'O' };

static char *dur(char *b, double ns) { return trace_fmt_dur(b, 16, ns); }

/* A stacked bar of phases over len columns, by largest remainder so the
 * columns add up exactly and every present phase is visible. */
static void phase_bar(struct canvas *c, int y, int x, int len, const int64_t *ph)
{
	double tot = 0;
	for (int p = 0; p < PH_N; p++) tot += ph[p] > 0 ? (double)ph[p] : 0;
	if (tot <= 0 || len <= 0) {
		canvas_text(c, y, x, len, CC_DIM, 0, "-");
		return;
	}
	int cols[PH_N], used = 0;
	double rem[PH_N];
	for (int p = 0; p < PH_N; p++) {
		double exact = ph[p] > 0 ? ph[p] / tot * len : 0;
		cols[p] = (int)exact;
		rem[p] = exact - cols[p];
		used += cols[p];
	}
	while (used < len) {
		int best = 0;
		for (int p = 1; p < PH_N; p++)
			if (rem[p] > rem[best]) best = p;
		cols[best]++;
		rem[best] = -1;
		used++;
	}
	for (int p = 0; p < PH_N; p++) {
		canvas_fill(c, y, x, cols[p], (wchar_t)phase_glyph[p], CC_PH0 + p, CF_REVERSE);
		x += cols[p];
	}
}

/* ---- title ---------------------------------------------------------------- */
static struct {
	char text[256];
	int paused, live;
} title;

static int title_height(int w) { return 1; }

static void title_fill(const struct kt_data *d, const struct kt_view *v)
{
	char a[32] = "-", b[32] = "-", wd[16];
	if (d->have_data) {
		trace_fmt_time(d->tr, a, sizeof(a), d->to_ns - d->window_ns, 0);
		trace_fmt_time(d->tr, b, sizeof(b), d->to_ns, 0);
	}
	snprintf(title.text, sizeof(title.text), " kpitop  %s  %s  window %s  %s → %s", d->path,
		 d->live ? "live" : "replay", dur(wd, (double)d->window_ns), a, b);
	title.paused = v->paused;
	title.live = d->live;
}

static void title_draw(struct canvas *c, int y, int w, int h)
{
	canvas_fill(c, y, 0, w, L' ', CC_TITLE, CF_REVERSE);
	canvas_text(c, y, 0, w, CC_TITLE, CF_REVERSE | CF_BOLD, "%s", title.text);
	if (title.paused) canvas_text(c, y, w - 9, 8, CC_BAD, CF_REVERSE | CF_BOLD, "[PAUSED]");
}

static const struct kt_widget w_title = { "title", title_height, title_fill, title_draw };

/* ---- rate and state meters ------------------------------------------------ */
static struct trace_window mw;
static int mw_data;
static char mw_span[96];

static int meters_height(int w) { return 2; }

static void meters_fill(const struct kt_data *d, const struct kt_view *v)
{
	mw = d->win;
	mw_data = d->have_data;
	mw_span[0] = 0;
	if (d->have_data && !mw.requests && !mw.samples) {
		char a[32], b[32];
		snprintf(mw_span, sizeof(mw_span), "(nothing in this window: the trace spans %s to %s)",
			 trace_fmt_time(d->tr, a, sizeof(a), d->first_ns, 0),
			 trace_fmt_time(d->tr, b, sizeof(b), d->last_ns, 0));
	}
}

static int meter(struct canvas *c, int y, int x, const char *label, int color, const char *fmt, double v)
{
	x += canvas_text(c, y, x, -1, CC_LABEL, 0, "%s ", label);
	x += canvas_text(c, y, x, -1, color, CF_BOLD, fmt, v);
	return x + 3;
}

static void meters_draw(struct canvas *c, int y, int w, int h)
{
	int x = 1;
	x = meter(c, y, x, "req/s", CC_VALUE, "%.1f", mw.req_per_s);
	x = meter(c, y, x, "out tok/s", CC_VALUE, "%.0f", mw.out_tok_per_s);
	x = meter(c, y, x, "running", CC_VALUE, "%.0f", mw.running);
	x = meter(c, y, x, "waiting", mw.queue_depth > mw.running && mw.queue_depth > 0 ? CC_WARN : CC_VALUE,
		  "%.0f", mw.queue_depth);
	if (mw.kv_usage >= 0) {
		x += canvas_text(c, y, x, -1, CC_LABEL, 0, "KV ");
		int bw = 10;
		int fillc = (int)(mw.kv_usage * bw + 0.5);
		int col = mw.kv_usage >= 0.95 ? CC_BAD : mw.kv_usage >= 0.8 ? CC_WARN : CC_GOOD;
		canvas_text(c, y, x, 1, CC_DIM, 0, "[");
		canvas_fill(c, y, x + 1, fillc, L'|', col, CF_BOLD);
		canvas_text(c, y, x + 1 + bw, 1, CC_DIM, 0, "]");
		canvas_text(c, y, x + bw + 3, -1, col, CF_BOLD, "%.0f%%", mw.kv_usage * 100);
	} else {
		x += canvas_text(c, y, x, -1, CC_LABEL, 0, "KV ");
		canvas_text(c, y, x, -1, CC_DIM, 0, "-");
	}
	y++;
	x = 1;
	x = meter(c, y, x, "preemptions", mw.preemptions ? CC_BAD : CC_VALUE, "%.0f", (double)mw.preemptions);
	int64_t rej = mw.samples ? mw.rejections : mw.rejected;
	int64_t err = mw.samples ? mw.sample_errors : mw.errors;
	x = meter(c, y, x, "429s", rej ? CC_BAD : CC_VALUE, "%.0f", (double)rej);
	x = meter(c, y, x, "errors", err ? CC_BAD : CC_VALUE, "%.0f", (double)err);
	x = meter(c, y, x, "drops", mw.drops ? CC_BAD : CC_VALUE, "%.0f", (double)mw.drops);
	x = meter(c, y, x, "requests", CC_VALUE, "%.0f", mw.requests);
	if (mw.samples) {
		/* ms per second that the daemon's threads waited for a CPU, and
		 * behind whom most of it (traces of schema version 3) */
		double ms = (double)mw.runq_ns / NS_PER_MS / mw.samples;
		x = meter(c, y, x, "cpu wait", ms >= 50 ? CC_WARN : CC_VALUE, "%.0fms/s", ms);
		const struct trace_runq_by *other = trace_runq_culprit(&mw);
		if (mw.runq_ns > 0 && mw.runq_self_ns >= 0)
			x += canvas_text(c, y, x - 2, -1, CC_DIM, 0, "(%s %.0f%%)",
					 other ? other->comm : "own threads",
					 100.0 * (double)(other ? other->ns : mw.runq_self_ns) / (double)mw.runq_ns) + 1;
	}
	if (!mw_data) canvas_text(c, y, x, -1, CC_WARN, 0, "(no data in the store yet)");
	else if (mw_span[0]) canvas_text(c, y, x, -1, CC_WARN, 0, "%s", mw_span);
}

static const struct kt_widget w_meters = { "meters", meters_height, meters_fill, meters_draw };

/* ---- latency percentiles -------------------------------------------------- */
static int lat_height(int w) { return 5; }

static void lat_draw(struct canvas *c, int y, int w, int h)
{
	static const int rows[] = { TM_TTFT, TM_TPOT, TM_ITL, TM_E2E };
	canvas_text(c, y, 1, -1, CC_LABEL, CF_BOLD, "%-8s %10s %10s %10s %10s %7s", "latency", "p50", "p95",
		    "p99", "max", "n");
	char a[16], b[16], d[16], e[16];
	for (int i = 0; i < 4; i++) {
		const struct trace_dist *m = &mw.m[rows[i]];
		int col = m->n ? CC_VALUE : CC_DIM;
		canvas_text(c, y + 1 + i, 1, -1, CC_LABEL, 0, "%-8s", trace_metric_name[rows[i]]);
		const char *v[4] = { dur(a, m->n ? m->p50 : -1), dur(b, m->n ? m->p95 : -1),
				     dur(d, m->n ? m->p99 : -1), dur(e, m->n ? m->max : -1) };
		for (int k = 0; k < 4; k++) canvas_rtext(c, y + 1 + i, 10 + 11 * k, 10, col, 0, v[k]);
		canvas_text(c, y + 1 + i, 54, -1, col, 0, "%7d", m->n);
	}
}

static const struct kt_widget w_latency = { "latency", lat_height, meters_fill, lat_draw };

/* ---- phase split of the median and p99 request ----------------------------- */
static int phases_height(int w) { return 3; }

static void phases_draw(struct canvas *c, int y, int w, int h)
{
	const char *names[2] = { "median", "p99" };
	const int64_t *ph[2] = { mw.phase_p50, mw.phase_p99 };
	int64_t tot[2] = { mw.e2e_p50_row, mw.e2e_p99_row };
	int barw = w - 24;
	char a[16];
	for (int i = 0; i < 2; i++) {
		canvas_text(c, y + i, 1, -1, CC_LABEL, 0, "%-7s", names[i]);
		if (mw.m[TM_E2E].n) {
			phase_bar(c, y + i, 9, barw, ph[i]);
			canvas_text(c, y + i, 10 + barw, -1, CC_VALUE, CF_BOLD, "%s", dur(a, (double)tot[i]));
		} else {
			canvas_text(c, y + i, 9, -1, CC_DIM, 0, "no finished request in the window");
		}
	}
	int x = 9;
	for (int p = 0; p < PH_N; p++) {
		canvas_fill(c, y + 2, x, 1, (wchar_t)phase_glyph[p], CC_PH0 + p, CF_REVERSE);
		x += 2 + canvas_text(c, y + 2, x + 2, -1, CC_DIM, 0, "%s", trace_phase_name[p]) + 2;
		if (mw.m[TM_E2E].n) {
			x += canvas_text(c, y + 2, x - 1, -1, CC_DIM, 0, "%s", dur(a, (double)ph[1][p])) + 1;
		}
	}
}

static const struct kt_widget w_phases = { "phases", phases_height, meters_fill, phases_draw };

/* ---- sparklines ----------------------------------------------------------- */
static struct {
	double q[KT_SPARK], ttft[KT_SPARK], qmax, tmax;
	int64_t span_ns;
} sp;

static int spark_height(int w) { return 2; }

static void spark_fill(const struct kt_data *d, const struct kt_view *v)
{
	sp.qmax = sp.tmax = 0;
	for (int i = 0; i < KT_SPARK; i++) {
		sp.q[i] = d->spark[i].queue_depth_max;
		sp.ttft[i] = d->spark[i].ttft_p99;
		if (sp.q[i] > sp.qmax) sp.qmax = sp.q[i];
		if (sp.ttft[i] > sp.tmax) sp.tmax = sp.ttft[i];
	}
	sp.span_ns = d->spark_to_ns - d->spark_from_ns;
}

static void spark_draw(struct canvas *c, int y, int w, int h)
{
	char a[16], s[16];
	canvas_text(c, y, 1, -1, CC_LABEL, 0, "queue depth");
	canvas_spark(c, y, 14, sp.q, KT_SPARK, sp.qmax, CC_WARN);
	canvas_text(c, y, 15 + KT_SPARK, -1, CC_DIM, 0, "max %.0f  (last %s)", sp.qmax, dur(s, (double)sp.span_ns));
	canvas_text(c, y + 1, 1, -1, CC_LABEL, 0, "p99 TTFT");
	canvas_spark(c, y + 1, 14, sp.ttft, KT_SPARK, sp.tmax, CC_PH0 + PH_QUEUE);
	canvas_text(c, y + 1, 15 + KT_SPARK, -1, CC_DIM, 0, "max %s", dur(a, sp.tmax));
}

static const struct kt_widget w_spark = { "sparklines", spark_height, spark_fill, spark_draw };

/* ---- request panel -------------------------------------------------------- */
static struct {
	const struct kt_data *d;
	const struct kt_view *v;
	int idx[KT_MAX_REQS], n;
} pn;

static int64_t sort_key(const struct trace_req *r, enum kt_sort s)
{
	switch (s) {
	case KS_AGE: return r->age_ns;
	case KS_TTFT: return r->ttft_ns;
	case KS_E2E: return r->e2e_ns;
	case KS_TPOT: return r->tpot_ns;
	default: return r->t_arrive_ns;
	}
}

static const struct kt_data *sort_data;
static enum kt_sort sort_by;

static int cmp_rows(const void *a, const void *b)
{
	const struct trace_req *x = &sort_data->reqs[*(const int *)a], *y = &sort_data->reqs[*(const int *)b];
	int64_t kx = sort_key(x, sort_by), ky = sort_key(y, sort_by);
	if (kx != ky) return kx < ky ? 1 : -1;  /* largest first */
	return strcmp(x->id, y->id);
}

int kt_panel_rows(const struct kt_data *d, const struct kt_view *v, int *idx)
{
	int n = 0;
	for (int i = 0; i < d->nreqs; i++) {
		const struct trace_req *r = &d->reqs[i];
		if (v->filter[0] && !strstr(r->id, v->filter) && !strstr(trace_state_name[r->state], v->filter))
			continue;
		idx[n++] = i;
	}
	sort_data = d;
	sort_by = v->sort;
	/* in-flight first when sorting by arrival: they are the live ones */
	qsort(idx, (size_t)n, sizeof(*idx), cmp_rows);
	return n;
}

static int panel_height(int w) { return 0; }

static void panel_fill(const struct kt_data *d, const struct kt_view *v)
{
	pn.d = d;
	pn.v = v;
	pn.n = kt_panel_rows(d, v, pn.idx);
}

static int state_color(enum trace_req_state s)
{
	switch (s) {
	case TRS_REJECTED: case TRS_ERROR: return CC_BAD;
	case TRS_CANCELLED: case TRS_QUEUED: return CC_WARN;
	case TRS_DONE: return CC_DEFAULT;
	default: return CC_GOOD;
	}
}

static void panel_draw(struct canvas *c, int y, int w, int h)
{
	const struct kt_view *v = pn.v;
	canvas_fill(c, y, 0, w, L' ', CC_TITLE, CF_REVERSE);
	canvas_text(c, y, 0, w, CC_TITLE, CF_REVERSE, " %-16s %-9s %8s %6s %5s %8s %8s %8s  PHASES (sort: %s%s%s)",
		    "ID", "STATE", "AGE", "PROMPT", "OUT", "TTFT", "TPOT", "E2E", kt_sort_name[v->sort],
		    v->filter[0] ? ", filter: " : "", v->filter);
	int rows = h - 1;
	int top = v->top;
	if (pn.n == 0) {
		canvas_text(c, y + 1, 1, -1, CC_DIM, 0, v->filter[0] ? "no request matches the filter '%s'"
			    : "no requests in flight or finished before the window's end%s", v->filter);
		return;
	}
	int barx = 79, barw = w - barx - 1;
	char a[16], b[16], d[16], e[16];
	for (int i = 0; i < rows && top + i < pn.n; i++) {
		const struct trace_req *r = &pn.d->reqs[pn.idx[top + i]];
		int yy = y + 1 + i, sel = top + i == v->sel;
		int fl = sel ? CF_REVERSE : 0;
		if (sel) canvas_fill(c, yy, 0, w, L' ', CC_SEL, CF_REVERSE);
		canvas_text(c, yy, 1, 16, sel ? CC_SEL : CC_VALUE, fl, "%-16s", r->id);
		canvas_text(c, yy, 18, 9, sel ? CC_SEL : state_color(r->state), fl | CF_BOLD, "%-9s",
			    trace_state_name[r->state]);
		int cc = sel ? CC_SEL : CC_DEFAULT;
		canvas_rtext(c, yy, 28, 8, cc, fl, dur(a, (double)r->age_ns));
		canvas_text(c, yy, 36, -1, cc, fl, " %6d %5d", r->prompt_tokens, r->output_tokens);
		canvas_rtext(c, yy, 50, 8, cc, fl, dur(b, (double)r->ttft_ns));
		canvas_rtext(c, yy, 59, 8, cc, fl, dur(d, (double)r->tpot_ns));
		canvas_rtext(c, yy, 68, 8, cc, fl, dur(e, (double)r->e2e_ns));
		if (barw >= 5) phase_bar(c, yy, barx, barw, r->phase);
	}
}

static const struct kt_widget w_panel = { "requests", panel_height, panel_fill, panel_draw };

/* ---- status line ---------------------------------------------------------- */
static struct {
	char text[200];
	int editing;
} st;

static int status_height(int w) { return 1; }

static void status_fill(const struct kt_data *d, const struct kt_view *v)
{
	st.editing = v->editing;
	if (v->editing)
		snprintf(st.text, sizeof(st.text), "filter (id or state, Enter applies, Esc clears): %s_", v->edit);
	else if (v->message[0])
		snprintf(st.text, sizeof(st.text), "%s", v->message);
	else
		snprintf(st.text, sizeof(st.text), "q quit  h help  s sort  / filter  p pause  1/2/3 window 10s/1m/5m  "
			 "↑↓ scroll  ←→ %s", d->live ? "go back in time" : "move through time");
}

static void status_draw(struct canvas *c, int y, int w, int h)
{
	canvas_text(c, y, 0, w, st.editing ? CC_WARN : CC_DIM, st.editing ? CF_BOLD : 0, "%s", st.text);
}

static const struct kt_widget w_status = { "status", status_height, status_fill, status_draw };

const struct kt_widget *const kt_widgets[] = { &w_title, &w_meters, &w_latency, &w_phases, &w_spark,
					       &w_panel, &w_status };
const int kt_nwidgets = sizeof(kt_widgets) / sizeof(kt_widgets[0]);

/* ---- help ----------------------------------------------------------------- */
static const char *const help_lines[] = {
	"kpitop keys",
	"",
	"  q, F10        quit",
	"  h, F1, ?      this help (any key closes it)",
	"  s             sort the requests: arrival, age, TTFT, e2e, TPOT",
	"  /             filter requests by id or state (Enter applies, Esc clears)",
	"  p, space      pause / resume sampling",
	"  1 2 3         window of 10s, 1m, 5m",
	"  ↑ ↓ PgUp PgDn Home End   move in the request list",
	"  ← →           move the window back / forward through the trace",
	"                (← leaves live mode; → past the end returns to it)",
	"",
	"Phases: N net-in  Q queue  P prefill  D decode  O net-out",
	"Percentiles interpolate between the closest ranks, as SQLite's percentile().",
};

int kt_render(struct canvas *c, const struct kt_data *d, struct kt_view *v, int once)
{
	canvas_clear(c);
	if (v->help && !once) {
		for (size_t i = 0; i < sizeof(help_lines) / sizeof(*help_lines); i++)
			canvas_text(c, 1 + (int)i, 2, -1, i ? CC_DEFAULT : CC_LABEL, i ? 0 : CF_BOLD, "%s", help_lines[i]);
		return c->h;
	}
	int fixed = 0;
	for (int i = 0; i < kt_nwidgets; i++) fixed += kt_widgets[i]->height(c->w);
	int y = 0;
	for (int i = 0; i < kt_nwidgets; i++) {
		const struct kt_widget *wd = kt_widgets[i];
		if (once && !strcmp(wd->name, "status")) continue;
		int h = wd->height(c->w);
		if (!h) {
			/* the one widget that takes the rest: the request panel */
			h = c->h - fixed;
			v->panel_rows = h - 1;
		}
		if (h <= 0) continue;
		wd->fill(d, v);
		wd->draw(c, y, c->w, h);
		y += h;
	}
	return y;
}
