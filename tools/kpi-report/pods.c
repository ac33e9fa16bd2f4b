/* pods.c - kpi-report over one host's trace: which pods (schema version 13:
 * named by the agent from the cgroup and the runtime's state) carry the
 * change of p99 TTFT between the baseline and the incident, and in which of
 * their phases.  Across hosts, fleet.c ranks them with the hosts. */
#include "tools/kpi-report/report.h"

#include <math.h>
#include <string.h>

void report_pods_analyze(struct report *r)
{
	char err[256];
	struct trace_pods *p;

	r->n_pods = 0;
	if (r->fleet || !r->compare || !(p = trace_pods_open(r->t, err, sizeof(err))))
		return;         /* a trace from before pods were named has none to rank */
	r->n_pods = trace_pods_rank(p, r->base.from_ns, r->base.to_ns, r->inc.from_ns, r->inc.to_ns, r->pods,
				    TRACE_RANK_GROUPS);
	if (r->n_pods < 0)
		r->n_pods = 0;
	trace_pods_close(p);
}

void report_pods_render(const struct report *r, FILE *o, int html)
{
	if (r->fleet || !rp_any_pod(r))
		return;
	const struct trace_rank_group *top = &r->pods[0];
	double change = r->attr[0].inc - r->attr[0].base;
	char d[16];

	fprintf(o, html ? "<h2>Pods</h2>\n" : "\n## Pods\n\n");
	if (top->share > 0) {
		timefmt_dur(d, sizeof(d), fabs(change));
		fprintf(o, html ? "<p><b>" : "**");
		fprintf(o, strcmp(top->name, "(none)") ? "Pod " : "The processes outside any pod: ");
		if (strcmp(top->name, "(none)"))
			rp_esc(o, top->name, html);
		fprintf(o, " %s %.0f%% of the p99 TTFT %s (%s%s), most of it in %s.",
			strcmp(top->name, "(none)") ? "carries" : "carry", top->share * 100,
			change >= 0 ? "increase" : "decrease", change >= 0 ? "+" : "−", d,
			rp_ttft_phase[top->top_phase]);
		fprintf(o, html ? "</b></p>\n" : "**\n\n");
	}
	fprintf(o, html ? "<p>" : "");
	fprintf(o, "The requests within a percentile of p99 TTFT, in each window, carry its change; each pod's "
		"(NAMESPACE/NAME; (none): processes outside any pod) part of that band's mean, incident less "
		"baseline, is its part of the change, and the parts add up to it. A pod's own p99 is beside it.");
	fprintf(o, html ? "</p>\n" : "\n\n");
	rp_group_table(o, html, "pod", r->pods, r->n_pods);
}
