/* widgets.c - kpitop's screen, htop-style: each widget an instance of a
 * class whose fill copies its values from struct kt_data and draw paints them. */
#include "tools/kpitop/kpitop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const kt_sort_name[KS_N] = { "arrival", "age", "TTFT", "e2e", "TPOT" };

static char *dur(char *b, double ns) { return timefmt_dur(b, 16, ns); }

/* The bar's segments: the phases, with the server wait of an http row (queue
 * and prefill together, which it cannot tell apart) after net-in, and what
 * of e2e the five phases do not cover: a disaggregated request's router, KV
 * transfer and decode queue (the P/D line has them). */
#define BAR_N (PH_N + 2)
static const char bar_glyph[BAR_N] = { 'N', 'W', 'Q', 'P', 'D', 'O', 'x' };
static const int bar_color[BAR_N] = { CC_PH0 + PH_NET_IN, CC_PH0 + PH_QUEUE, CC_PH0 + PH_QUEUE,
				      CC_PH0 + PH_PREFILL, CC_PH0 + PH_DECODE, CC_PH0 + PH_NET_OUT, CC_DIM };

/* A stacked bar of phases over len columns, by largest remainder so the
 * columns add up exactly and every present phase is visible; wait < 0: the
 * row has the engine's split instead; e2e (< 0 unknown) sets the rest. */
static void phase_bar(struct canvas *c, int y, int x, int len, const int64_t *phase, int64_t wait,
		      int64_t e2e)
{
	int64_t known = 0;
	for (int p = 0; p < PH_N; p++) known += phase[p] > 0 ? phase[p] : 0;
	known += wait > 0 ? wait : 0;
	const int64_t ph[BAR_N] = { phase[PH_NET_IN], wait, phase[PH_QUEUE], phase[PH_PREFILL],
				    phase[PH_DECODE], phase[PH_NET_OUT], e2e > known ? e2e - known : 0 };
	double tot = 0;
	for (int p = 0; p < BAR_N; p++) tot += ph[p] > 0 ? (double)ph[p] : 0;
	if (tot <= 0 || len <= 0) {
		canvas_text(c, y, x, len, CC_DIM, 0, "-");
		return;
	}
	int cols[BAR_N], used = 0;
	double rem[BAR_N];
	for (int p = 0; p < BAR_N; p++) {
		double exact = ph[p] > 0 ? ph[p] / tot * len : 0;
		cols[p] = (int)exact;
		rem[p] = exact - cols[p];
		used += cols[p];
	}
	while (used < len) {
		int best = 0;
		for (int p = 1; p < BAR_N; p++)
			if (rem[p] > rem[best]) best = p;
		cols[best]++;
		rem[best] = -1;
		used++;
	}
	for (int p = 0; p < BAR_N; p++) {
		canvas_fill(c, y, x, cols[p], (wchar_t)bar_glyph[p], bar_color[p], CF_REVERSE);
		x += cols[p];
	}
}

/* ---- title ---------------------------------------------------------------- */
struct title {
	struct kt_widget base;
	char text[256];
	int paused;
};

static int title_height(int w) { return 1; }

static void title_fill(struct kt_widget *w, const struct kt_data *d, const struct kt_view *v)
{
	struct title *t = (struct title *)w;
	char a[32] = "-", b[32] = "-", wd[16];
	if (d->have_data) {
		timefmt_wall(a, sizeof(a), d->from_wall_ns, 0);
		timefmt_wall(b, sizeof(b), d->to_wall_ns, 0);
	}
	int n = snprintf(t->text, sizeof(t->text), " kpitop  %s  %s  window %s  %s → %s", d->path,
			 d->live ? "live" : "replay", dur(wd, (double)d->window_ns), a, b);
	/* where the window's requests came from, when not all from the probes */
	const int *src = d->win.by_source;
	if (src[TRACE_SRC_HTTP] + src[TRACE_SRC_LIBLLAMA] + src[TRACE_SRC_INFERRED] && n > 0 &&
	    (size_t)n < sizeof(t->text)) {
		int kinds = 0, only = TRACE_SRC_USDT;
		for (int k = 0; k < TRACE_SRC_N; k++)
			if (src[k]) {
				kinds++;
				only = k;
			}
		if (kinds > 1) {
			n += snprintf(t->text + n, sizeof(t->text) - (size_t)n, "  sources:");
			for (int k = 0, first = 1; k < TRACE_SRC_N && (size_t)n < sizeof(t->text); k++)
				if (src[k]) {
					n += snprintf(t->text + n, sizeof(t->text) - (size_t)n, "%s %d %s",
						      first ? "" : ",", src[k], trace_source_name[k]);
					first = 0;
				}
		} else {
			snprintf(t->text + n, sizeof(t->text) - (size_t)n, "  source: %s", trace_source_name[only]);
		}
	}
	/* a llama.cpp engine's prefix cache (source http+libllama) */
	n = (int)strlen(t->text);
	if (d->reuse.requests && d->reuse.hit_ratio >= 0 && (size_t)n < sizeof(t->text))
		snprintf(t->text + n, sizeof(t->text) - (size_t)n, "  prefix cache: %.0f%% of prompt "
			 "tokens reused (%d of %d requests)", d->reuse.hit_ratio * 100, d->reuse.reused,
			 d->reuse.requests);
	t->paused = v->paused;
}

static void title_draw(const struct kt_widget *w, struct canvas *c, int y, int width, int h)
{
	const struct title *t = (const struct title *)w;
	canvas_fill(c, y, 0, width, L' ', CC_TITLE, CF_REVERSE);
	canvas_text(c, y, 0, width, CC_TITLE, CF_REVERSE | CF_BOLD, "%s", t->text);
	if (t->paused) canvas_text(c, y, width - 9, 8, CC_BAD, CF_REVERSE | CF_BOLD, "[PAUSED]");
}

static const struct kt_widget_class title_class = {
	"title", sizeof(struct title), title_height, title_fill, title_draw,
};

/* ---- rate and state meters ------------------------------------------------ */
struct meters {
	struct kt_widget base;
	struct trace_window win;
	int have_data;
	struct trace_runq_by culprit;   /* pid 0: none */
	char note[96];                  /* why the window is empty */
};

static int meters_height(int w) { return 2; }

static void meters_fill(struct kt_widget *w, const struct kt_data *d, const struct kt_view *v)
{
	struct meters *m = (struct meters *)w;
	m->win = d->win;
	m->have_data = d->have_data;
	memset(&m->culprit, 0, sizeof(m->culprit));
	if (d->culprit >= 0) m->culprit = d->win.runq_by[d->culprit];
	m->note[0] = 0;
	if (d->have_data && !d->win.requests && !d->win.samples) {
		char a[32], b[32];
		snprintf(m->note, sizeof(m->note), "(nothing in this window: the trace spans %s to %s)",
			 timefmt_wall(a, sizeof(a), d->first_wall_ns, 0), timefmt_wall(b, sizeof(b), d->last_wall_ns, 0));
	}
}

static int meter(struct canvas *c, int y, int x, const char *label, int color, const char *fmt, double v)
{
	x += canvas_text(c, y, x, -1, CC_LABEL, 0, "%s ", label);
	x += canvas_text(c, y, x, -1, color, CF_BOLD, fmt, v);
	return x + 3;
}

/* KV usage as a 10-cell bar and a percentage, "-" when unknown. */
static void kv_meter(struct canvas *c, int y, int x, double kv)
{
	x += canvas_text(c, y, x, -1, CC_LABEL, 0, "KV ");
	if (kv < 0) {
		canvas_text(c, y, x, -1, CC_DIM, 0, "-");
		return;
	}
	int bw = 10;
	int col = kv >= 0.95 ? CC_BAD : kv >= 0.8 ? CC_WARN : CC_GOOD;
	canvas_text(c, y, x, 1, CC_DIM, 0, "[");
	canvas_fill(c, y, x + 1, (int)(kv * bw + 0.5), L'|', col, CF_BOLD);
	canvas_text(c, y, x + 1 + bw, 1, CC_DIM, 0, "]");
	canvas_text(c, y, x + bw + 3, -1, col, CF_BOLD, "%.0f%%", kv * 100);
}

/* ms per second that the daemon's threads waited for a CPU, and behind
 * whom most of it (traces of schema version 3). */
static int cpu_wait_meter(struct canvas *c, int y, int x, const struct meters *m)
{
	const struct trace_window *mw = &m->win;
	double ms = (double)mw->runq_ns / NS_PER_MS / mw->samples;
	x = meter(c, y, x, "cpu wait", ms >= 50 ? CC_WARN : CC_VALUE, "%.0fms/s", ms);
	if (mw->runq_ns > 0 && mw->runq_self_ns >= 0) {
		const struct trace_runq_by *other = m->culprit.pid ? &m->culprit : NULL;
		x += canvas_text(c, y, x - 2, -1, CC_DIM, 0, "(%s %.0f%%)", other ? other->comm : "own threads",
				 100.0 * (double)(other ? other->ns : mw->runq_self_ns) / (double)mw->runq_ns) + 1;
	}
	return x;
}

/* What the agent lost in the window, with the largest cause named (schema
 * version 4); older traces say only their ring-buffer drops. */
static int lost_meter(struct canvas *c, int y, int x, const struct trace_window *mw)
{
	if (mw->lost < 0)
		return meter(c, y, x, "drops", mw->drops ? CC_BAD : CC_VALUE, "%.0f", (double)mw->drops);
	x = meter(c, y, x, "lost", mw->lost ? CC_BAD : CC_VALUE, "%.0f", (double)mw->lost);
	if (mw->n_loss)
		x += canvas_text(c, y, x - 2, -1, CC_DIM, 0, "(%s%s)", mw->loss[0].cause,
				 mw->n_loss > 1 ? ", ..." : "") + 1;
	return x;
}

static void meters_draw(const struct kt_widget *w, struct canvas *c, int y, int width, int h)
{
	const struct meters *m = (const struct meters *)w;
	const struct trace_window *mw = &m->win;
	int x = 1;
	x = meter(c, y, x, "req/s", CC_VALUE, "%.1f", mw->req_per_s);
	x = meter(c, y, x, "out tok/s", CC_VALUE, "%.0f", mw->out_tok_per_s);
	if (!mw->samples && (mw->by_source[TRACE_SRC_HTTP] || mw->by_source[TRACE_SRC_LIBLLAMA] ||
			     mw->by_source[TRACE_SRC_INFERRED])) {
		/* the HTTP exchange carries no engine samples: unknown, not 0 */
		x = meter(c, y, x, "running", CC_DIM, "-", 0);
		x = meter(c, y, x, "waiting", CC_DIM, "-", 0);
	} else {
		x = meter(c, y, x, "running", CC_VALUE, "%.0f", mw->running);
		x = meter(c, y, x, "waiting", mw->queue_depth > mw->running && mw->queue_depth > 0 ? CC_WARN : CC_VALUE,
			  "%.0f", mw->queue_depth);
	}
	kv_meter(c, y, x, mw->kv_usage);
	y++;
	x = 1;
	x = meter(c, y, x, "preemptions", mw->preemptions ? CC_BAD : CC_VALUE, "%.0f", (double)mw->preemptions);
	int64_t rej = mw->samples ? mw->rejections : mw->rejected;
	int64_t err = mw->samples ? mw->sample_errors : mw->errors;
	x = meter(c, y, x, "429s", rej ? CC_BAD : CC_VALUE, "%.0f", (double)rej);
	x = meter(c, y, x, "errors", err ? CC_BAD : CC_VALUE, "%.0f", (double)err);
	x = lost_meter(c, y, x, mw);
	if (mw->unlinked > 0)   /* calls no link rule could tie: missing evidence, not lost data */
		x = meter(c, y, x, "unlinked", CC_DIM, "%.0f", (double)mw->unlinked);
	x = meter(c, y, x, "requests", CC_VALUE, "%.0f", mw->requests);
	if (mw->samples) x = cpu_wait_meter(c, y, x, m);
	if (!m->have_data) canvas_text(c, y, x, -1, CC_WARN, 0, "(no data in the store yet)");
	else if (m->note[0]) canvas_text(c, y, x, -1, CC_WARN, 0, "%s", m->note);
}

static const struct kt_widget_class meters_class = {
	"meters", sizeof(struct meters), meters_height, meters_fill, meters_draw,
};

/* ---- latency percentiles -------------------------------------------------- */
static const int lat_metrics[] = { TM_TTFT, TM_TTFO, TM_TPOT, TM_ITL, TM_E2E };
#define LAT_ROWS (int)(sizeof(lat_metrics) / sizeof(*lat_metrics))

struct latency {
	struct kt_widget base;
	struct trace_dist m[LAT_ROWS];
};

static int lat_height(int w) { return 1 + LAT_ROWS; }

static void lat_fill(struct kt_widget *w, const struct kt_data *d, const struct kt_view *v)
{
	struct latency *l = (struct latency *)w;
	for (int i = 0; i < LAT_ROWS; i++) l->m[i] = d->win.m[lat_metrics[i]];
}

static void lat_draw(const struct kt_widget *w, struct canvas *c, int y, int width, int h)
{
	const struct latency *l = (const struct latency *)w;
	canvas_text(c, y, 1, -1, CC_LABEL, CF_BOLD, "%-8s %10s %10s %10s %10s %7s", "latency", "p50", "p95",
		    "p99", "max", "n");
	char a[16], b[16], d[16], e[16];
	for (int i = 0; i < LAT_ROWS; i++) {
		const struct trace_dist *m = &l->m[i];
		int col = m->n ? CC_VALUE : CC_DIM;
		canvas_text(c, y + 1 + i, 1, -1, CC_LABEL, 0, "%-8s", trace_metric_name[lat_metrics[i]]);
		const char *v[4] = { dur(a, m->n ? m->p50 : -1), dur(b, m->n ? m->p95 : -1),
				     dur(d, m->n ? m->p99 : -1), dur(e, m->n ? m->max : -1) };
		for (int k = 0; k < 4; k++) canvas_rtext(c, y + 1 + i, 10 + 11 * k, 10, col, 0, v[k]);
		canvas_text(c, y + 1 + i, 54, -1, col, 0, "%7d", m->n);
	}
}

static const struct kt_widget_class latency_class = {
	"latency", sizeof(struct latency), lat_height, lat_fill, lat_draw,
};

/* ---- phase split of the median and p99 request ----------------------------- */
struct phases {
	struct kt_widget base;
	int finished;                   /* requests of the window with an e2e time */
	int64_t phase[2][PH_N];         /* the median's, the p99's (-1: unknown) */
	int64_t wait[2];                /* their server wait (-1: engine split known) */
	int64_t e2e[2];
	bool inferred;                  /* the p99's queue and prefill were inferred */
};

static int phases_height(int w) { return 3; }

static void phases_fill(struct kt_widget *w, const struct kt_data *d, const struct kt_view *v)
{
	struct phases *p = (struct phases *)w;
	p->finished = d->win.m[TM_E2E].n;
	memcpy(p->phase[0], d->win.phase_p50, sizeof(p->phase[0]));
	memcpy(p->phase[1], d->win.phase_p99, sizeof(p->phase[1]));
	p->wait[0] = d->win.wait_p50;
	p->wait[1] = d->win.wait_p99;
	p->e2e[0] = d->win.e2e_p50_row;
	p->e2e[1] = d->win.e2e_p99_row;
	p->inferred = d->win.inferred_p99;
}

static void phases_draw(const struct kt_widget *w, struct canvas *c, int y, int width, int h)
{
	const struct phases *ph = (const struct phases *)w;
	const char *names[2] = { "median", "p99" };
	int barw = width - 24;
	char a[16];
	for (int i = 0; i < 2; i++) {
		canvas_text(c, y + i, 1, -1, CC_LABEL, 0, "%-7s", names[i]);
		if (ph->finished) {
			phase_bar(c, y + i, 9, barw, ph->phase[i], ph->wait[i], ph->e2e[i]);
			canvas_text(c, y + i, 10 + barw, -1, CC_VALUE, CF_BOLD, "%s", dur(a, (double)ph->e2e[i]));
		} else {
			canvas_text(c, y + i, 9, -1, CC_DIM, 0, "no finished request in the window");
		}
	}
	/* the p99 request's phases; "-" for one its row does not know, the
	 * server wait only where the row has it in place of the split, and
	 * "(inferred)" after a queue and prefill inferred from stream timing */
	int x = 9;
	int64_t rest = ph->e2e[1] - (ph->wait[1] > 0 ? ph->wait[1] : 0);
	for (int p = 0; p < PH_N; p++)
		rest -= ph->phase[1][p] > 0 ? ph->phase[1][p] : 0;
	for (int p = 0; p < BAR_N; p++) {
		int last = p == BAR_N - 1;
		int64_t v = p == 1 ? ph->wait[1] : last ? rest : ph->phase[1][p - (p > 1)];
		if ((p == 1 || last) && (!ph->finished || v <= 0)) continue;
		canvas_fill(c, y + 2, x, 1, (wchar_t)bar_glyph[p], bar_color[p], CF_REVERSE);
		x += 2 + canvas_text(c, y + 2, x + 2, -1, CC_DIM, 0, "%s",
				     p == 1 ? "server-wait" : last ? "router, KV, decode queue (P/D)" :
				     trace_phase_name[p - (p > 1)]) + 2;
		if (ph->finished)
			x += canvas_text(c, y + 2, x - 1, -1, CC_DIM, 0, "%s%s", dur(a, (double)v),
					 ph->inferred && (p == 2 || p == 3) ? " (inferred)" : "") + 1;
	}
}

static const struct kt_widget_class phases_class = {
	"phases", sizeof(struct phases), phases_height, phases_fill, phases_draw,
};

/* ---- sparklines ----------------------------------------------------------- */
struct spark {
	struct kt_widget base;
	double q[KT_SPARK], ttft[KT_SPARK], qmax, tmax;
	int64_t span_ns;
};

static int spark_height(int w) { return 2; }

static void spark_fill(struct kt_widget *w, const struct kt_data *d, const struct kt_view *v)
{
	struct spark *sp = (struct spark *)w;
	sp->qmax = sp->tmax = 0;
	for (int i = 0; i < KT_SPARK; i++) {
		sp->q[i] = d->spark[i].queue_depth_max;
		sp->ttft[i] = d->spark[i].ttft_p99;
		if (sp->q[i] > sp->qmax) sp->qmax = sp->q[i];
		if (sp->ttft[i] > sp->tmax) sp->tmax = sp->ttft[i];
	}
	sp->span_ns = d->spark_to_ns - d->spark_from_ns;
}

static void spark_draw(const struct kt_widget *w, struct canvas *c, int y, int width, int h)
{
	const struct spark *sp = (const struct spark *)w;
	char a[16], s[16];
	canvas_text(c, y, 1, -1, CC_LABEL, 0, "queue depth");
	canvas_spark(c, y, 14, sp->q, KT_SPARK, sp->qmax, CC_WARN);
	canvas_text(c, y, 15 + KT_SPARK, -1, CC_DIM, 0, "max %.0f  (last %s)", sp->qmax, dur(s, (double)sp->span_ns));
	canvas_text(c, y + 1, 1, -1, CC_LABEL, 0, "p99 TTFT");
	canvas_spark(c, y + 1, 14, sp->ttft, KT_SPARK, sp->tmax, CC_PH0 + PH_QUEUE);
	canvas_text(c, y + 1, 15 + KT_SPARK, -1, CC_DIM, 0, "max %s", dur(a, sp->tmax));
}

static const struct kt_widget_class spark_class = {
	"sparklines", sizeof(struct spark), spark_height, spark_fill, spark_draw,
};

/* ---- request panel -------------------------------------------------------- */
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

struct panel_key {
	int64_t key;
	const char *id;
	int idx;
};

static int cmp_keys(const void *a, const void *b)
{
	const struct panel_key *x = a, *y = b;
	if (x->key != y->key) return x->key < y->key ? 1 : -1;  /* largest first */
	return strcmp(x->id, y->id);
}

int kt_panel_rows(const struct kt_data *d, const struct kt_view *v, int *idx)
{
	struct panel_key keys[KT_MAX_REQS];
	int n = 0;
	for (int i = 0; i < d->nreqs && n < KT_MAX_REQS; i++) {
		const struct trace_req *r = &d->reqs[i];
		if (v->filter[0] && !strstr(r->id, v->filter) && !strstr(trace_state_name[r->state], v->filter))
			continue;
		keys[n++] = (struct panel_key){ sort_key(r, v->sort), r->id, i };
	}
	/* in-flight first when sorting by arrival: they are the live ones */
	qsort(keys, (size_t)n, sizeof(*keys), cmp_keys);
	for (int i = 0; i < n; i++) idx[i] = keys[i].idx;
	return n;
}

struct panel {
	struct kt_widget base;
	struct trace_req rows[KT_MAX_REQS];     /* filtered and sorted */
	int n;
	int hops, nhops;                        /* the hops view, and its rows */
	struct trace_hop hop[KT_MAX_HOPS];
	char hops_of[64], hops_why[160];
	int tasks, ntasks;                      /* the tasks view, and its rows */
	struct trace_task task[KT_MAX_TASKS];
	char tasks_why[160];
	int pods, npods;                        /* the pods view, and its rows */
	struct trace_pod pod[KT_MAX_PODS];
	char pods_why[160];
	enum kt_sort sort;
	char filter[64];
	int top, sel;
};

static int panel_height(int w) { return 0; }

static void panel_fill(struct kt_widget *w, const struct kt_data *d, const struct kt_view *v)
{
	struct panel *p = (struct panel *)w;
	int idx[KT_MAX_REQS];
	p->n = kt_panel_rows(d, v, idx);
	for (int i = 0; i < p->n; i++) p->rows[i] = d->reqs[idx[i]];
	p->sort = v->sort;
	snprintf(p->filter, sizeof(p->filter), "%s", v->filter);
	p->top = v->top;
	p->sel = v->sel;
	p->hops = v->hops;
	p->nhops = d->nhops;
	memcpy(p->hop, d->hops, sizeof(p->hop[0]) * (size_t)d->nhops);
	snprintf(p->hops_of, sizeof(p->hops_of), "%s", d->hops_of);
	snprintf(p->hops_why, sizeof(p->hops_why), "%s", d->hops_why);
	p->tasks = v->tasks;
	p->ntasks = d->ntasks;
	memcpy(p->task, d->tasks, sizeof(p->task[0]) * (size_t)d->ntasks);
	snprintf(p->tasks_why, sizeof(p->tasks_why), "%s", d->tasks_why);
	p->pods = v->pods;
	p->npods = d->npods;
	memcpy(p->pod, d->pods, sizeof(p->pod[0]) * (size_t)d->npods);
	snprintf(p->pods_why, sizeof(p->pods_why), "%s", d->pods_why);
}

/* The pods view: the window's requests by the pod that served them (the
 * agent names pods with no API server; "(host)" outside any), the busiest
 * first: how many, how many failed or were refused, their TTFT and TPOT. */
static void pods_draw(const struct panel *p, struct canvas *c, int y, int width, int h)
{
	char a[16], b[16], t[16];

	canvas_fill(c, y, 0, width, L' ', CC_TITLE, CF_REVERSE);
	canvas_text(c, y, 0, width, CC_TITLE, CF_REVERSE, " %-40s %-20s %8s %6s %6s %9s %9s %9s  %s", "POD",
		    "CONTAINER", "REQUESTS", "ERRORS", "429", "TTFT p50", "TTFT p99", "TPOT p99", "(g or Esc: requests)");
	if (!p->npods) {
		canvas_text(c, y + 1, 1, -1, CC_DIM, 0, "%s", p->pods_why);
		return;
	}
	for (int i = 0; i < p->npods && i < h - 1; i++) {
		const struct trace_pod *k = &p->pod[i];
		int yy = y + 1 + i;
		canvas_text(c, yy, 1, 40, strcmp(k->name, "(host)") ? CC_VALUE : CC_DIM, 0, "%-40.40s", k->name);
		canvas_text(c, yy, 42, 20, CC_DEFAULT, 0, "%-20.20s", k->container[0] ? k->container : "-");
		canvas_text(c, yy, 63, 8, CC_DEFAULT, 0, "%8d", k->requests);
		canvas_text(c, yy, 72, 6, k->errors ? CC_BAD : CC_DEFAULT, 0, "%6d", k->errors);
		canvas_text(c, yy, 79, 6, k->rejected ? CC_WARN : CC_DEFAULT, 0, "%6d", k->rejected);
		canvas_rtext(c, yy, 86, 9, CC_DEFAULT, 0, k->ttft_p50 >= 0 ? dur(a, (double)k->ttft_p50) : "-");
		canvas_rtext(c, yy, 96, 9, CC_VALUE, 0, k->ttft_p99 >= 0 ? dur(b, (double)k->ttft_p99) : "-");
		canvas_rtext(c, yy, 106, 9, CC_DEFAULT, 0, k->tpot_p99 >= 0 ? dur(t, (double)k->tpot_p99) : "-");
	}
}

/* A task's critical path as one bar: model calls (M), tool calls (T), its
 * own work (A), in proportion. */
static void task_bar(struct canvas *c, int y, int x, int len, const struct trace_task *k)
{
	const int64_t part[3] = { k->model_ns, k->tool_ns, k->agent_ns };
	static const char glyph[3] = { 'M', 'T', 'A' };
	static const int color[3] = { CC_PH0 + PH_DECODE, CC_PH0 + PH_QUEUE, CC_PH0 + PH_NET_IN };
	int64_t tot = part[0] + part[1] + part[2];
	if (tot <= 0 || len <= 0) {
		canvas_text(c, y, x, len, CC_DIM, 0, "-");
		return;
	}
	int used = 0;
	for (int i = 0; i < 3; i++) {
		int n = i == 2 ? len - used : (int)((double)part[i] / (double)tot * len + 0.5);
		if (n > len - used) n = len - used;
		canvas_fill(c, y, x + used, n, (wchar_t)glyph[i], color[i], CF_REVERSE);
		used += n;
	}
}

/* The tasks view: the agent tasks that started before the window's end,
 * newest first: their calls, retries and errors, duration, success, and
 * where the time went on the critical path. */
static void tasks_draw(const struct panel *p, struct canvas *c, int y, int width, int h)
{
	int barx = 95, barw = width - barx - 1;
	char a[16], m[16], t[16];

	canvas_fill(c, y, 0, width, L' ', CC_TITLE, CF_REVERSE);
	canvas_text(c, y, 0, width, CC_TITLE, CF_REVERSE, " %-20s %-10s %-11s %5s %4s %3s %5s %3s %8s %8s %8s %2s  %s",
		    "TASK", "PROCESS", "RULE", "MODEL", "TOOL", "MCP", "RETRY", "ERR", "DURATION", "MODEL", "TOOL",
		    "OK", "M model T tool A agent (a or Esc: requests)");
	if (!p->ntasks) {
		canvas_text(c, y + 1, 1, -1, CC_DIM, 0, "%s", p->tasks_why);
		return;
	}
	for (int i = 0; i < p->ntasks && i < h - 1; i++) {
		const struct trace_task *k = &p->task[i];
		int yy = y + 1 + i;
		canvas_text(c, yy, 1, 20, CC_VALUE, 0, "%-20.20s", k->id);
		canvas_text(c, yy, 22, 10, CC_DEFAULT, 0, "%-10.10s", k->comm);
		canvas_text(c, yy, 33, 11, CC_DIM, 0, "%-11.11s", k->rule);
		canvas_text(c, yy, 45, -1, CC_DEFAULT, 0, "%5d %4d %3d", k->model_calls, k->tool_calls, k->mcp_calls);
		canvas_text(c, yy, 60, 5, k->retries ? CC_WARN : CC_DEFAULT, 0, "%5d", k->retries);
		canvas_text(c, yy, 66, 3, k->errors ? CC_BAD : CC_DEFAULT, 0, "%3d", k->errors);
		canvas_rtext(c, yy, 70, 8, CC_VALUE, 0, dur(a, (double)k->duration_ns));
		canvas_rtext(c, yy, 79, 8, CC_DEFAULT, 0, dur(m, (double)k->model_ns));
		canvas_rtext(c, yy, 88, 8, CC_DEFAULT, 0, dur(t, (double)k->tool_ns));
		canvas_text(c, yy, 97, 2, k->success ? CC_GOOD : CC_BAD, CF_BOLD, "%s", k->success ? "ok" : "no");
		if (barw - 5 >= 5) task_bar(c, yy, barx + 5, barw - 5, k);
	}
}

/* The hops view: one line per hop of the selected request's trace, indented
 * by depth, each bar placed on the trace's one time scale (its first hop's
 * arrival to its last end) and split into the hop's phases. */
static void hops_draw(const struct panel *p, struct canvas *c, int y, int width, int h)
{
	int barx = 72, barw = width - barx - 1;
	int64_t t0 = INT64_MAX, t1 = 0;
	char a[16], b[16];

	canvas_fill(c, y, 0, width, L' ', CC_TITLE, CF_REVERSE);
	char title[80];
	snprintf(title, sizeof(title), "HOPS of %s", p->hops_of);
	canvas_text(c, y, 0, width, CC_TITLE, CF_REVERSE, " %-30.30s %-4s %-7s %-8s %8s %8s  %s", title, "DIR",
		    "LINK", "PID", "START", "E2E", "ONE TIME SCALE (t or Esc: the list)");
	if (!p->nhops) {
		canvas_text(c, y + 1, 1, -1, CC_DIM, 0, "%s", p->hops_why);
		return;
	}
	for (int i = 0; i < p->nhops; i++) {
		const struct trace_hop *o = &p->hop[i];
		if (o->t_arrive_ns >= 0 && o->t_arrive_ns < t0) t0 = o->t_arrive_ns;
		if (o->t_done_ns > t1) t1 = o->t_done_ns;
	}
	double span = t1 > t0 ? (double)(t1 - t0) : 1;
	for (int i = 0; i < p->nhops && i < h - 1; i++) {
		const struct trace_hop *o = &p->hop[i];
		char what[64];
		int yy = y + 1 + i;
		snprintf(what, sizeof(what), "%*s%s %s", 2 * (o->depth < 8 ? o->depth : 8), "", o->comm, o->path);
		canvas_text(c, yy, 1, 30, CC_VALUE, 0, "%-30.30s", what);
		canvas_text(c, yy, 32, 4, o->direction[0] == 'o' ? CC_WARN : CC_DEFAULT, 0, "%-4s", o->direction);
		canvas_text(c, yy, 37, 7, o->link_rule[0] ? CC_DEFAULT : CC_DIM, 0, "%-7s",
			    o->link_rule[0] ? o->link_rule : (o->depth ? "?" : "top"));
		canvas_text(c, yy, 45, 8, CC_DIM, 0, "%-8d", o->pid);
		canvas_rtext(c, yy, 54, 8, CC_DEFAULT, 0, dur(a, (double)(o->t_arrive_ns - t0)));
		canvas_rtext(c, yy, 63, 8, CC_VALUE, 0, dur(b, (double)o->e2e_ns));
		if (barw < 5 || o->t_arrive_ns < 0 || o->e2e_ns < 0)
			continue;
		int x = barx + (int)((double)(o->t_arrive_ns - t0) / span * barw);
		int len = (int)((double)o->e2e_ns / span * barw + 0.5);
		if (len < 1) len = 1;
		if (x + len > barx + barw) len = barx + barw - x;
		phase_bar(c, yy, x, len, o->phase, o->server_wait_ns, o->e2e_ns);
	}
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

static void panel_row(struct canvas *c, int y, int width, const struct trace_req *r, int sel)
{
	int fl = sel ? CF_REVERSE : 0, cc = sel ? CC_SEL : CC_DEFAULT;
	int barx = 88, barw = width - barx - 1;
	char a[16], b[16], d[16], e[16], o[16];
	if (sel) canvas_fill(c, y, 0, width, L' ', CC_SEL, CF_REVERSE);
	canvas_text(c, y, 1, 14, sel ? CC_SEL : CC_VALUE, fl, "%-14s", r->id);
	/* U usdt, H http, L http+libllama, I http with its split inferred */
	canvas_text(c, y, 16, 1, cc, fl, "%c", "UHLI"[r->source]);
	canvas_text(c, y, 18, 9, sel ? CC_SEL : state_color(r->state), fl | CF_BOLD, "%-9s",
		    trace_state_name[r->state]);
	canvas_rtext(c, y, 28, 8, cc, fl, dur(a, (double)r->age_ns));
	canvas_text(c, y, 36, -1, cc, fl, " %6d %5d", r->prompt_tokens, r->output_tokens);
	canvas_rtext(c, y, 50, 8, cc, fl, dur(b, (double)r->ttft_ns));
	/* the first answer event: later than TTFT by what the model reasoned */
	canvas_rtext(c, y, 59, 8, r->ttfo_ns >= 0 || sel ? cc : CC_DIM, fl, dur(o, (double)r->ttfo_ns));
	canvas_rtext(c, y, 68, 8, cc, fl, dur(d, (double)r->tpot_ns));
	canvas_rtext(c, y, 77, 8, cc, fl, dur(e, (double)r->e2e_ns));
	if (barw >= 5) phase_bar(c, y, barx, barw, r->phase, r->source == TRACE_SRC_HTTP ? r->server_wait_ns : -1,
				 r->state == TRS_DONE ? r->e2e_ns : -1);
}

static void panel_draw(const struct kt_widget *w, struct canvas *c, int y, int width, int h)
{
	const struct panel *p = (const struct panel *)w;
	if (p->tasks) {
		tasks_draw(p, c, y, width, h);
		return;
	}
	if (p->pods) {
		pods_draw(p, c, y, width, h);
		return;
	}
	if (p->hops) {
		hops_draw(p, c, y, width, h);
		return;
	}
	canvas_fill(c, y, 0, width, L' ', CC_TITLE, CF_REVERSE);
	/* the filter first: at 120 columns the header's end is cut */
	canvas_text(c, y, 0, width, CC_TITLE, CF_REVERSE, " %-14s S %-9s %8s %6s %5s %8s %8s %8s %8s  PHASES (%s%s%ssort: %s)",
		    "ID", "STATE", "AGE", "PROMPT", "OUT", "TTFT", "TTFO", "TPOT", "E2E", p->filter[0] ? "filter: " : "",
		    p->filter, p->filter[0] ? ", " : "", kt_sort_name[p->sort]);
	if (p->n == 0) {
		canvas_text(c, y + 1, 1, -1, CC_DIM, 0, p->filter[0] ? "no request matches the filter '%s'"
			    : "no requests in flight or finished before the window's end%s", p->filter);
		return;
	}
	for (int i = 0; i < h - 1 && p->top + i < p->n; i++)
		panel_row(c, y + 1 + i, width, &p->rows[p->top + i], p->top + i == p->sel);
}

static const struct kt_widget_class panel_class = {
	"requests", sizeof(struct panel), panel_height, panel_fill, panel_draw,
};

/* ---- status line ---------------------------------------------------------- */
struct status {
	struct kt_widget base;
	char text[200];
	int editing;
};

static int status_height(int w) { return 1; }

static void status_fill(struct kt_widget *w, const struct kt_data *d, const struct kt_view *v)
{
	struct status *st = (struct status *)w;
	st->editing = v->editing;
	if (v->editing)
		snprintf(st->text, sizeof(st->text), "filter (%s, Enter applies, Esc clears): %s_",
			 d->fleet ? "host name" : "id or state", v->edit);
	else if (v->message[0])
		snprintf(st->text, sizeof(st->text), "%s", v->message);
	else if (d->fleet)
		snprintf(st->text, sizeof(st->text), "q quit  h help  s sort  / filter  p pause  1/2/3 window 10s/1m/5m  "
			 "↑↓ scroll  ←→ %s", d->live ? "go back in time" : "move through time");
	else
		snprintf(st->text, sizeof(st->text), "q quit  h help  s sort  / filter  p pause  1/2/3 window 10s/1m/5m  "
			 "↑↓ scroll  ←→ %s  t hops  a tasks  g pods", d->live ? "go back in time" : "move through time");
}

static void status_draw(const struct kt_widget *w, struct canvas *c, int y, int width, int h)
{
	const struct status *st = (const struct status *)w;
	canvas_text(c, y, 0, width, st->editing ? CC_WARN : CC_DIM, st->editing ? CF_BOLD : 0, "%s", st->text);
}

static const struct kt_widget_class status_class = {
	"status", sizeof(struct status), status_height, status_fill, status_draw,
};

/* ---- the screen ------------------------------------------------------------ */
static const struct kt_widget_class *const trace_classes[] = {
	&title_class, &meters_class, &kt_cost_class, &latency_class, &phases_class, &kt_pd_class, &spark_class, &panel_class, &status_class,
};
_Static_assert(sizeof(trace_classes) / sizeof(*trace_classes) <= KT_NWIDGETS, "room for every widget");
/* a fleet's: every host a row (fleetview.c) */
static const struct kt_widget_class *const fleet_classes[] = {
	&title_class, &kt_fleet_meters_class, &kt_fleet_hosts_class, &status_class,
};

int kt_screen_init(struct kt_screen *s, int fleet)
{
	const struct kt_widget_class *const *classes = fleet ? fleet_classes : trace_classes;
	memset(s, 0, sizeof(*s));
	s->n = fleet ? (int)(sizeof(fleet_classes) / sizeof(*fleet_classes))
		     : (int)(sizeof(trace_classes) / sizeof(*trace_classes));
	for (int i = 0; i < s->n; i++) {
		s->w[i] = calloc(1, classes[i]->size);
		if (!s->w[i]) {
			kt_screen_free(s);
			return -1;
		}
		s->w[i]->cls = classes[i];
	}
	return 0;
}

void kt_screen_free(struct kt_screen *s)
{
	for (int i = 0; i < KT_NWIDGETS; i++) {
		free(s->w[i]);
		s->w[i] = NULL;
	}
	s->n = 0;
}

int kt_screen_fixed_rows(const struct kt_screen *s, int width)
{
	int rows = 0;
	for (int i = 0; i < s->n; i++) rows += s->w[i]->cls->height(width);
	return rows;
}

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
	"  t, Enter      the selected request's hops: every process it passed, one line",
	"                each on one time scale, with the rule that linked it (Esc back)",
	"  a             the agent tasks: their model and tool calls, retries, errors,",
	"                success, and their time split model / tool / the agent's own (Esc back)",
	"",
	"TTFO: the first answer event (reasoning not counted); TTFT: the first of any kind",
	"unlinked (header): calls no link rule could tie to a request: missing evidence,",
	"        not lost data (docs/agent.md, Hops)",
	"Phases: N net-in  Q queue  P prefill  D decode  O net-out",
	"        W server wait: queue and prefill together, where the request was",
	"        traced from its HTTP exchange (source H) and the split is unknown",
	"        x a disaggregated request's router, KV transfer and decode queue",
	"P/D line (router -> decode worker <- prefill worker): requests, KV bytes over",
	"        stream time, p99 of in net-in, rt router, pq prefill queue, pf prefill,",
	"        KV transfer, dq decode queue, dec decode, out net-out; slot waits",
	"        (running set full, KV blocks short) on the decode workers",
	"Column S: the request's source, U the engine's probes (usdt), H its HTTP exchange",
	"Percentiles interpolate between the closest ranks, as SQLite's percentile().",
	NULL,
};

static const char *const fleet_help_lines[] = {
	"kpitop keys (fleet view: every host shipping to ClickHouse)",
	"",
	"  q, F10        quit",
	"  h, F1, ?      this help (any key closes it)",
	"  s             sort the hosts: p99 TTFT, p50 TTFT, p99 TPOT, req/s, errors,",
	"                losses (largest first), host name",
	"  /             filter hosts by name (Enter applies, Esc clears)",
	"  p, space      pause / resume sampling",
	"  1 2 3         window of 10s, 1m, 5m",
	"  ↑ ↓ PgUp PgDn Home End   move in the host list",
	"  ← →           move the window back / forward through the fleet's rows",
	"                (← leaves live mode; → past the end returns to it)",
	"",
	"A host's row: the requests that arrived in the window (by their wall clock),",
	"its TTFT and TPOT percentiles, errors (429s apart), what its agent lost, and",
	"how long before the window's end its newest row was shipped (LAST).",
	"ClickHouse computes them (requests FINAL: a batch shipped twice counts once);",
	"percentiles interpolate between the closest ranks, as SQLite's percentile().",
	"One host's requests and phases: kpitop --db its trace, on that host.",
	NULL,
};

int kt_render(struct kt_screen *s, struct canvas *c, const struct kt_data *d, struct kt_view *v, int once)
{
	canvas_clear(c);
	if (v->help && !once) {
		const char *const *lines = d->fleet ? fleet_help_lines : help_lines;
		for (int i = 0; lines[i]; i++)
			canvas_text(c, 1 + i, 2, -1, i ? CC_DEFAULT : CC_LABEL, i ? 0 : CF_BOLD, "%s", lines[i]);
		return c->h;
	}
	int fixed = kt_screen_fixed_rows(s, c->w);
	int y = 0;
	for (int i = 0; i < s->n; i++) {
		struct kt_widget *wd = s->w[i];
		if (once && !strcmp(wd->cls->name, "status")) continue;
		int h = wd->cls->height(c->w);
		if (!h) {
			/* the one widget that takes the rest: the request panel */
			h = c->h - fixed;
			v->panel_rows = h - 1;
		}
		if (h <= 0) continue;
		wd->cls->fill(wd, d, v);
		wd->cls->draw(wd, c, y, c->w, h);
		y += h;
	}
	return y;
}
