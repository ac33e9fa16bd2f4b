/* cost.c - kpi-report's cost and energy: both windows' figures by the one
 * method (docs/cost.md), the section that shows them and the under-utilisation finding. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "tools/kpi-report/report.h"

/* The cost per token rose, the batch shrank, and nobody waited: the machine
 * is paid by the hour and ran emptier, which is under-utilisation, not load. */
static void underuse_finding(struct report *r)
{
	const struct trace_cost_window *b = &r->cost_base, *i = &r->cost_inc;
	double tb = b->s_per_tok, ti = i->s_per_tok, rise = ti / tb - 1;

	if (!(rise >= 0.25) || !(i->mean_batch <= 0.8 * b->mean_batch) || r->inc.w.queue_depth_max > 1 ||
	    r->nf >= RP_MAX_FINDINGS)
		return;
	struct rp_finding *f = &r->f[r->nf++];
	memset(f, 0, sizeof(*f));
	f->cause = "under-utilisation";
	f->phase = "decode";
	f->score = 1 + fmin(rise, 2) * 0.5;
	f->order = 8;
	snprintf(f->title, sizeof(f->title), "Cost per token rose %.0f%%: batch size fell from %.1f to %.1f "
		 "while the queue stayed empty", rise * 100, b->mean_batch, i->mean_batch);
	if (i->price >= 0)
		snprintf(f->evidence, sizeof(f->evidence), "$%.4g per 1M output tokens (baseline $%.4g), idle "
			 "%.0f%% of the time (baseline %.0f%%), peak queue depth %d; under-utilisation, not load "
			 "(%s)", i->usd_per_mtok_out, b->usd_per_mtok_out, i->idle_share * 100,
			 b->idle_share * 100, r->inc.w.queue_depth_max, trace_cost_method(i));
	else
		snprintf(f->evidence, sizeof(f->evidence), "%.3g machine-ms per output token (baseline %.3g), "
			 "idle %.0f%% of the time (baseline %.0f%%), peak queue depth %d; under-utilisation, not "
			 "load (%s; no price: pass --price-per-hour for dollars)", ti * 1e3, tb * 1e3,
			 i->idle_share * 100, b->idle_share * 100, r->inc.w.queue_depth_max, trace_cost_method(i));
	snprintf(f->action, sizeof(f->action), "the same traffic fits on fewer replicas or a smaller "
		 "machine, or route more traffic here: the price is per hour, not per token");
	/* keep the list strongest first */
	for (int k = r->nf - 1; k > 0 && r->f[k].score > r->f[k - 1].score; k--) {
		struct rp_finding t = r->f[k];
		r->f[k] = r->f[k - 1];
		r->f[k - 1] = t;
	}
}

void report_cost_analyze(struct report *r, double price_per_hour)
{
	char err[512];
	struct trace_cost *c = trace_cost_open(r->t, price_per_hour, err, sizeof(err));

	r->have_cost = 0;
	if (!c) {
		snprintf(r->cost_why, sizeof(r->cost_why), "%s", err);
		return;
	}
	snprintf(r->cost_source, sizeof(r->cost_source), "%s", trace_cost_energy_source(c));
	if (trace_cost_window(c, r->base.from_ns, r->base.to_ns, &r->cost_base) ||
	    trace_cost_window(c, r->inc.from_ns, r->inc.to_ns, &r->cost_inc)) {
		snprintf(r->cost_why, sizeof(r->cost_why), "reading the cost tables failed");
	} else if (!r->cost_inc.have && !r->cost_base.have) {
		snprintf(r->cost_why, sizeof(r->cost_why), "the trace has no cost rows in these windows");
	} else {
		r->have_cost = 1;
		if (r->compare)
			underuse_finding(r);
	}
	trace_cost_close(c);
}

/* ---- rendering ---------------------------------------------------------- */

static void num(char *b, size_t n, const char *fmt, double v)
{
	if (isnan(v) || isinf(v))
		snprintf(b, n, "-");
	else
		snprintf(b, n, fmt, v);
}

void report_cost_render(const struct report *r, FILE *o, int html)
{
	const struct trace_cost_window *b = &r->cost_base, *i = &r->cost_inc;
	char price[96];

	if (html)
		fprintf(o, "<h2>Cost and energy</h2>\n");
	else
		fprintf(o, "\n## Cost and energy\n\n");
	if (!r->have_cost) {
		fprintf(o, html ? "<p>Not shown: %s.</p>\n" : "Not shown: %s.\n", r->cost_why);
		return;
	}
	if (i->price >= 0)
		snprintf(price, sizeof(price), "$%.6g an hour (%s)", i->price,
			 i->price_overridden ? "--price-per-hour" : "the agent's --price-per-hour");
	else
		snprintf(price, sizeof(price), "no price (pass --price-per-hour)");
	fprintf(o, html ? "<p>Method: %s. Price: %s. Energy: %s.</p>\n" : "Method: %s. Price: %s. Energy: %s.\n\n",
		trace_cost_method(i), price, r->cost_source[0] ? r->cost_source : "not recorded");
	rp_table_head(o, html, r->compare);
	struct { const char *name, *fmt; double bv, iv; } rows[] = {
		{ "$ per 1M output tokens (idle included)", "%.4g", b->usd_per_mtok_out, i->usd_per_mtok_out },
		{ "$ per 1M tokens, prompt + output", "%.4g", b->usd_per_mtok_total, i->usd_per_mtok_total },
		{ "$ per request (its own share)", "%.4g", b->usd_per_request, i->usd_per_request },
		{ "idle share of the time %", "%.1f", b->idle_share * 100, i->idle_share * 100 },
		{ "idle cost $", "%.4g", b->idle_cost_usd, i->idle_cost_usd },
		{ "J per output token (idle included)", "%.4g", b->j_per_tok, i->j_per_tok },
		{ "Wh per 1,000 requests", "%.4g", b->wh_per_1k_req, i->wh_per_1k_req },
		{ "idle energy J", "%.4g", b->idle_energy_j, i->idle_energy_j },
		{ "mean batch (sequences a step)", "%.2f", b->mean_batch, i->mean_batch },
	};
	for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
		char bv[32], iv[32];
		num(bv, sizeof(bv), rows[k].fmt, rows[k].bv);
		num(iv, sizeof(iv), rows[k].fmt, rows[k].iv);
		rp_row(o, html, r->compare, rows[k].name, bv, iv);
	}
	if (html)
		fprintf(o, "</table>\n");
}
