/* disagg.c - kpi-report on disaggregated prefill and decode: which of the
 * phases across the router, prefill and decode workers made TTFT grow, and
 * the two causes the trace can name, a KV transfer that slowed (a throttled
 * or congested link between the workers) and a decode side out of slots. */
#include "tools/kpi-report/report.h"
#include "tools/common/trace_disagg.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MIN_REQUESTS 5          /* per window: fewer tell nothing about a p99 */

static const char *const band_name[TD_TTFT_N + 1] = {
	"net-in", "router", "prefill queue", "prefill", "KV transfer", "decode queue", "first write",
};

static char *dur(char *b, double ns) { return timefmt_dur(b, 16, ns); }

/* "12.3 MB/s"; "-" unknown */
static char *rate(char *b, size_t n, double bps)
{
	if (bps < 0)
		snprintf(b, n, "-");
	else if (bps >= 1e9)
		snprintf(b, n, "%.2f GB/s", bps / 1e9);
	else if (bps >= 1e6)
		snprintf(b, n, "%.1f MB/s", bps / 1e6);
	else
		snprintf(b, n, "%.0f kB/s", bps / 1e3);
	return b;
}

/* A TTFT band's change by phase (band, band50), as shares of the increase. */
static void shares(const double *b, const double *i, double *share, int *top)
{
	double pos = 0;

	for (int k = 0; k <= TD_TTFT_N; k++)
		pos += fmax(i[k] - b[k], 0);
	*top = 0;
	for (int k = 0; k <= TD_TTFT_N; k++) {
		share[k] = pos > 0 ? fmax(i[k] - b[k], 0) / pos : 0;
		if (share[k] > share[*top])
			*top = k;
	}
}

/* "N% of their <what> TTFT change (x → y) is <top>, <other> M%, ..." */
static int change_words(char *out, size_t len, const char *what, double from, double to,
			const double *share, int top)
{
	char x[16], y[16];
	int n = snprintf(out, len, "%.0f%% of their %s TTFT change (%s → %s) is %s", share[top] * 100, what,
			 dur(x, from), dur(y, to), band_name[top]);
	for (int k = 0; k <= TD_TTFT_N && n < (int)len - 48; k++) {
		if (k == top || share[k] < 0.05)
			continue;
		n += snprintf(out + n, len - (size_t)n, ", %s %.0f%%", band_name[k], share[k] * 100);
	}
	return n;
}

static void words(struct report *r, const struct trace_disagg_window *b, const struct trace_disagg_window *i,
		  const double *share, int top, const double *share50, int top50)
{
	size_t len = sizeof(r->pd_words);
	int n = snprintf(r->pd_words, len, "Disaggregated requests (%d, baseline %d): ", i->requests, b->requests);
	n += change_words(r->pd_words + n, len - (size_t)n, "p99", b->ttft.p99, i->ttft.p99, share, top);
	if (n < (int)len - 160) {
		n += snprintf(r->pd_words + n, len - (size_t)n, "; ");
		n += change_words(r->pd_words + n, len - (size_t)n, "median", b->ttft.p50, i->ttft.p50, share50,
				  top50);
	}
	if (n < (int)len)
		snprintf(r->pd_words + n, len - (size_t)n, " (the router, the KV transfer and the decode queue "
			 "sit in \"first write\" in the split above).");
}

/* The transfers slowed (the rate fell), or carried more (longer prompts). */
static void finding_transfer(struct report *r, const struct trace_disagg_window *b,
			     const struct trace_disagg_window *i, double share, const char *what)
{
	char s1[16], s2[16], s3[16], s4[16], s5[16], s6[16], r1[24], r2[24], r3[24];
	int slower = i->rate >= 0 && b->rate > 0 && i->rate < 0.7 * b->rate;
	int bigger = b->kv_bytes_mean > 0 && i->kv_bytes_mean > 1.5 * b->kv_bytes_mean;
	struct rp_finding *f = rp_add_finding(r, slower || !bigger ? "KV transfer slowed" : "KV transfers grew",
					     "KV transfer", 4 + share, 2);

	if (!f)
		return;
	if (slower || !bigger)
		snprintf(f->title, sizeof(f->title), "KV transfer: the KV cache moved from the prefill to the decode "
			 "workers %s, %.0f%% of the %s TTFT increase (the link between them: its bandwidth, a "
			 "rate limit, congestion)", slower ? "more slowly" : "for longer", share * 100, what);
	else
		snprintf(f->title, sizeof(f->title), "KV transfer: each request moved more KV (longer prompts), "
			 "%.0f%% of the %s TTFT increase", share * 100, what);
	snprintf(f->evidence, sizeof(f->evidence),
		 "around the p99 TTFT the KV transfer took %s (baseline %s), around the median %s (baseline %s); "
		 "the transfers ran at %s (median "
		 "request %s), baseline %s; %.0f kB of KV per request (baseline %.0f kB); p99 KV transfer %s "
		 "(baseline %s); %d of %d transfers failed",
		 dur(s1, i->band[TD_KV]), dur(s2, b->band[TD_KV]), dur(s5, i->band50[TD_KV]),
		 dur(s6, b->band50[TD_KV]), rate(r1, sizeof(r1), i->rate),
		 rate(r2, sizeof(r2), i->rate_p50), rate(r3, sizeof(r3), b->rate), i->kv_bytes_mean / 1e3,
		 b->kv_bytes_mean / 1e3, dur(s3, i->ph[TD_KV].p99), dur(s4, b->ph[TD_KV].p99), i->failed,
		 i->transfers);
	snprintf(f->action, sizeof(f->action), "%s", slower || !bigger
		 ? "check the path between the prefill and decode workers (tc qdiscs, NIC, a shared or "
		   "rate-limited link: each row's kv_bytes / kv_stream_ns is its rate), or place them closer"
		 : "expect it of longer prompts, or give the link more bandwidth (the rows' kv_bytes say how much "
		   "each moved)");
}

/* The decode side kept requests waiting, their KV in hand: the running set
 * was full (slots) or its KV pool short (blocks), as kv__slot_wait said. */
static void finding_slots(struct report *r, const struct trace_disagg_window *b,
			  const struct trace_disagg_window *i, double share, const char *what)
{
	char s1[16], s2[16], s3[16], s4[16];
	int waited = i->slot[TD_SLOT_SLOTS] + i->slot[TD_SLOT_BLOCKS] + i->slot[TD_SLOT_QUEUE];
	int blocks = i->slot[TD_SLOT_BLOCKS] > i->slot[TD_SLOT_SLOTS];
	struct rp_finding *f = rp_add_finding(r, blocks ? "decode side out of KV blocks" :
					      "decode side out of slots", "decode queue", 4 + share, 2);

	if (!f)
		return;
	snprintf(f->title, sizeof(f->title), "Decode queue: the decode workers ran out of %s, and requests "
		 "waited with their KV in hand, %.0f%% of the %s TTFT increase",
		 blocks ? "KV blocks for new prompts" : "running slots (--max-seqs)", share * 100, what);
	snprintf(f->evidence, sizeof(f->evidence),
		 "around the p99 TTFT the decode queue took %s (baseline %s); p99 decode queue %s (baseline "
		 "%s); of %d requests, %d waited with the running set full, %d for KV blocks, %d behind others "
		 "(baseline %d, %d, %d); up to %d waited ahead of one",
		 dur(s1, i->band[TD_DECODE_QUEUE]), dur(s2, b->band[TD_DECODE_QUEUE]),
		 dur(s3, i->ph[TD_DECODE_QUEUE].p99), dur(s4, b->ph[TD_DECODE_QUEUE].p99), i->requests,
		 i->slot[TD_SLOT_SLOTS], i->slot[TD_SLOT_BLOCKS], i->slot[TD_SLOT_QUEUE],
		 b->slot[TD_SLOT_SLOTS], b->slot[TD_SLOT_BLOCKS], b->slot[TD_SLOT_QUEUE], i->slot_ahead_max);
	(void)waited;
	snprintf(f->action, sizeof(f->action), "%s", blocks
		 ? "give the decode workers a larger KV pool (--kv-blocks) or cap max_tokens, or add decode "
		   "workers (the router's least-loaded policy spreads the load)"
		 : "give the decode workers more running slots (--max-seqs, if their KV pool holds them), or "
		   "add decode workers (the router's least-loaded policy spreads the load)");
}

void report_disagg_findings(struct report *r)
{
	struct trace_disagg_window b, i;
	char err[256];
	struct trace_disagg *d = trace_disagg_open(r->t, err, sizeof(err));
	double share[TD_TTFT_N + 1], share50[TD_TTFT_N + 1];
	int top, top50;

	if (!d)
		return;         /* a trace before schema version 10 */
	if (trace_disagg_window(d, r->base.from_ns, r->base.to_ns, &b) ||
	    trace_disagg_window(d, r->inc.from_ns, r->inc.to_ns, &i) ||
	    b.requests < MIN_REQUESTS || i.requests < MIN_REQUESTS || !b.band_n || !i.band_n) {
		trace_disagg_close(d);
		return;
	}
	shares(b.band, i.band, share, &top);
	shares(b.band50, i.band50, share50, &top50);
	words(r, &b, &i, share, top, share50, top50);
	/* a cause is named from the p99 band when it leads that band's rise, else
	 * from the median's: a window whose typical request waited on the link
	 * while a few stalled on a busy CPU still rose because of the link */
	for (int k = 0; k < 2; k++) {
		int phase = k ? TD_DECODE_QUEUE : TD_KV;
		int by99 = i.ttft.p99 > 1.2 * b.ttft.p99 && top == phase && share[phase] >= 0.4;
		int by50 = i.ttft.p50 > 1.2 * b.ttft.p50 && top50 == phase && share50[phase] >= 0.4;
		if (!by99 && !by50)
			continue;
		double s = by99 ? share[phase] : share50[phase];
		const char *what = by99 ? "p99" : "median";
		if (k)
			finding_slots(r, &b, &i, s, what);
		else
			finding_transfer(r, &b, &i, s, what);
	}
	trace_disagg_close(d);
}
