/* html.c - kpi-bench --sweep --html: one self-contained page (inline SVG and
 * CSS, no script, nothing fetched) with the curves of a sweep and its table. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "tools/kpi-bench/bench.h"

#define CH_W 760
#define CH_H 330
#define M_LEFT 72
#define M_RIGHT 24
#define M_TOP 40
#define M_BOTTOM 52
#define PLOT_W (CH_W - M_LEFT - M_RIGHT)
#define PLOT_H (CH_H - M_TOP - M_BOTTOM)

/* One curve: a field of struct sweep_point, in ms or req/s. */
struct series {
	const char *key, *label, *color;
	size_t off;
	bool dashed;
};

static double field(const struct sweep_point *p, size_t off)
{
	return *(const double *)((const char *)p + off);
}

static const struct series ttft_series[] = {
	{ "ttft_p50", "TTFT p50", "#1f77b4", offsetof(struct sweep_point, ttft_p50), false },
	{ "ttft_p99", "TTFT p99", "#d62728", offsetof(struct sweep_point, ttft_p99), false },
};
static const struct series tpot_series[] = {
	{ "tpot_p50", "TPOT p50", "#1f77b4", offsetof(struct sweep_point, tpot_p50), false },
	{ "tpot_p99", "TPOT p99", "#d62728", offsetof(struct sweep_point, tpot_p99), false },
};
static const struct series good_series[] = {
	{ "throughput", "throughput (req/s)", "#7f7f7f", offsetof(struct sweep_point, throughput_rps), true },
	{ "goodput", "goodput (req/s)", "#2ca02c", offsetof(struct sweep_point, goodput_rps), false },
};
static const char *const phase_labels[5] = { "network in", "queue", "prefill", "decode", "network out" };
static const char *const phase_keys[5] = { "net_in", "queue", "prefill", "decode", "net_out" };
static const char *const phase_colors[5] = { "#9467bd", "#d62728", "#ff7f0e", "#1f77b4", "#8c564b" };

static void esc(FILE *f, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '&': fputs("&amp;", f); break;
		case '"': fputs("&quot;", f); break;
		default: fputc(*s, f);
		}
	}
}

/* ---- axes ------------------------------------------------------------------ */

struct axis {
	double lo, hi;
	bool log;
};

/* 1, 2 or 5 times a power of ten: about n ticks over span. */
static double nice_step(double span, int n)
{
	double raw = span / n, p = pow(10, floor(log10(raw))), m = raw / p;
	return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

static double x_px(const struct axis *a, double v)
{
	double t = a->log ? (log2(v) - log2(a->lo)) / (log2(a->hi) - log2(a->lo)) : (v - a->lo) / (a->hi - a->lo);
	return M_LEFT + t * PLOT_W;
}

static double y_px(const struct axis *a, double v)
{
	return M_TOP + PLOT_H - (v - a->lo) / (a->hi - a->lo) * PLOT_H;
}

/* Loads are mostly doublings: a log2 axis when they span a factor of 4. */
static struct axis x_axis(const struct sweep *sw)
{
	struct axis a = { sw->pts[0].load, sw->pts[sw->n - 1].load, false };
	if (a.lo > 0 && a.hi / a.lo >= 4) {
		a.log = true;
		a.lo = pow(2, floor(log2(a.lo)));
		a.hi = pow(2, ceil(log2(a.hi)));
	} else {
		double pad = a.hi > a.lo ? (a.hi - a.lo) * 0.08 : (a.hi > 0 ? a.hi * 0.5 : 1);
		a.lo = fmax(0, a.lo - pad);
		a.hi += pad;
	}
	return a;
}

static struct axis y_axis(double max)
{
	struct axis a = { 0, max > 0 ? max * 1.08 : 1, false };
	a.hi = ceil(a.hi / nice_step(a.hi, 5)) * nice_step(a.hi, 5);
	return a;
}

static void draw_frame(FILE *f, const char *title, const char *xlabel, const char *ylabel)
{
	fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", CH_W, CH_H);
	fprintf(f, "<text class=\"title\" x=\"%d\" y=\"22\">", M_LEFT);
	esc(f, title);
	fprintf(f, "</text>\n<text class=\"label\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">", M_LEFT + PLOT_W / 2, CH_H - 10);
	esc(f, xlabel);
	fprintf(f, "</text>\n<text class=\"label\" transform=\"translate(16 %d) rotate(-90)\" text-anchor=\"middle\">",
		M_TOP + PLOT_H / 2);
	esc(f, ylabel);
	fputs("</text>\n", f);
	fprintf(f, "<line class=\"axis\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>\n", M_LEFT, M_TOP + PLOT_H,
		M_LEFT + PLOT_W, M_TOP + PLOT_H);
	fprintf(f, "<line class=\"axis\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>\n", M_LEFT, M_TOP, M_LEFT, M_TOP + PLOT_H);
}

static void draw_y_ticks(FILE *f, const struct axis *y)
{
	double step = nice_step(y->hi - y->lo, 5);
	for (double v = y->lo; v <= y->hi + step * 1e-6; v += step) {
		double py = y_px(y, v);
		fprintf(f, "<line class=\"grid\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>"
			"<text class=\"tick\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
			M_LEFT, py, M_LEFT + PLOT_W, py, M_LEFT - 6, py + 4, v);
	}
}

static void draw_x_ticks(FILE *f, const struct axis *x)
{
	if (x->log) {
		int k0 = (int)lround(log2(x->lo)), k1 = (int)lround(log2(x->hi));
		int every = (k1 - k0) > 10 ? 2 : 1;
		for (int k = k0; k <= k1; k += every) {
			double px = x_px(x, pow(2, k));
			fprintf(f, "<line class=\"grid\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>"
				"<text class=\"tick\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n",
				px, M_TOP, px, M_TOP + PLOT_H, px, M_TOP + PLOT_H + 16, pow(2, k));
		}
		return;
	}
	double step = nice_step(x->hi - x->lo, 6);
	for (double v = ceil(x->lo / step) * step; v <= x->hi + step * 1e-6; v += step) {
		double px = x_px(x, v);
		fprintf(f, "<line class=\"grid\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>"
			"<text class=\"tick\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n",
			px, M_TOP, px, M_TOP + PLOT_H, px, M_TOP + PLOT_H + 16, v);
	}
}

static void draw_legend(FILE *f, const char *const *labels, const char *const *colors, int n)
{
	int x = M_LEFT + PLOT_W;
	for (int i = n - 1; i >= 0; i--) {
		x -= 14 + 7 * (int)strlen(labels[i]) + 16;
		fprintf(f, "<rect x=\"%d\" y=\"12\" width=\"12\" height=\"12\" fill=\"%s\"/>"
			"<text class=\"tick\" x=\"%d\" y=\"22\">", x, colors[i], x + 16);
		esc(f, labels[i]);
		fputs("</text>\n", f);
	}
}

/* A vertical line at load with its label, on the side that has room. */
static void draw_mark(FILE *f, const struct axis *x, double load, const char *cls, const char *label, int dy)
{
	double px = x_px(x, load);
	bool left = px > M_LEFT + PLOT_W - 70;
	fprintf(f, "<line class=\"%s\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>"
		"<text class=\"tick\" x=\"%.1f\" y=\"%d\" text-anchor=\"%s\">%s</text>\n", cls, px, M_TOP, px,
		M_TOP + PLOT_H, left ? px - 4 : px + 4, M_TOP + dy, left ? "end" : "start", label);
}

/* The knee and the highest load that met the SLO. */
static void draw_marks(FILE *f, const struct sweep *sw, const struct axis *x)
{
	if (sw->knee >= 0)
		draw_mark(f, x, sw->pts[sw->knee].load, "knee", "knee", 12);
	if (sw->best >= 0)
		draw_mark(f, x, sw->pts[sw->best].load, "best", "max SLO", 26);
}

/* ---- charts ------------------------------------------------------------------ */

/* One line chart: each series as a polyline and one marker per point
 * (class "pt", data-series), an optional horizontal bound (slo > 0). */
static void chart_lines(FILE *f, const struct sweep *sw, const char *title, const char *ylabel,
			const struct series *s, int ns, double slo)
{
	double ymax = slo > 0 ? slo : 0;
	for (int k = 0; k < ns; k++)
		for (size_t i = 0; i < sw->n; i++)
			ymax = fmax(ymax, field(&sw->pts[i], s[k].off));
	struct axis x = x_axis(sw), y = y_axis(ymax);
	fprintf(f, "<figure>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		"viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"", CH_W, CH_H, CH_W, CH_H);
	esc(f, title);
	fputs("\">\n", f);
	char xlabel[64];
	snprintf(xlabel, sizeof(xlabel), "offered load (%s)", sweep_load_unit(sw));
	draw_frame(f, title, xlabel, ylabel);
	draw_y_ticks(f, &y);
	draw_x_ticks(f, &x);
	if (slo > 0)
		fprintf(f, "<line class=\"slo\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>"
			"<text class=\"tick\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">SLO %g ms</text>\n",
			M_LEFT, y_px(&y, slo), M_LEFT + PLOT_W, y_px(&y, slo), M_LEFT + PLOT_W - 4, y_px(&y, slo) - 4, slo);
	draw_marks(f, sw, &x);
	const char *labels[4], *colors[4];
	for (int k = 0; k < ns; k++) {
		labels[k] = s[k].label;
		colors[k] = s[k].color;
		fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", s[k].color,
			s[k].dashed ? " stroke-dasharray=\"6 4\"" : "");
		for (size_t i = 0; i < sw->n; i++) {
			double v = field(&sw->pts[i], s[k].off);
			if (v >= 0)
				fprintf(f, "%.1f,%.1f ", x_px(&x, sw->pts[i].load), y_px(&y, v));
		}
		fputs("\"/>\n", f);
		/* a load that was not sustained: a hollow mark, its reason in the tooltip */
		for (size_t i = 0; i < sw->n; i++) {
			const struct sweep_point *p = &sw->pts[i];
			double v = field(p, s[k].off);
			if (v < 0)
				continue;
			bool held = p->steady.sustained;
			fprintf(f, "<circle class=\"pt\" data-series=\"%s\" data-load=\"%g\" data-sustained=\"%s\" "
				"cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\" stroke=\"%s\" stroke-width=\"2\">"
				"<title>%s at %g %s: %.2f%s", s[k].key, p->load, held ? "yes" : "no", x_px(&x, p->load),
				y_px(&y, v), held ? s[k].color : "#ffffff", s[k].color, s[k].label, p->load,
				sweep_load_unit(sw), v, held ? "" : " (not sustained: ");
			if (!held) {
				esc(f, p->steady.why);
				fputc(')', f);
			}
			fputs("</title></circle>\n", f);
		}
	}
	draw_legend(f, labels, colors, ns);
	fputs("</svg>\n</figure>\n", f);
}

/* The server-side phases, one stacked bar per point (evenly spaced: the
 * bisection's points sit too close for a load axis). */
static void chart_phases(FILE *f, const struct sweep *sw)
{
	double ymax = 0;
	for (size_t i = 0; i < sw->n; i++) {
		double sum = 0;
		for (int ph = 0; ph < 5; ph++)
			sum += sw->pts[i].phase_ms[ph];
		ymax = fmax(ymax, sum);
	}
	struct axis y = y_axis(ymax);
	const char *title = "Server-side phases per point (mean per request, kpi-agent trace)";
	fprintf(f, "<figure>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		"viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"%s\">\n", CH_W, CH_H, CH_W, CH_H, title);
	char xlabel[64];
	snprintf(xlabel, sizeof(xlabel), "offered load (%s), one bar per point", sweep_load_unit(sw));
	draw_frame(f, title, xlabel, "ms per request");
	draw_y_ticks(f, &y);
	double slot = (double)PLOT_W / (double)sw->n, bw = fmin(40, slot * 0.6);
	for (size_t i = 0; i < sw->n; i++) {
		const struct sweep_point *p = &sw->pts[i];
		double cx = M_LEFT + slot * (i + 0.5), base = 0;
		fprintf(f, "<text class=\"tick\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", cx,
			M_TOP + PLOT_H + 16, p->load);
		for (int ph = 0; ph < 5; ph++) {
			double v = p->phase_ms[ph], y0 = y_px(&y, base), y1 = y_px(&y, base + v);
			fprintf(f, "<rect class=\"pt\" data-series=\"%s\" data-load=\"%g\" x=\"%.1f\" y=\"%.1f\" "
				"width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>%s at %g %s: %.3f ms (%ld requests)</title></rect>\n",
				phase_keys[ph], p->load, cx - bw / 2, y1, bw, y0 - y1, phase_colors[ph], phase_labels[ph],
				p->load, sweep_load_unit(sw), v, p->phase_n);
			base += v;
		}
	}
	draw_legend(f, phase_labels, phase_colors, 5);
	fputs("</svg>\n</figure>\n", f);
}

/* ---- the page ------------------------------------------------------------------ */

static const char page_style[] =
	"body{font-family:sans-serif;margin:24px;color:#222;background:#fff}"
	"h1{font-size:20px}p{max-width:60em}"
	"figure{margin:12px 0}svg{display:block;border:1px solid #ddd}"
	"svg text{font-family:sans-serif}"
	".title{font-size:15px;font-weight:bold}.label{font-size:13px}.tick{font-size:11px;fill:#333}"
	".axis{stroke:#222;stroke-width:1.2}.grid{stroke:#e4e4e4;stroke-width:1}"
	".slo{stroke:#d62728;stroke-width:1;stroke-dasharray:3 3}"
	".knee{stroke:#555;stroke-width:1.5;stroke-dasharray:5 4}.best{stroke:#2ca02c;stroke-width:1.5}"
	"table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
	".miss{background:#fde0e0}td.why{text-align:left}";

static void ms_td(FILE *f, double v)
{
	if (v >= 0)
		fprintf(f, "<td>%.2f</td>", v);
	else
		fputs("<td>-</td>", f);
}

static void page_table(FILE *f, const struct sweep *sw)
{
	fprintf(f, "<table>\n<tr><th>%s</th><th>requests</th><th>ok</th><th>failed</th><th>req/s</th>"
		"<th>goodput req/s</th><th>met SLO</th><th>output tok/s</th><th>TTFT p50</th><th>TTFT p99</th>"
		"<th>TPOT p50</th><th>TPOT p99</th><th>sustained</th><th>SLO</th></tr>\n", sweep_load_unit(sw));
	for (size_t i = 0; i < sw->n; i++) {
		const struct sweep_point *p = &sw->pts[i];
		fprintf(f, "<tr%s data-sustained=\"%s\"><td>%g</td><td>%ld</td><td>%ld</td><td>%ld</td><td>%.2f</td>"
			"<td>%.2f</td><td>%.1f%%</td><td>%.1f</td>", p->meets ? "" : " class=\"miss\"",
			p->steady.sustained ? "yes" : "no", p->load, p->requests, p->ok, p->failed, p->throughput_rps,
			p->goodput_rps, 100 * p->share, p->output_tok_s);
		ms_td(f, p->ttft_p50);
		ms_td(f, p->ttft_p99);
		ms_td(f, p->tpot_p50);
		ms_td(f, p->tpot_p99);
		if (p->steady.sustained) {
			fputs("<td class=\"why\">yes</td>", f);
		} else {
			fputs("<td class=\"why\"><b>no</b>: ", f);
			esc(f, p->steady.why);
			fputs("</td>", f);
		}
		fprintf(f, "<td>%s</td></tr>\n", p->meets ? "met" : "missed");
	}
	fputs("</table>\n", f);
}

static void page_answer(FILE *f, const struct config *cfg, const struct sweep *sw)
{
	char slo[128];
	report_slo_text(cfg, slo, sizeof(slo));
	fputs("<p>", f);
	if (sw->interrupted)
		fputs("<b>Interrupted:</b> the points below are those that finished. ", f);
	if (sw->best >= 0) {
		const struct sweep_point *b = &sw->pts[sw->best];
		fprintf(f, "Highest load sustained within the SLO (for %.0f%% of requests): <b>%g %s</b>%s: %.2f req/s, "
			"%.1f output tok/s, TTFT p50 %.2f ms, p99 %.2f ms, TPOT p50 %.2f ms, p99 %.2f ms. ", 100 * cfg->slo_share,
			b->load, sweep_load_unit(sw), sw->top_held ? " (it held at the highest load tried)" : "",
			b->throughput_rps, b->output_tok_s, b->ttft_p50, b->ttft_p99, b->tpot_p50, b->tpot_p99);
	} else {
		fputs("No load was sustained within the SLO. ", f);
	}
	for (int k = 0; k < sw->n_confirms; k++) {
		const struct sweep_point *c = &sw->confirms[k];
		if (c->stopped_missed) {
			fprintf(f, "Confirmation at %g %s stopped after %.1f s: %ld requests had missed the SLO, more "
				"than its share allows of the %ld the run could send: <b>missed, the search went below "
				"it</b>. ", c->load, sweep_load_unit(sw), c->wall_s, c->missed, c->most_sent);
			continue;
		}
		fprintf(f, "Confirmation at %g %s over %.1f s: %.1f%% of %ld requests within the SLO, %s", c->load,
			sweep_load_unit(sw), c->span_s, 100 * c->share, c->requests,
			c->steady.sustained ? "sustained" : "not sustained (");
		if (!c->steady.sustained) {
			esc(f, c->steady.why);
			fputc(')', f);
		}
		fprintf(f, ": <b>%s</b>. ", c->meets ? "met" : "missed, the search went below it");
	}
	if (sw->knee >= 0)
		fprintf(f, "Knee: %g %s. ", sw->pts[sw->knee].load, sweep_load_unit(sw));
	fputs("</p>\n<p>SLO: ", f);
	esc(f, slo);
	fprintf(f, "; prompt-len ");
	esc(f, cfg->prompt_len.spec);
	fprintf(f, ", max-tokens ");
	esc(f, cfg->max_tokens.spec);
	fprintf(f, ", seed %llu.</p>\n", cfg->seed);
}

int html_write(const char *path, const struct config *cfg, const struct sweep *sw)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, "kpi-bench: cannot write --html %s: check the directory exists and is writable\n", path);
		return -1;
	}
	fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
		"<title>kpi-bench sweep: ");
	esc(f, cfg->url);
	fprintf(f, "</title>\n<style>%s</style>\n</head>\n<body>\n<h1>kpi-bench %s sweep of ", page_style,
		sw->kind == SWEEP_RATE ? "rate" : "concurrency");
	esc(f, cfg->url);
	fputs("</h1>\n", f);
	page_answer(f, cfg, sw);
	if (sw->n) {
		chart_lines(f, sw, "TTFT against offered load", "TTFT (ms)", ttft_series, 2, cfg->slo_ttft);
		chart_lines(f, sw, "TPOT against offered load", "TPOT (ms)", tpot_series, 2, cfg->slo_tpot);
		chart_lines(f, sw, "Goodput against offered load", "requests per second", good_series, 2, 0);
		bool phases = false;
		for (size_t i = 0; i < sw->n; i++)
			phases |= sw->pts[i].phase_n > 0;
		if (phases)
			chart_phases(f, sw);
		else if (cfg->trace_db && sw->trace_note)
			fprintf(f, "<p>No server-side phases: %s.</p>\n", sw->trace_note);
		page_table(f, sw);
	} else {
		fputs("<p>No point finished.</p>\n", f);
	}
	fputs("</body>\n</html>\n", f);
	int rc = ferror(f);
	rc |= fclose(f);
	if (rc)
		fprintf(stderr, "kpi-bench: writing --html %s failed\n", path);
	return rc ? -1 : 0;
}
