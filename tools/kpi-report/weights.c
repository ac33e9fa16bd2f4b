/* weights.c - kpi-report's weight types: when the trace holds requests
 * served by models of different weight types (schema/009_weight_type.sql:
 * one model at Q4_K, then at F16, say), each one's latency and throughput
 * side by side, every figure over that type's own requests and span. */
#include <stdio.h>
#include <string.h>
#include "tools/kpi-report/report.h"

void report_weights_analyze(struct report *r)
{
	r->nweights = trace_weights(r->t, r->weights, TRACE_WEIGHTS_MAX);
	if (r->nweights < 0)
		r->nweights = 0;
}

static char *D(char *b, double ns) { return timefmt_dur(b, 16, ns); }

void report_weights_render(const struct report *r, FILE *o, int html)
{
	if (r->nweights < 1)
		return;
	if (html)
		fprintf(o, "<h2>Weight types</h2>\n<p>Each over its own requests and span (first arrival "
			"to last completion); memory and accuracy: bench_quant, kpi-infer --kl-divergence.</p>\n"
			"<table><tr><th></th>");
	else
		fprintf(o, "\n## Weight types\n\nEach over its own requests and span (first arrival to last "
			"completion); memory and accuracy: bench_quant, kpi-infer --kl-divergence.\n\n|");
	for (int k = 0; k < r->nweights; k++)
		fprintf(o, html ? "<th>%s</th>" : " | %s", r->weights[k].type);
	fprintf(o, html ? "</tr>\n" : " |\n|---|");
	if (!html) {
		for (int k = 0; k < r->nweights; k++)
			fprintf(o, "---:|");
		fprintf(o, "\n");
	}
	static const struct { const char *name; int metric; double p; } rows[] = {
		{ "TTFT p50", TM_TTFT, 50 }, { "TTFT p99", TM_TTFT, 99 }, { "TPOT p50", TM_TPOT, 50 },
		{ "TPOT p99", TM_TPOT, 99 }, { "e2e p50", TM_E2E, 50 }, { "e2e p99", TM_E2E, 99 },
	};
	char b[40];
	fprintf(o, html ? "<tr><td>requests</td>" : "| requests |");
	for (int k = 0; k < r->nweights; k++)
		fprintf(o, html ? "<td>%d</td>" : " %d |", r->weights[k].w.requests);
	fprintf(o, html ? "</tr>\n" : "\n");
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		fprintf(o, html ? "<tr><td>%s</td>" : "| %s |", rows[i].name);
		for (int k = 0; k < r->nweights; k++) {
			const struct trace_dist *d = &r->weights[k].w.m[rows[i].metric];
			if (!d->n)
				snprintf(b, sizeof(b), "-");
			else
				D(b, rows[i].p == 50 ? d->p50 : d->p99);
			fprintf(o, html ? "<td>%s</td>" : " %s |", b);
		}
		fprintf(o, html ? "</tr>\n" : "\n");
	}
	fprintf(o, html ? "<tr><td>output tokens/s</td>" : "| output tokens/s |");
	for (int k = 0; k < r->nweights; k++)
		fprintf(o, html ? "<td>%.1f</td>" : " %.1f |", r->weights[k].w.out_tok_per_s);
	fprintf(o, html ? "</tr>\n</table>\n" : "\n");
}
