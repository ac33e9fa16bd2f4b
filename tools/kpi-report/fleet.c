/* fleet.c - kpi-report across hosts: which hosts and models carry the change
 * of the fleet's p99 TTFT between the baseline and the incident, and in which
 * of their phases (the rows come from ClickHouse through trace_fleet.h). */
#include "tools/kpi-report/report.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

const char *const rp_ttft_phase[4] = { "net-in", "queue wait", "prefill", "first write" };

const char *report_source(const struct report *r)
{
	return r->fleet ? trace_fleet_url(r->fleet) : trace_path(r->t);
}

int report_fleet_analyze(struct report *r)
{
	if (!r->fleet || !r->compare)
		return 0;
	r->n_hosts = trace_fleet_rank(r->fleet, "host", r->base.from_ns, r->base.to_ns, r->inc.from_ns, r->inc.to_ns,
				      r->hosts, TRACE_RANK_GROUPS);
	r->n_models = trace_fleet_rank(r->fleet, "model", r->base.from_ns, r->base.to_ns, r->inc.from_ns,
				       r->inc.to_ns, r->models, TRACE_RANK_GROUPS);
	r->n_pods = trace_fleet_rank(r->fleet, "pod", r->base.from_ns, r->base.to_ns, r->inc.from_ns, r->inc.to_ns,
				     r->pods, TRACE_RANK_GROUPS);
	report_fleet_minutes(r);
	return r->n_hosts < 0 || r->n_models < 0 || r->n_pods < 0 ? -1 : 0;
}

bool rp_any_pod(const struct report *r)
{
	for (int k = 0; k < r->n_pods; k++)
		if (strcmp(r->pods[k].name, "(none)"))
			return true;
	return false;
}

void rp_esc(FILE *o, const char *s, int html)
{
	for (; *s; s++) {
		if (html && *s == '<') fputs("&lt;", o);
		else if (html && *s == '>') fputs("&gt;", o);
		else if (html && *s == '&') fputs("&amp;", o);
		else if (!html && (*s == '|' || *s == '*' || *s == '_')) fprintf(o, "\\%c", *s);
		else fputc(*s, o);
	}
}

void rp_group_table(FILE *o, int html, const char *what, const struct trace_rank_group *g, int n)
{
	char a[16], b[16], d[16];
	if (html)
		fprintf(o, "<table>\n<tr><th>%s</th><th>requests (baseline → incident)</th><th>p99 TTFT</th>"
			"<th>part of the p99 band's change</th><th>share</th><th>its largest phase</th></tr>\n", what);
	else
		fprintf(o, "| %s | requests (baseline → incident) | p99 TTFT | part of the p99 band's change | share | "
			"its largest phase |\n|---|---:|---|---:|---:|---|\n", what);
	for (int k = 0; k < n; k++) {
		const struct trace_rank_group *x = &g[k];
		timefmt_dur(a, sizeof(a), x->p99_base);
		timefmt_dur(b, sizeof(b), x->p99_inc);
		timefmt_dur(d, sizeof(d), fabs(x->delta));
		fprintf(o, html ? "<tr><td>" : "| ");
		rp_esc(o, x->name, html);
		fprintf(o, html ? "</td><td>%d → %d</td><td>%s → %s</td><td>%s%s</td><td>%.0f%%</td><td>%s</td></tr>\n"
				: " | %d → %d | %s → %s | %s%s | %.0f%% | %s |\n",
			x->n_base, x->n_inc, a, b, x->delta >= 0 ? "+" : "−", d, x->share * 100,
			x->share > 0 ? rp_ttft_phase[x->top_phase] : "-");
	}
	if (html)
		fprintf(o, "</table>\n");
}

void report_fleet_render(const struct report *r, FILE *o, int html)
{
	if (!r->fleet)
		return;
	if (html)
		fprintf(o, "<h2>Across hosts</h2>\n<p>");
	else
		fprintf(o, "\n## Across hosts\n\n");
	rp_esc(o, r->fleet_what, html);
	fprintf(o, html ? "</p>\n" : "\n\n");
	if (!r->compare || r->n_hosts <= 0)
		return;
	const struct trace_rank_group *h = &r->hosts[0];
	double change = r->attr[0].inc - r->attr[0].base;
	char d[16];
	timefmt_dur(d, sizeof(d), fabs(change));
	fprintf(o, html ? "<p><b>" : "**");
	fprintf(o, "Host ");
	rp_esc(o, h->name, html);
	fprintf(o, " carries %.0f%% of the p99 TTFT %s (%s%s), most of it in %s", h->share * 100,
		change >= 0 ? "increase" : "decrease", change >= 0 ? "+" : "−", d, rp_ttft_phase[h->top_phase]);
	if (r->n_models > 0 && r->models[0].share > 0) {
		fprintf(o, "; model ");
		rp_esc(o, r->models[0].name, html);
		fprintf(o, " %.0f%%", r->models[0].share * 100);
	}
	if (rp_any_pod(r) && r->pods[0].share > 0 && strcmp(r->pods[0].name, "(none)")) {
		fprintf(o, "; pod ");
		rp_esc(o, r->pods[0].name, html);
		fprintf(o, " %.0f%%, most of it in %s", r->pods[0].share * 100, rp_ttft_phase[r->pods[0].top_phase]);
	}
	fprintf(o, html ? ".</b></p>\n" : ".**\n\n");
	fprintf(o, html ? "<p>" : "");
	fprintf(o, "The requests within a percentile of the fleet's p99 TTFT, in each window, carry its change; "
		"each host's (model's%s) part of that band's mean, incident less baseline, is its part of the "
		"change, and the parts add up to it. A host's own p99 is beside it.",
		rp_any_pod(r) ? ", pod's: NAMESPACE/NAME, (none) for a process outside any pod" : "");
	fprintf(o, html ? "</p>\n" : "\n\n");
	rp_group_table(o, html, "host", r->hosts, r->n_hosts);
	fprintf(o, html ? "" : "\n");
	rp_group_table(o, html, "model", r->models, r->n_models);
	fprintf(o, html ? "" : "\n");
	if (rp_any_pod(r)) {
		rp_group_table(o, html, "pod", r->pods, r->n_pods);
		fprintf(o, html ? "" : "\n");
	}
	report_fleet_minutes_render(r, o, html);
}
