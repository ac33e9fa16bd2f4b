/* fleet_minutes.c - kpi-report across hosts, from the per-minute aggregates
 * alone (request_minutes, schema/clickhouse/003_minutes.sql): every host's
 * p99 TTFT in the baseline's and the incident's whole minutes, from their
 * merged buckets (schema/lhist.h, within 1 %), hosts ranked by its change,
 * with the TTFT phase whose mean per request grew most. What the fleet's
 * question costs there grows with hosts x minutes, not with requests; the
 * raw rows' analysis above stays for drilling down. */
#include "tools/kpi-report/report.h"
#include "tools/common/clickhouse.h"
#include "schema/lhist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_NS 60000000000LL
static const char *const phase_name[RP_AGG_PHASES] = { "net-in", "queue wait", "prefill" };

static struct rp_agg_host *agg_host(struct report *r, const char *name)
{
	for (int i = 0; i < r->n_agg; i++)
		if (!strcmp(r->agg[i].name, name))
			return &r->agg[i];
	if (r->n_agg == RP_AGG_HOSTS)
		return NULL;
	struct rp_agg_host *h = &r->agg[r->n_agg++];
	memset(h, 0, sizeof(*h));
	snprintf(h->name, sizeof(h->name), "%s", name);
	return h;
}

/* one window's whole minutes [lo, hi) into side w (0 baseline, 1 incident) */
static int read_side(struct report *r, struct ch_conn *c, struct buf *ans, int64_t lo, int64_t hi, int w,
		     uint64_t *hist, char *err, size_t errlen)
{
	char sql[700];
	snprintf(sql, sizeof(sql), "SELECT host, sum(requests) - sum(rejected), sum(net_in_ns), sum(queue_ns) + "
		 "sum(server_wait_ns), sum(prefill_ns), sumForEach(ttft) FROM request_minutes FINAL WHERE minute >= %lld "
		 "AND minute < %lld GROUP BY host ORDER BY host FORMAT TabSeparated", (long long)(lo / 1000000000LL),
		 (long long)(hi / 1000000000LL));
	if (ch_query(c, sql, ans, err, errlen))
		return -1;
	char *p = ans->p, *line, *f[6];
	while (p && *p) {
		line = p;
		char *nl = strchr(p, '\n');
		if (nl)
			*nl = 0;
		p = nl ? nl + 1 : NULL;
		if (ch_tsv_split(line, f, 6) != 6)
			continue;
		const char *name = ch_tsv_field(f[0]);
		struct rp_agg_host *h = agg_host(r, name ? name : "");
		if (!h)
			continue;
		int64_t n = atoll(f[1]);
		h->n[w] = n;
		for (int k = 0; k < RP_AGG_PHASES; k++)
			h->phase_mean[w][k] = n ? (double)atoll(f[2 + k]) / (double)n : 0;
		memset(hist, 0, sizeof(uint64_t) * LHIST_BUCKETS);
		int i = 0;
		for (char *q = f[5]; *q && i < LHIST_BUCKETS; q++) {
			if (*q < '0' || *q > '9')
				continue;
			char *end;
			hist[i++] = strtoull(q, &end, 10);
			q = end - 1;
		}
		h->p99[w] = lhist_quantile(hist, LHIST_BUCKETS, 99);
		h->ttft_n[w] = lhist_count(hist, LHIST_BUCKETS);
	}
	return 0;
}

static int by_change(const void *a, const void *b)
{
	const struct rp_agg_host *x = a, *y = b;
	double dx = x->p99[1] - x->p99[0], dy = y->p99[1] - y->p99[0];
	return dx < dy ? 1 : dx > dy ? -1 : strcmp(x->name, y->name);
}

void report_fleet_minutes(struct report *r)
{
	struct ch_url u;
	struct buf ans = { 0 };
	uint64_t *hist = NULL;
	struct ch_conn *c = NULL;
	char err[400];

	r->n_agg = 0;
	r->agg_note[0] = 0;
	if (!r->fleet || !r->compare)
		return;
	int64_t lo[2] = { (r->base.from_ns + MIN_NS - 1) / MIN_NS * MIN_NS, (r->inc.from_ns + MIN_NS - 1) / MIN_NS * MIN_NS };
	int64_t hi[2] = { r->base.to_ns / MIN_NS * MIN_NS, r->inc.to_ns / MIN_NS * MIN_NS };
	if (hi[0] <= lo[0] || hi[1] <= lo[1]) {
		snprintf(r->agg_note, sizeof(r->agg_note), "a window holds no whole minute: the per-minute aggregates "
			 "cannot answer for it");
		return;
	}
	if (ch_url_parse(trace_fleet_url(r->fleet), &u, err, sizeof(err)) || !(c = ch_open(&u, 60000)) ||
	    !(hist = malloc(sizeof(uint64_t) * LHIST_BUCKETS))) {
		snprintf(r->agg_note, sizeof(r->agg_note), "cannot ask ClickHouse for the aggregates");
		goto out;
	}
	for (int w = 0; w < 2; w++)
		if (read_side(r, c, &ans, lo[w], hi[w], w, hist, err, sizeof(err))) {
			snprintf(r->agg_note, sizeof(r->agg_note), "no per-minute aggregates (%.300s): create "
				 "request_minutes from schema/clickhouse/003_minutes.sql and ship with a current kpi-ship",
				 err);
			r->n_agg = 0;
			goto out;
		}
	for (int i = 0; i < r->n_agg; i++) {
		struct rp_agg_host *h = &r->agg[i];
		h->top_phase = 0;
		for (int k = 1; k < RP_AGG_PHASES; k++)
			if (h->phase_mean[1][k] - h->phase_mean[0][k] >
			    h->phase_mean[1][h->top_phase] - h->phase_mean[0][h->top_phase])
				h->top_phase = k;
	}
	qsort(r->agg, (size_t)r->n_agg, sizeof(r->agg[0]), by_change);
	r->agg_minutes[0] = (int)((hi[0] - lo[0]) / MIN_NS);
	r->agg_minutes[1] = (int)((hi[1] - lo[1]) / MIN_NS);
out:
	free(hist);
	buf_free(&ans);
	ch_close(c);
}

void report_fleet_minutes_render(const struct report *r, FILE *o, int html)
{
	if (!r->fleet || !r->compare)
		return;
	fprintf(o, html ? "<h3>From the per-minute aggregates alone</h3>\n<p>" :
		"### From the per-minute aggregates alone\n\n");
	if (!r->n_agg) {
		fprintf(o, "%s%s", r->agg_note[0] ? r->agg_note : "no host has aggregates in both windows",
			html ? "</p>\n" : "\n\n");
		return;
	}
	const struct rp_agg_host *h = &r->agg[0];
	char a[16], b[16];
	timefmt_dur(a, sizeof(a), h->p99[0]);
	timefmt_dur(b, sizeof(b), h->p99[1]);
	fprintf(o, html ? "<b>" : "**");
	fprintf(o, "From the aggregates: host %s's p99 TTFT changed most, %s → %s, most of it in %s.", h->name, a, b,
		phase_name[h->top_phase]);
	fprintf(o, html ? "</b> " : "** ");
	fprintf(o, "The baseline's %d and the incident's %d whole minutes of request_minutes; p99 from buckets, within "
		"%.0f %% of the exact p99 (schema/lhist.h); phase: its mean per request, incident less baseline.%s",
		r->agg_minutes[0], r->agg_minutes[1], LHIST_ALPHA * 100, html ? "</p>\n<table>\n<tr><th>host</th>"
		"<th>requests</th><th>p99 TTFT (±1 %)</th><th>phase grown most</th></tr>\n" :
		"\n\n| host | requests | p99 TTFT (±1 %) | phase grown most |\n|---|---:|---|---|\n");
	for (int i = 0; i < r->n_agg; i++) {
		h = &r->agg[i];
		char d[16];
		timefmt_dur(a, sizeof(a), h->p99[0]);
		timefmt_dur(b, sizeof(b), h->p99[1]);
		timefmt_dur(d, sizeof(d), fabs(h->phase_mean[1][h->top_phase] - h->phase_mean[0][h->top_phase]));
		fprintf(o, html ? "<tr><td>%s</td><td>%lld → %lld</td><td>%s → %s</td><td>%s %s%s</td></tr>\n" :
			"| %s | %lld → %lld | %s → %s | %s %s%s |\n", h->name, (long long)h->n[0], (long long)h->n[1], a, b,
			phase_name[h->top_phase], h->phase_mean[1][h->top_phase] >= h->phase_mean[0][h->top_phase] ? "+" :
			"−", d);
	}
	fprintf(o, html ? "</table>\n" : "\n");
}
