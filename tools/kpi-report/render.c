/* render.c - kpi-report's two renderings of one analysis: markdown with
 * compact text charts, and a self-contained HTML page with inline SVG. */
#include "tools/kpi-report/report.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The phases in the order a request goes through them; a disaggregated one's
 * router, KV transfer and decode queue where the trace has them (its queue
 * and prefill are the prefill worker's). */
static const int pct_rows[] = { TM_TTFT, TM_TTFO, TM_TPOT, TM_ITL, TM_E2E, TM_NET_IN, TM_ROUTER, TM_QUEUE,
				TM_PREFILL, TM_SERVER_WAIT, TM_KV_TRANSFER, TM_DECODE_QUEUE, TM_DECODE,
				TM_NET_OUT, TM_RUNQ };
#define NPCT ((int)(sizeof(pct_rows) / sizeof(pct_rows[0])))

static char *D(char *b, double ns) { return timefmt_dur(b, 16, ns); }

/* Whether either window holds requests traced from their HTTP exchange. */
static int any_http(const struct report *r)
{
	return r->base.w.by_source[TRACE_SRC_HTTP] + r->inc.w.by_source[TRACE_SRC_HTTP] > 0;
}

/* A percentile row to leave out: the server wait, TTFO or a disaggregated
 * phase where no row has one. */
static int pct_skip(const struct report *r, int k)
{
	int m = pct_rows[k];
	return (m == TM_SERVER_WAIT || m == TM_TTFO || m == TM_ROUTER || m == TM_KV_TRANSFER ||
		m == TM_DECODE_QUEUE) && !r->base.w.m[m].n && !r->inc.w.m[m].n;
}

/* "120 usdt, 30 http" of a window, or "http (30)" when there is one source:
 * where its requests' rows came from. */
static char *sources(char *b, size_t n, const struct trace_window *w)
{
	const int *src = w->by_source;
	int kinds = 0, only = TRACE_SRC_USDT;
	size_t o = 0;
	for (int k = 0; k < TRACE_SRC_N; k++)
		if (src[k]) {
			kinds++;
			only = k;
		}
	if (kinds <= 1) {
		snprintf(b, n, "%s (%d)", trace_source_name[only], src[only]);
		return b;
	}
	b[0] = '\0';
	for (int k = 0; k < TRACE_SRC_N && o < n; k++)
		if (src[k])
			o += (size_t)snprintf(b + o, n - o, "%s%d %s", o ? ", " : "", src[k], trace_source_name[k]);
	return b;
}

static const char sources_note[] = "usdt: the engine's probes, with its queue and prefill split; http: the "
				   "server's HTTP exchange, where queue and prefill are one server wait; http (split "
				   "inferred): queue and prefill inferred from the server's stream timing (docs/agent.md, "
				   "\"The inferred split\")";

/* The phases of a waterfall in order, with an http row's server wait (W)
 * after net-in; a phase the row does not know is -1. */
#define WF_N (PH_N + 1)
static const char wf_glyph[WF_N] = { 'N', 'W', 'Q', 'P', 'D', 'O' };
static const char *const wf_name[WF_N] = { "net-in", "server wait", "queue", "prefill", "decode", "net-out" };
static const char *const wf_color[WF_N] = { "#4e79a7", "#e15759", "#f28e2b", "#b07aa1", "#59a14f", "#76b7b2" };
static void wf_phases(const struct trace_req *q, int64_t *v)
{
	v[0] = q->phase[PH_NET_IN];
	v[1] = q->source == TRACE_SRC_HTTP ? q->server_wait_ns : -1;
	for (int p = PH_QUEUE; p < PH_N; p++) v[p + 1] = q->phase[p];
}

/* "+35%", or past +1,000% a factor ("×120"): a percentage that long reads as noise. */
static char *change(char *b, double base, double inc)
{
	if (base <= 0 && inc <= 0) snprintf(b, 24, "–");
	else if (base <= 0) snprintf(b, 24, "new");
	else if (inc / base > 11) snprintf(b, 24, "×%.0f", inc / base);
	else snprintf(b, 24, "%+.0f%%", (inc - base) / base * 100);
	return b;
}

/* The percentiles table: p50 and p99 of both windows with their change, or
 * of the one window. */
static void pct_table(const struct report *r, FILE *o, int html)
{
	const struct trace_window *bw = &r->base.w, *iw = &r->inc.w;
	if (html && r->compare)
		fprintf(o, "<table><tr><th>metric</th><th>p50 baseline</th><th>p50 incident</th><th>change</th>"
			"<th>p99 baseline</th><th>p99 incident</th><th>change</th></tr>\n");
	else if (html)
		fprintf(o, "<table><tr><th>metric</th><th>p50</th><th>p99</th></tr>\n");
	else if (r->compare)
		fprintf(o, "| metric | p50 baseline | p50 incident | change | p99 baseline | p99 incident | change |\n"
			"|---|---:|---:|---:|---:|---:|---:|\n");
	else
		fprintf(o, "| metric | p50 | p99 |\n|---|---:|---:|\n");
	for (int k = 0; k < NPCT; k++) {
		if (pct_skip(r, k)) continue;
		const struct trace_dist *m0 = &bw->m[pct_rows[k]], *m1 = &iw->m[pct_rows[k]];
		char p0[16], p1[16], q0[16], q1[16], c1[24], c2[24];
		const char *name = trace_metric_name[pct_rows[k]];
		D(p0, m0->n ? m0->p50 : -1);
		D(p1, m1->n ? m1->p50 : -1);
		D(q0, m0->n ? m0->p99 : -1);
		D(q1, m1->n ? m1->p99 : -1);
		change(c1, m0->p50, m1->p50);
		change(c2, m0->p99, m1->p99);
		if (html && r->compare)
			fprintf(o, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
				name, p0, p1, c1, q0, q1, c2);
		else if (html)
			fprintf(o, "<tr><td>%s</td><td>%s</td><td>%s</td></tr>\n", name, p1, q1);
		else if (r->compare)
			fprintf(o, "| %s | %s | %s | %s | %s | %s | %s |\n", name, p0, p1, c1, q0, q1, c2);
		else
			fprintf(o, "| %s | %s | %s |\n", name, p1, q1);
	}
	if (html)
		fprintf(o, "</table>\n");
}

struct series {
	const char *name;
	double v[RP_TIMELINE];
	int dur;                        /* values are ns */
};

static int timeline_series(const struct report *r, struct series *s)
{
	const char *names[6] = { "p99 TTFT", "queue depth", "running", "KV usage %", "preemptions", "rejections" };
	for (int k = 0; k < 6; k++) {
		s[k].name = names[k];
		s[k].dur = k == 0;
		for (int i = 0; i < RP_TIMELINE; i++) {
			const struct trace_point *p = &r->tl[i];
			double v = 0;
			switch (k) {
			case 0: v = p->ttft_p99; break;
			case 1: v = p->queue_depth_max; break;
			case 2: v = p->running_max; break;
			case 3: v = p->kv_usage_max >= 0 ? p->kv_usage_max * 100 : 0; break;
			case 4: v = (double)p->preemptions; break;
			case 5: v = (double)p->rejections; break;
			}
			s[k].v[i] = v;
		}
	}
	return 6;
}

static int in_window(const struct report *r, int i, const struct rp_window *w)
{
	int64_t t = r->tl[i].t_ns;
	int64_t bw = (r->tl_to - r->tl_from) / RP_TIMELINE;
	return t + bw > w->from_ns && t < w->to_ns;
}

/* A window of http rows without the engine's samples: its queue depth is
 * unknown, not 0. */
static int no_samples(const struct trace_window *w)
{
	return !w->samples && (w->by_source[TRACE_SRC_HTTP] || w->by_source[TRACE_SRC_LIBLLAMA] ||
			       w->by_source[TRACE_SRC_INFERRED]);
}

static void summary_rows(const struct report *r, FILE *o, int html)
{
	const struct trace_window *b = &r->base.w, *i = &r->inc.w;
	struct { const char *name; double bv, iv; const char *fmt; } rows[] = {
		{ "requests", b->requests, i->requests, "%.0f" },
		{ "finished", b->done, i->done, "%.0f" },
		{ "errors", b->errors, i->errors, "%.0f" },
		{ "rejections (429)", b->samples ? b->rejections : b->rejected, i->samples ? i->rejections : i->rejected, "%.0f" },
		{ "preemptions", b->preemptions > b->preempted ? b->preemptions : b->preempted,
		  i->preemptions > i->preempted ? i->preemptions : i->preempted, "%.0f" },
		{ "requests/s", b->req_per_s, i->req_per_s, "%.2f" },
		{ "output tokens/s", b->out_tok_per_s, i->out_tok_per_s, "%.1f" },
		{ "peak queue depth", no_samples(b) ? -1 : b->queue_depth_max, no_samples(i) ? -1 : i->queue_depth_max, "%.0f" },
		{ "peak KV usage %", b->kv_usage_max * 100, i->kv_usage_max * 100, "%.0f" },
		{ "ring-buffer drops", b->drops, i->drops, "%.0f" },
		{ "lost by the agent (all causes)", (double)b->lost, (double)i->lost, "%.0f" },
		{ "calls not linked to a request (missing evidence, not lost)", (double)b->unlinked,
		  (double)i->unlinked, "%.0f" },
	};
	for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
		char bv[32], iv[32];
		snprintf(bv, sizeof(bv), rows[k].fmt, rows[k].bv);
		snprintf(iv, sizeof(iv), rows[k].fmt, rows[k].iv);
		if (rows[k].bv < 0) snprintf(bv, sizeof(bv), "-");
		if (rows[k].iv < 0) snprintf(iv, sizeof(iv), "-");
		rp_row(o, html, r->compare, rows[k].name, bv, iv);
	}
	/* a llama.cpp engine's prefix cache, where the trace has one */
	const struct trace_reuse *rb = &r->base.reuse, *ri = &r->inc.reuse;
	if (rb->requests || ri->requests) {
		char bv[32] = "-", iv[32] = "-";
		if (rb->hit_ratio >= 0) snprintf(bv, sizeof(bv), "%.0f", rb->hit_ratio * 100);
		if (ri->hit_ratio >= 0) snprintf(iv, sizeof(iv), "%.0f", ri->hit_ratio * 100);
		const char *name = "prompt tokens from the prefix cache %";
		if (html) fprintf(o, "<tr><td>%s</td><td>%s</td><td>%s</td></tr>\n", name, bv, iv);
		else fprintf(o, "| %s | %s | %s |\n", name, bv, iv);
	}
}

/* ---- markdown ------------------------------------------------------------- */

static void md_spark(FILE *o, const double *v, int n)
{
	static const char *const g[8] = { "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█" };
	double mx = 0;
	for (int i = 0; i < n; i++) mx = fmax(mx, v[i]);
	for (int i = 0; i < n; i++) fputs(g[mx > 0 ? (int)fmin(v[i] / mx * 7.999, 7) : 0], o);
}

static void md_waterfall(FILE *o, const struct trace_req *q, double scale_ns, int width)
{
	int col = 0;
	double t = 0;
	int64_t v[WF_N];
	wf_phases(q, v);
	for (int p = 0; p < WF_N; p++) {
		if (v[p] < 0) continue;
		t += (double)v[p];
		int end = (int)lround(t / scale_ns * width);
		for (; col < end; col++) fputc(wf_glyph[p], o);
	}
	if (col == 0) fputc('|', o);
}

void report_markdown(const struct report *r, FILE *o)
{
	char a[40], b[40], c[40], d[40], x[16], y[16];
	const struct trace_window *bw = &r->base.w, *iw = &r->inc.w;
	fprintf(o, "# kpi-report: %s\n\n", report_source(r));
	fprintf(o, "- **%s**: %s → %s (%s; %s)\n", r->compare ? "Incident window" : "Window",
		trace_fmt_time(r->t, a, sizeof(a), r->inc.from_ns, 1),
		trace_fmt_time(r->t, b, sizeof(b), r->inc.to_ns, 1), D(x, (double)(r->inc.to_ns - r->inc.from_ns)), r->inc_how);
	if (r->compare) {
		fprintf(o, "- **Baseline window**: %s → %s (%s)\n", trace_fmt_time(r->t, c, sizeof(c), r->base.from_ns, 1),
			trace_fmt_time(r->t, d, sizeof(d), r->base.to_ns, 1), r->base_how);
		fprintf(o, "- **Sources**: incident %s; baseline %s (%s)\n\n", sources(a, sizeof(a), iw),
			sources(b, sizeof(b), bw), sources_note);
	} else {
		fprintf(o, "- **Baseline window**: %s\n", r->base_how);
		fprintf(o, "- **Sources**: %s (%s)\n\n", sources(a, sizeof(a), iw), sources_note);
	}

	fprintf(o, "## Findings\n\n%s\n\n", r->compare ? "Strongest evidence first." :
		"Nothing stood out: no stretch of the window was worse than the rest, so no cause is named.");
	for (int k = 0; k < r->nf; k++) {
		const struct rp_finding *f = &r->f[k];
		fprintf(o, "%d. **%s** — phase: **%s**; cause: **%s**.  \n   Evidence: %s.  \n   Next: %s.\n", k + 1,
			f->title, f->phase, f->cause, f->evidence, f->action);
	}

	if (r->compare) {
		fprintf(o, "\n## Where the time went\n\n");
		for (int k = 0; k < 4; k++) fprintf(o, "- %s\n", r->attr[k].words);
		if (r->pd_words[0]) fprintf(o, "- %s\n", r->pd_words);
	}

	report_fleet_render(r, o, 0);
	report_pods_render(r, o, 0);
	fprintf(o, "\n## Summary\n\n");
	rp_table_head(o, 0, r->compare);
	summary_rows(r, o, 0);
	report_cost_render(r, o, 0);
	report_agents_render(r, o, 0);
	report_weights_render(r, o, 0);

	fprintf(o, "\n## %s\n\n", r->compare ? "Percentiles" : "Percentiles and phases");
	pct_table(r, o, 0);

	struct series s[6];
	int ns = timeline_series(r, s);
	fprintf(o, "\n## Timelines\n\n%s → %s, %d buckets of %s; %s.\n\n```\n",
		trace_fmt_time(r->t, a, sizeof(a), r->tl_from, 0), trace_fmt_time(r->t, b, sizeof(b), r->tl_to, 0),
		RP_TIMELINE, D(x, (double)(r->tl_to - r->tl_from) / RP_TIMELINE),
		r->compare ? "`b` marks the baseline, `^` the incident" : "`^` marks the window");
	for (int k = 0; k < ns; k++) {
		double mx = 0;
		for (int i = 0; i < RP_TIMELINE; i++) mx = fmax(mx, s[k].v[i]);
		fprintf(o, "%-12s ", s[k].name);
		md_spark(o, s[k].v, RP_TIMELINE);
		if (s[k].dur) fprintf(o, "  max %s\n", D(y, mx));
		else fprintf(o, "  max %.0f\n", mx);
	}
	fprintf(o, "%-12s ", "");
	for (int i = 0; i < RP_TIMELINE; i++)
		fputc(in_window(r, i, &r->inc) ? '^' : in_window(r, i, &r->base) ? 'b' : ' ', o);
	fprintf(o, "\n```\n");

	fprintf(o, "\n## Slowest requests in the %s\n\n`N` net-in, `Q` queue, `P` prefill, `D` decode, "
		"`O` net-out%s, on one time scale.\n\n| request | source | arrived | e2e | TTFT | prompt | output | preempted | waterfall |\n"
		"|---|---|---|---:|---:|---:|---:|---:|---|\n", r->compare ? "incident window" : "window", any_http(r) ? ", `W` server wait (http rows: queue and prefill "
		"together)" : "");
	double scale = r->nslow ? (double)(r->slow[0].e2e_ns > 0 ? r->slow[0].e2e_ns : 1) : 1;
	for (int k = 0; k < r->nslow; k++) {
		const struct trace_req *q = &r->slow[k];
		fprintf(o, "| `%s` | %s | %s | %s | %s | %d | %d | %d | `", q->id, trace_source_name[q->source],
			trace_fmt_time(r->t, a, sizeof(a), q->t_arrive_ns, 0),
			D(x, (double)q->e2e_ns), D(y, (double)q->ttft_ns), q->prompt_tokens, q->output_tokens, q->preemptions);
		md_waterfall(o, q, scale, 40);
		fprintf(o, "` |\n");
	}
	fprintf(o, "\nPercentiles interpolate between the closest ranks (as SQLite's percentile()); the phase split "
		"of a percentile compares the mean phases of the requests ranked within ±1 (p99) or ±5 (p50) "
		"percentiles of it in each window.\n");
}

/* ---- HTML ------------------------------------------------------------------ */

static void html_esc(FILE *o, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '<': fputs("&lt;", o); break;
		case '>': fputs("&gt;", o); break;
		case '&': fputs("&amp;", o); break;
		case '"': fputs("&quot;", o); break;
		default: fputc(*s, o);
		}
	}
}

static void svg_chart(FILE *o, const struct report *r, const struct series *s)
{
	const int W = 640, H = 110, L = 70, B = 18;
	double mx = 0;
	for (int i = 0; i < RP_TIMELINE; i++) mx = fmax(mx, s->v[i]);
	char y[16], a[40], b[40];
	fprintf(o, "<figure><figcaption>%s</figcaption><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
		"height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"%s timeline\">\n", s->name, W, H, W, H, s->name);
	double cw = (double)(W - L) / RP_TIMELINE;
	const struct rp_window *ws[2] = { &r->base, &r->inc };
	const char *fills[2] = { "#59a14f", "#e15759" };
	for (int k = 0; k < 2; k++) {
		int i0 = -1, i1 = -1;
		for (int i = 0; i < RP_TIMELINE; i++)
			if (in_window(r, i, ws[k])) {
				if (i0 < 0) i0 = i;
				i1 = i;
			}
		if (i0 >= 0)
			fprintf(o, "<rect x=\"%.1f\" y=\"0\" width=\"%.1f\" height=\"%d\" fill=\"%s\" opacity=\"0.15\"/>\n",
				L + i0 * cw, (i1 - i0 + 1) * cw, H - B, fills[k]);
	}
	fprintf(o, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#888\"/>\n", L, H - B, W, H - B);
	fprintf(o, "<polyline fill=\"none\" stroke=\"#333\" stroke-width=\"1.5\" points=\"");
	for (int i = 0; i < RP_TIMELINE; i++)
		fprintf(o, "%.1f,%.1f ", L + (i + 0.5) * cw, (H - B) - (mx > 0 ? s->v[i] / mx : 0) * (H - B - 8));
	fprintf(o, "\"/>\n");
	if (s->dur) D(y, mx);
	else snprintf(y, sizeof(y), "%.0f", mx);
	fprintf(o, "<text x=\"2\" y=\"12\" font-size=\"11\">max %s</text>\n", y);
	fprintf(o, "<text x=\"%d\" y=\"%d\" font-size=\"11\">%s</text><text x=\"%d\" y=\"%d\" font-size=\"11\" "
		"text-anchor=\"end\">%s</text>\n", L, H - 4, trace_fmt_time(r->t, a, sizeof(a), r->tl_from, 0), W, H - 4,
		trace_fmt_time(r->t, b, sizeof(b), r->tl_to, 0));
	fprintf(o, "</svg></figure>\n");
}

static void svg_waterfall(FILE *o, const struct trace_req *q, double scale_ns)
{
	const int W = 360, H = 14;
	fprintf(o, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\">", W, H);
	double t = 0;
	int64_t v[WF_N];
	wf_phases(q, v);
	for (int p = 0; p < WF_N; p++) {
		if (v[p] <= 0) continue;
		double x = t / scale_ns * W, w = (double)v[p] / scale_ns * W;
		char d[16];
		fprintf(o, "<rect x=\"%.1f\" y=\"1\" width=\"%.1f\" height=\"%d\" fill=\"%s\"><title>%s %s</title></rect>",
			x, w < 0.5 ? 0.5 : w, H - 2, wf_color[p], wf_name[p], D(d, (double)v[p]));
		t += (double)v[p];
	}
	fprintf(o, "</svg>");
}

void report_html(const struct report *r, FILE *o)
{
	char a[40], b[40], x[16], y[16];
	const struct trace_window *bw = &r->base.w, *iw = &r->inc.w;
	fprintf(o, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>kpi-report: ");
	html_esc(o, report_source(r));
	fprintf(o, "</title>\n<style>body{font:14px/1.4 system-ui,sans-serif;max-width:1000px;margin:2em auto;padding:0 1em}"
		"table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
		"td:first-child,th:first-child{text-align:left}figure{margin:.5em 0}figcaption{font-weight:600}"
		".f{margin:.6em 0}.legend span{display:inline-block;width:10px;height:10px;margin:0 4px 0 12px}</style>"
		"</head><body>\n<h1>kpi-report: ");
	html_esc(o, report_source(r));
	fprintf(o, "</h1>\n<ul><li><b>%s</b>: %s → %s (%s; ", r->compare ? "Incident window" : "Window",
		trace_fmt_time(r->t, a, sizeof(a), r->inc.from_ns, 1),
		trace_fmt_time(r->t, b, sizeof(b), r->inc.to_ns, 1), D(x, (double)(r->inc.to_ns - r->inc.from_ns)));
	html_esc(o, r->inc_how);
	if (r->compare) {
		fprintf(o, ")</li><li><b>Baseline window</b>: %s → %s (", trace_fmt_time(r->t, a, sizeof(a), r->base.from_ns, 1),
			trace_fmt_time(r->t, b, sizeof(b), r->base.to_ns, 1));
		html_esc(o, r->base_how);
		fprintf(o, ")</li><li><b>Sources</b>: incident %s; baseline %s (", sources(a, sizeof(a), iw), sources(b, sizeof(b), bw));
	} else {
		fprintf(o, ")</li><li><b>Baseline window</b>: ");
		html_esc(o, r->base_how);
		fprintf(o, "</li><li><b>Sources</b>: %s (", sources(a, sizeof(a), iw));
	}
	html_esc(o, sources_note);
	fprintf(o, ")</li></ul>\n<h2>Findings</h2>\n<p>%s</p><ol>\n", r->compare ? "Strongest evidence first." :
		"Nothing stood out: no stretch of the window was worse than the rest, so no cause is named.");
	for (int k = 0; k < r->nf; k++) {
		const struct rp_finding *f = &r->f[k];
		fprintf(o, "<li class=\"f\"><b>");
		html_esc(o, f->title);
		fprintf(o, "</b> — phase: <b>%s</b>; cause: <b>%s</b>.<br>Evidence: ", f->phase, f->cause);
		html_esc(o, f->evidence);
		fprintf(o, ".<br>Next: ");
		html_esc(o, f->action);
		fprintf(o, ".</li>\n");
	}
	fprintf(o, "</ol>\n");
	if (r->compare) {
		fprintf(o, "<h2>Where the time went</h2>\n<ul>\n");
		for (int k = 0; k < 4; k++) {
			fprintf(o, "<li>");
			html_esc(o, r->attr[k].words);
			fprintf(o, "</li>\n");
		}
		if (r->pd_words[0]) {
			fprintf(o, "<li>");
			html_esc(o, r->pd_words);
			fprintf(o, "</li>\n");
		}
		fprintf(o, "</ul>\n");
	}
	report_fleet_render(r, o, 1);
	report_pods_render(r, o, 1);
	fprintf(o, "<h2>Summary</h2>\n");
	rp_table_head(o, 1, r->compare);
	summary_rows(r, o, 1);
	fprintf(o, "</table>\n");
	report_cost_render(r, o, 1);
	report_agents_render(r, o, 1);
	report_weights_render(r, o, 1);
	fprintf(o, "<h2>%s</h2>\n", r->compare ? "Percentiles" : "Percentiles and phases");
	pct_table(r, o, 1);
	fprintf(o, "<h2>Timelines</h2>\n<p>%s</p>\n", r->compare ? "Green: baseline; red: incident." :
		"Red: the window.");
	struct series s[6];
	int ns = timeline_series(r, s);
	for (int k = 0; k < ns; k++) svg_chart(o, r, &s[k]);
	fprintf(o, "<h2>Slowest requests in the %s</h2>\n<p class=\"legend\">", r->compare ? "incident window" : "window");
	for (int p = 0; p < WF_N; p++)
		if (p != 1 || any_http(r)) fprintf(o, "<span style=\"background:%s\"></span>%s", wf_color[p], wf_name[p]);
	fprintf(o, "</p>\n<table><tr><th>request</th><th>source</th><th>arrived</th><th>e2e</th><th>TTFT</th><th>prompt</th><th>output</th>"
		"<th>preempted</th><th>waterfall</th></tr>\n");
	double scale = r->nslow ? (double)(r->slow[0].e2e_ns > 0 ? r->slow[0].e2e_ns : 1) : 1;
	for (int k = 0; k < r->nslow; k++) {
		const struct trace_req *q = &r->slow[k];
		fprintf(o, "<tr><td><code>");
		html_esc(o, q->id);
		fprintf(o, "</code></td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%d</td><td>%d</td><td>%d</td><td>",
			trace_source_name[q->source], trace_fmt_time(r->t, a, sizeof(a), q->t_arrive_ns, 0), D(x, (double)q->e2e_ns), D(y, (double)q->ttft_ns),
			q->prompt_tokens, q->output_tokens, q->preemptions);
		svg_waterfall(o, q, scale);
		fprintf(o, "</td></tr>\n");
	}
	fprintf(o, "</table>\n<p>Percentiles interpolate between the closest ranks (as SQLite's percentile()); the "
		"phase split of a percentile compares the mean phases of the requests ranked within ±1 (p99) or ±5 "
		"(p50) percentiles of it in each window.</p>\n</body></html>\n");
}
