/* analyze.c - what kpi-report concludes: the incident and baseline windows,
 * how each percentile's change splits over phases, and the findings with
 * their evidence, strongest first. All data through tools/common/trace.h. */
#include "tools/kpi-report/report.h"
#include "schema/pct.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const ttft_names[RP_TTFT_NPH] = { "net-in", "queue wait", "prefill", "first write" };
static const char *const e2e_names[PH_N] = { "net-in", "queue wait", "prefill", "decode", "net-out" };
/* The queue and prefill slots' names by the windows' rows: measured by the
 * engine's probes (the plain names), inferred from stream timing, unknown
 * (http rows: the queue slot holds their server wait, queue and prefill
 * together, and prefill stays empty). Index: measured | inferred << 1 |
 * unknown << 2; a window of none has the plain names. */
static const char *const queue_names[8] = {
	"queue wait", "queue wait", "queue wait (inferred)", "queue wait (inferred on http rows)",
	"server wait (queue + prefill)", "queue wait (server wait where http)",
	"queue wait (inferred, or server wait where unknown)",
	"queue wait (inferred on http rows, or server wait where unknown)",
};
static const char *const prefill_names[8] = {
	"prefill", "prefill", "prefill (inferred)", "prefill (inferred on http rows)",
	"prefill", "prefill", "prefill (inferred)", "prefill (inferred on http rows)",
};

#define DEFAULT_INCIDENT (300 * NS_PER_S)

/* ---- incident window ------------------------------------------------------ */

static size_t lower_bound(const int64_t *a, size_t n, int64_t x)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (a[mid] < x) lo = mid + 1;
		else hi = mid;
	}
	return lo;
}

/* TTFT of every request with its arrival, sorted by arrival: one pass over
 * the trace serves both the incident search and the baseline search. */
struct ttft_rows {
	const int64_t *t, *v;
	size_t n;
	int64_t *scratch;
};

/* p99 TTFT of the rows arriving in [from, to); 0 when none. */
static double rows_p99(struct ttft_rows *tr, int64_t from, int64_t to, size_t *count)
{
	size_t a = lower_bound(tr->t, tr->n, from), b = lower_bound(tr->t, tr->n, to);
	*count = b - a;
	if (b == a) return 0;
	memcpy(tr->scratch, tr->v + a, (b - a) * sizeof(int64_t));
	return pct_select_i64(tr->scratch, b - a, 99);
}

/* The worst stretch of p99 TTFT: buckets around the worst one whose p99 is
 * at least half-way from the typical bucket to the worst.  Buckets are 10 s
 * (at most 600); a trace shorter than 12 of them is cut into 12, each at
 * least a second, so that a short run (make demo's 30 s) has a typical
 * bucket to stand out from.  *bucket_ns: the length used. */
static int detect_incident(struct report *r, struct ttft_rows *tr, int64_t *from, int64_t *to,
			   int64_t *bucket_ns)
{
	int64_t span = r->last_ns + 1 - r->first_ns;
	int64_t blen = span < 12 * 10 * NS_PER_S ? span / 12 : 10 * NS_PER_S;
	if (blen < NS_PER_S) return 0;
	int nb = (int)(span / blen);
	if (nb > 600) nb = 600;
	*bucket_ns = span / nb;
	double *p = calloc((size_t)nb, sizeof(double)), *v = calloc((size_t)nb, sizeof(double));
	int64_t *start = calloc((size_t)nb + 1, sizeof(int64_t));
	int found = 0;
	if (!p || !v || !start) goto out;
	for (int i = 0; i <= nb; i++) start[i] = r->first_ns + (int64_t)((double)span * i / nb);
	int n = 0, worst = -1;
	for (int i = 0; i < nb; i++) {
		size_t cnt;
		p[i] = rows_p99(tr, start[i], start[i + 1], &cnt);
		if (!cnt) continue;
		v[n++] = p[i];
		if (worst < 0 || p[i] > p[worst]) worst = i;
	}
	if (n < 6 || worst < 0) goto out;
	double typical = pct_select_f64(v, (size_t)n, 50);
	double top = p[worst];
	if (top < 2 * typical) goto out;
	double thr = typical + (top - typical) / 2;
	int a = worst, b = worst;
	/* extend over hot buckets, bridging single cool or empty ones */
	while (a > 0 && (p[a - 1] >= thr || (a > 1 && p[a - 2] >= thr))) a--;
	while (b < nb - 1 && (p[b + 1] >= thr || (b < nb - 2 && p[b + 2] >= thr))) b++;
	*from = start[a];
	*to = b + 1 < nb ? start[b + 1] : r->last_ns + 1;
	found = 1;
out:
	free(p);
	free(v);
	free(start);
	return found;
}

/* ---- baseline ------------------------------------------------------------- */

/* Slides a window of the incident's length over [lo, hi) and keeps the one
 * with the lowest p99 TTFT among those with enough finished requests. */
static int search_baseline(struct ttft_rows *tr, int64_t lo, int64_t hi, int64_t len, int min_n,
			   int64_t *best_from, double *best_p99, int *ncand)
{
	if (hi - lo < len) return 0;
	int64_t step = len / 2;
	if ((hi - lo) / (step ? step : 1) > 400) step = (hi - lo) / 400;
	if (step < NS_PER_S) step = NS_PER_S;
	int found = 0;
	*ncand = 0;
	/* candidates end at hi going back, so the nearest one wins ties */
	for (int64_t s = hi - len; s >= lo; s -= step) {
		size_t cnt;
		double p99 = rows_p99(tr, s, s + len, &cnt);
		if ((int)cnt < min_n) continue;
		(*ncand)++;
		if (!found || p99 < *best_p99) {
			*best_p99 = p99;
			*best_from = s;
			found = 1;
		}
	}
	return found;
}

static int load_window(struct report *r, struct rp_window *w, char *err, size_t errlen)
{
	if (trace_window_stats(r->t, w->from_ns, w->to_ns, true, &w->w) ||
	    trace_step_stats(r->t, w->from_ns, w->to_ns, 512, &w->steps) ||
	    trace_prefix_reuse(r->t, w->from_ns, w->to_ns, &w->reuse)) {
		snprintf(err, errlen, "reading %s failed: %s", trace_path(r->t), trace_errmsg(r->t));
		return -1;
	}
	if (trace_queue_wait(r->t, w->from_ns, w->to_ns, &w->queue, err, errlen))
		return -1;
	/* the depth is the requests in their queue phase: the samples see one
	 * instant a second, the requests' own phases every instant */
	if (w->queue.peak > w->w.queue_depth_max)
		w->w.queue_depth_max = w->queue.peak;
	w->valid = 1;
	return 0;
}

/* ---- attribution ---------------------------------------------------------- */

struct keyed {
	int64_t key;
	int i;
};

static int cmp_keyed(const void *a, const void *b)
{
	int64_t x = ((const struct keyed *)a)->key, y = ((const struct keyed *)b)->key;
	return x < y ? -1 : x > y;
}

/* Mean phases of the rows ranked within +-band percentiles of p by metric. */
static int band_means(const struct trace_row *rows, int n, int ttft, double p, double *mean, double *value)
{
	struct keyed *k = malloc(sizeof(*k) * (size_t)(n ? n : 1));
	if (!k) return -1;
	int m = 0;
	for (int i = 0; i < n; i++) {
		int64_t key = ttft ? rows[i].ttft_ns : rows[i].e2e_ns;
		if (key < 0) continue;
		k[m].key = key;
		k[m++].i = i;
	}
	memset(mean, 0, sizeof(double) * PH_N);
	*value = 0;
	if (!m) {
		free(k);
		return 0;
	}
	qsort(k, (size_t)m, sizeof(*k), cmp_keyed);
	double ix = (m - 1) * p / 100.0;
	size_t lo = (size_t)floor(ix);
	size_t hi = lo + 1 < (size_t)m ? lo + 1 : lo;
	*value = (double)k[lo].key + ((double)k[hi].key - (double)k[lo].key) * (ix - (double)lo);
	double band = p >= 90 ? 1.0 : 5.0;
	int a = (int)floor((m - 1) * fmax(p - band, 0) / 100.0);
	int b = (int)ceil((m - 1) * fmin(p + band, 100) / 100.0);
	for (int j = a; j <= b; j++) {
		const struct trace_row *rw = &rows[k[j].i];
		/* an http row's queue and prefill are unknown (0 here): its
		 * server wait, which holds both, goes in the queue slot */
		double wait = (double)rw->phase[PH_QUEUE] + (double)rw->server_wait_ns;
		if (ttft) {
			double known = (double)rw->phase[PH_NET_IN] + wait + (double)rw->phase[PH_PREFILL];
			mean[0] += (double)rw->phase[PH_NET_IN];
			mean[1] += wait;
			mean[2] += (double)rw->phase[PH_PREFILL];
			mean[3] += fmax((double)rw->ttft_ns - known, 0);
		} else {
			for (int ph = 0; ph < PH_N; ph++) mean[ph] += ph == PH_QUEUE ? wait : (double)rw->phase[ph];
		}
	}
	for (int ph = 0; ph < PH_N; ph++) mean[ph] /= (b - a + 1);
	free(k);
	return 0;
}

static void attr_words(struct rp_attr *a)
{
	char x[16], y[16], d[16];
	double change = a->inc - a->base;
	timefmt_dur(x, sizeof(x), a->base);
	timefmt_dur(y, sizeof(y), a->inc);
	timefmt_dur(d, sizeof(d), fabs(change));
	if (a->base > 0 && fabs(change) < 0.05 * a->base) {
		snprintf(a->words, sizeof(a->words), "p%.0f %s is unchanged (%s → %s).", a->p, a->metric, x, y);
		return;
	}
	int n = snprintf(a->words, sizeof(a->words), "%.0f%% of the p%.0f %s %s (%s%s: %s → %s) is %s",
			 round(a->share[a->top] * 100), a->p, a->metric, change > 0 ? "increase" : "decrease",
			 change > 0 ? "+" : "−", d, x, y, a->name[a->top]);
	/* then the other phases that carry at least 5% */
	int first = 1;
	for (int i = 0; i < a->nph && n < (int)sizeof(a->words) - 40; i++) {
		if (i == a->top || a->share[i] < 0.05) continue;
		n += snprintf(a->words + n, sizeof(a->words) - (size_t)n, "%s %s %.0f%%", first ? "; then" : ",",
			      a->name[i], round(a->share[i] * 100));
		first = 0;
	}
	snprintf(a->words + n, sizeof(a->words) - (size_t)n, ".");
}

static int attribute(struct report *r, struct rp_attr *a, const char *metric, double p)
{
	int ttft = !strcmp(metric, "TTFT");
	a->metric = metric;
	a->p = p;
	a->nph = ttft ? RP_TTFT_NPH : PH_N;
	const int *src = r->inc.w.by_source, *bsrc = r->base.w.by_source;
	/* rows whose split was measured, inferred, unknown: what queue and prefill name */
	int measured = src[TRACE_SRC_USDT] + bsrc[TRACE_SRC_USDT] + src[TRACE_SRC_LIBLLAMA] + bsrc[TRACE_SRC_LIBLLAMA],
	    inferred = src[TRACE_SRC_INFERRED] + bsrc[TRACE_SRC_INFERRED], unknown = src[TRACE_SRC_HTTP] + bsrc[TRACE_SRC_HTTP];
	int kind = (measured > 0) | (inferred > 0) << 1 | (unknown > 0) << 2;
	memcpy(a->name, ttft ? ttft_names : e2e_names, sizeof(a->name[0]) * (size_t)a->nph);
	a->name[PH_QUEUE] = queue_names[kind];
	a->name[PH_PREFILL] = prefill_names[kind];
	double mb[PH_N], mi[PH_N];
	const struct trace_row *rows;
	int n = trace_rows(r->t, r->base.from_ns, r->base.to_ns, &rows);
	if (n < 0 || band_means(rows, n, ttft, p, mb, &a->base)) return -1;
	n = trace_rows(r->t, r->inc.from_ns, r->inc.to_ns, &rows);
	if (n < 0 || band_means(rows, n, ttft, p, mi, &a->inc)) return -1;
	double sum = 0;
	for (int i = 0; i < a->nph; i++) {
		a->delta[i] = mi[i] - mb[i];
		sum += a->delta[i];
	}
	/* shares of the net change, in its direction; phases moving the other
	 * way get 0 and the rest is renormalised */
	double dir = sum >= 0 ? 1 : -1, pos = 0;
	for (int i = 0; i < a->nph; i++) pos += fmax(dir * a->delta[i], 0);
	a->top = 0;
	for (int i = 0; i < a->nph; i++) {
		a->share[i] = pos > 0 ? fmax(dir * a->delta[i], 0) / pos : 0;
		if (a->share[i] > a->share[a->top]) a->top = i;
	}
	attr_words(a);
	return 0;
}

/* ---- findings ------------------------------------------------------------- */

/* e2e phase with the largest share among the given ones */
static const char *top_phase(const struct rp_attr *e2e, const int *phases, int n)
{
	int best = phases[0];
	for (int i = 1; i < n; i++)
		if (e2e->delta[phases[i]] > e2e->delta[best]) best = phases[i];
	return trace_phase_name[best];
}

/* What the daemon's threads waited behind in window i, as a clause for the
 * evidence (empty when the trace does not say: written before schema
 * version 3). */
static void runq_behind(const struct trace_window *i, char *out, size_t len)
{
	size_t n;

	out[0] = 0;
	if (i->runq_self_ns < 0 || i->runq_ns <= 0)
		return;
	n = (size_t)snprintf(out, len, "; of that wait, %.0f%% ended when another of the daemon's threads "
			     "left the CPU", 100.0 * (double)i->runq_self_ns / (double)i->runq_ns);
	for (int k = 0; k < i->n_runq_by && n < len; k++) {
		const struct trace_runq_by *b = &i->runq_by[k];
		double share = 100.0 * (double)b->ns / (double)i->runq_ns;
		if (share < 1)
			break;
		if (b->pid > 0)
			n += (size_t)snprintf(out + n, len - n, ", %.0f%% when %s (pid %d) did", share, b->comm, b->pid);
		else
			n += (size_t)snprintf(out + n, len - n, ", %.0f%% on an idle CPU it moved to", share);
	}
}

/* 6. the agent lost data in the window: the figures above may miss requests.
 * Causes that cost requests lead the findings; a clamped mark or a row that
 * retention removed (outside a window a report reads, unless the window is
 * older than --retain; unshipped_rows are such rows kpi-ship had not sent
 * yet) only closes them. */
static void lost_finding(struct report *r)
{
	const struct trace_window *i = &r->inc.w;
	struct rp_finding *f;
	char list[768] = "";
	size_t len = 0;
	int64_t costly = 0, listed = 0;

	if (i->lost <= 0)
		return;
	for (int k = 0; k < i->n_loss; k++) {
		const struct trace_loss *l = &i->loss[k];
		if (strcmp(l->cause, "clamped") && strcmp(l->cause, "retention_rows") &&
		    strcmp(l->cause, "unshipped_rows"))
			costly += l->n;
		listed += l->n;
		len += (size_t)snprintf(list + len, len < sizeof(list) ? sizeof(list) - len : 0, "%s%lld %s",
					k ? ", " : "", (long long)l->n, l->cause);
	}
	/* causes this reader has no room to name still count, as costly */
	if (i->n_loss_more) {
		costly += i->lost - listed;
		snprintf(list + len, len < sizeof(list) ? sizeof(list) - len : 0, ", %lld of %d more causes",
			 (long long)(i->lost - listed), i->n_loss_more);
	}
	if (!(f = rp_add_finding(r, "the trace lost data in this window", "-", costly ? 10 : 0.1, 0)))
		return;
	snprintf(f->title, sizeof(f->title), "The agent lost data in this window: %lld %s (the figures "
		 "here may miss requests)", (long long)i->lost, i->lost == 1 ? "loss" : "losses");
	snprintf(f->evidence, sizeof(f->evidence), "by cause: %s (losses table; docs/agent.md, \"Losses\", "
		 "says what each means)", list);
	snprintf(f->action, sizeof(f->action), "%s", costly ? "grow --ringbuf-mb (drops), keep the agent "
		 "running before the server starts (before_attach, orphans), and give the trace disk room "
		 "(shed_rows); then measure again" : "nothing to do: no request was lost");
}

/* What every finding reads: the two windows, their phase splits, and the
 * spans their samples cover. */
struct fctx {
	struct report *r;
	const struct trace_window *i, *b;
	const struct rp_attr *tt, *ee;   /* p99 TTFT and p99 e2e splits */
	int64_t rej;                    /* 429s in the incident window */
	double secs, bsecs;             /* the windows' lengths, s */
	/* what samples count is per second of the span they cover, which runs
	 * on until the window's requests were served (trace_window_stats) */
	double ssecs, bssecs;
};

/* The caveat of a finding on queue and prefill where some of them were
 * inferred from stream timing, not measured by the engine's probes. */
static void inferred_caveat(struct rp_finding *f, const struct trace_window *i, const struct trace_window *b)
{
	int n = i->by_source[TRACE_SRC_INFERRED], bn = b->by_source[TRACE_SRC_INFERRED];
	size_t len = strlen(f->evidence);

	if ((n || bn) && len < sizeof(f->evidence))
		snprintf(f->evidence + len, sizeof(f->evidence) - len, "; the queue and prefill of %d of "
			 "these requests (baseline %d) were inferred from the server's stream timing, not "
			 "measured by its probes (docs/agent.md, The inferred split)", n, bn);
}

/* "; queue depth peaked at 37 (baseline 2)", only where it rose: a depth
 * that did not is no evidence of a queue that grew. */
static void depth_clause(char *out, size_t len, const struct trace_window *i, const struct trace_window *b)
{
	out[0] = 0;
	if (i->queue_depth_max > b->queue_depth_max)
		snprintf(out, len, "; %d requests were in their queue phase at once at the peak (baseline %d)",
			 i->queue_depth_max, b->queue_depth_max);
}

/* 1. queue growth, by what held the queue. kpi-infer admits from the queue
 * head while the step has tokens (--max-batched-tokens), a slot (--max-seqs)
 * and KV blocks left; the steps that passed the waiting requests over say
 * which ran out: a step that carried the most tokens any step carried ran
 * out of tokens (trace_queue.h). Most of them full: the step budget, a
 * finding of its own; otherwise, with nothing rejected, admission control. */
static void finding_queue(const struct fctx *c)
{
	struct report *r = c->r;
	const struct trace_window *i = c->i, *b = c->b;
	const struct trace_queue *q = &r->inc.queue;
	const struct rp_attr *tt = c->tt;
	int64_t rej = c->rej;
	char s1[16], s2[16], depth[128];
	struct rp_finding *f;

	double qshare = tt->inc > tt->base ? tt->share[1] : 0;
	int qgrew = i->queue_depth_max >= 2 * b->queue_depth_max + 2 ||
		    (i->m[TM_QUEUE].p99 >= 3 * b->m[TM_QUEUE].p99 && i->m[TM_QUEUE].p99 >= 50 * NS_PER_MS);
	if (!qgrew || qshare < 0.4)
		return;
	depth_clause(depth, sizeof(depth), i, b);
	timefmt_dur(s1, 16, i->m[TM_QUEUE].p99);
	timefmt_dur(s2, 16, b->m[TM_QUEUE].p99);
	if (q->steps > 0 && 2 * q->full_steps >= q->steps) {
		if (!(f = rp_add_finding(r, "step token budget", "queue", 1 + qshare, 1)))
			return;
		snprintf(f->title, sizeof(f->title), "Queue wait: requests waited for the step's token budget, "
			 "not for admission (each step carried %lld tokens while %d requests waited their turn)",
			 (long long)q->step_tokens_max, q->waited);
		snprintf(f->evidence, sizeof(f->evidence),
			 "queue wait is %.0f%% of the p99 TTFT increase; p99 queue wait %s (baseline %s)%s; "
			 "%d requests were passed over by at least one step, %lld prompt tokens among them; "
			 "%lld of the %lld steps that ran while they waited carried %lld tokens (prefill + decode), "
			 "the most any step carried: the step's token budget (kpi-infer --max-batched-tokens), "
			 "filled by %lld prefill tokens and %lld decodes in all; %lld rejections (HTTP 429)",
			 qshare * 100, s1, s2, depth, q->waited, (long long)q->waited_prompt_tokens,
			 (long long)q->full_steps, (long long)q->steps, (long long)q->step_tokens_max,
			 (long long)q->prefill_tokens, (long long)q->decode_seqs, (long long)rej);
		snprintf(f->action, sizeof(f->action), "raise --max-batched-tokens so a step prefills more of "
			 "the queue (longer steps: the running requests' inter-token gaps grow with it), or "
			 "prefill on workers of their own (disaggregation) so prompts do not queue behind the "
			 "step budget");
		return;
	}
	if (rej || !(f = rp_add_finding(r, "queue growth with no rejections", "queue", 1 + qshare, 1)))
		return;
	snprintf(f->title, sizeof(f->title), "Queue wait: the queue grew and nothing was rejected "
		 "(admission control missing or too lax)");
	int n = snprintf(f->evidence, sizeof(f->evidence),
			 "queue wait is %.0f%% of the p99 TTFT increase; p99 queue wait %s (baseline %s)%s; "
			 "0 rejections (HTTP 429) in the window; %.1f arrivals/s (baseline %.1f)", qshare * 100,
			 s1, s2, depth, i->req_per_s, b->req_per_s);
	if (q->steps > 0)
		snprintf(f->evidence + n, sizeof(f->evidence) - (size_t)n, "; %lld of the %lld steps that ran "
			 "while requests waited carried %lld tokens, the most any step did: the step's token "
			 "budget was not what held the others", (long long)q->full_steps, (long long)q->steps,
			 (long long)q->step_tokens_max);
	snprintf(f->action, sizeof(f->action), "bound the queue (kpi-infer's queue limit) so excess load "
		 "gets a fast 429 instead of a slow answer, or add capacity for this arrival rate");
	inferred_caveat(f, i, b);
}

/* 1-3 for a window of http rows only: queue growth, KV exhaustion and long
 * prefills need the engine's split and its samples, which the HTTP exchange
 * does not carry; say so, with the server wait that holds them, rather than
 * guess (and rather than stay silent as if nothing were there) */
static void finding_split_unknown(const struct fctx *c)
{
	struct report *r = c->r;
	const struct trace_window *i = c->i, *b = c->b;
	const struct rp_attr *tt = c->tt;
	char s1[16], s2[16];
	struct rp_finding *f;

	double wshare = tt->inc > tt->base ? tt->share[1] : 0;
	if (!(f = rp_add_finding(r, "engine split unknown", "server wait", 1 + wshare, 1))) return;
	snprintf(f->title, sizeof(f->title), "The engine's split is not known for these requests (source http): "
		 "queue and prefill show together as server wait, so this trace cannot tell queue growth, long "
		 "prefills or KV cache exhaustion apart");
	snprintf(f->evidence, sizeof(f->evidence),
		 "%d requests in the window, all traced from their HTTP exchange; server wait is %.0f%% of the "
		 "p99 TTFT change; p99 server wait %s (baseline %s); %lld rejections (HTTP 429)",
		 i->requests, wshare * 100, timefmt_dur(s1, 16, i->m[TM_SERVER_WAIT].n ? i->m[TM_SERVER_WAIT].p99 : -1),
		 timefmt_dur(s2, 16, b->m[TM_SERVER_WAIT].n ? b->m[TM_SERVER_WAIT].p99 : -1), (long long)c->rej);
	snprintf(f->action, sizeof(f->action), "trace the engine with its probes (kpi-agent --pid on kpi-infer "
		 "without --http-only) or read its own queue and KV metrics for this window to tell which");
}

/* 2. KV pool exhaustion */
static void finding_kv(const struct fctx *c)
{
	struct report *r = c->r;
	const struct trace_window *i = c->i, *b = c->b;
	const struct rp_attr *ee = c->ee;
	double ssecs = c->ssecs, bssecs = c->bssecs;
	char s1[16], s2[16];
	struct rp_finding *f;

	int64_t pre = i->preemptions > i->preempted ? i->preemptions : i->preempted;
	int64_t bpre = b->preemptions > b->preempted ? b->preemptions : b->preempted;
	double bpre_rate = bssecs > 0 ? bpre / bssecs : 0;
	if ((pre > 0 && pre / ssecs > 2 * bpre_rate) || (i->kv_usage_max >= 0.98 && b->kv_usage_max < 0.98)) {
		static const int ph[] = { PH_QUEUE, PH_DECODE, PH_PREFILL };
		if ((f = rp_add_finding(r, "KV cache pool exhaustion", top_phase(ee, ph, 3), 3 + (pre > 0), 2))) {
			snprintf(f->title, sizeof(f->title), "KV cache exhausted: %lld preemptions; requests wait "
				 "for free blocks and preempted ones recompute (shows in %s)", (long long)pre, f->phase);
			snprintf(f->evidence, sizeof(f->evidence),
				 "%lld preemptions (%d requests preempted) vs %lld in the baseline; KV usage peaked "
				 "at %.0f%% (baseline %.0f%%); queue depth peaked at %d; p99 e2e %s (baseline %s)",
				 (long long)pre, i->preempted, (long long)bpre, i->kv_usage_max * 100,
				 fmax(b->kv_usage_max, 0) * 100, i->queue_depth_max,
				 timefmt_dur(s1, 16, i->m[TM_E2E].p99), timefmt_dur(s2, 16, b->m[TM_E2E].p99));
			snprintf(f->action, sizeof(f->action), "give the KV pool more blocks, lower the running-"
				 "sequence cap, or cap max_tokens so the admitted load fits");
		}
	}
}

/* 3. long prefills stalling others' decodes */
static void finding_prefill(const struct fctx *c)
{
	struct report *r = c->r;
	const struct trace_window *i = c->i, *b = c->b;
	char s1[16], s2[16], s3[16], s4[16];
	struct rp_finding *f;

	double gap = i->itl_max.p99, bgap = b->itl_max.p99;
	if (r->inc.steps.long_prefill_steps > 0 && gap >= 3 * bgap && gap >= 100 * NS_PER_MS &&
	    (f = rp_add_finding(r, "long prefills stalling decodes", "decode", 1.5 + fmin(gap / fmax(bgap, 1) / 100, 0.4), 3))) {
		snprintf(f->title, sizeof(f->title), "Long prefills stall other requests' decodes "
			 "(inter-token gaps while a long prompt is prefilled)");
		snprintf(f->evidence, sizeof(f->evidence),
			 "%lld prefill steps of >= 512 tokens took %s in all (longest step %s, up to %lld "
			 "prompt tokens in a step); p99 of each request's longest inter-token gap %s (baseline %s)",
			 (long long)r->inc.steps.long_prefill_steps, timefmt_dur(s1, 16, (double)r->inc.steps.long_prefill_ns),
			 timefmt_dur(s2, 16, (double)r->inc.steps.max_step_ns), (long long)r->inc.steps.max_prefill_tokens,
			 timefmt_dur(s3, 16, gap), timefmt_dur(s4, 16, bgap));
		snprintf(f->action, sizeof(f->action), "chunk prefills (a token budget per step) so decodes "
			 "keep their cadence, or route long prompts elsewhere");
	}
}

/* 3b. a llama.cpp engine's prefix cache reused less, and TTFT rose with it:
 * its prompts are computed again instead of read from the KV cache */
static void finding_reuse(const struct fctx *c)
{
	struct report *r = c->r;
	const struct trace_reuse *i = &r->inc.reuse, *b = &r->base.reuse;
	const struct rp_attr *tt = c->tt;
	char s1[16], s2[16], s3[16], s4[16];
	struct rp_finding *f;

	if (!i->requests || !b->requests || i->hit_ratio < 0 || b->hit_ratio < 0)
		return;
	double drop = b->hit_ratio - i->hit_ratio;
	if (drop < 0.2 || i->hit_ratio > 0.75 * b->hit_ratio || tt->inc < 1.2 * tt->base)
		return;
	if (!(f = rp_add_finding(r, "prefix-cache reuse dropped", "prefill", 1.5 + drop, 3)))
		return;
	snprintf(f->title, sizeof(f->title), "Prefix-cache reuse dropped: prompts the KV cache held "
		 "before are computed again (prefill), and TTFT rose with it");
	snprintf(f->evidence, sizeof(f->evidence),
		 "%.0f%% of prompt tokens came from the cache (%d of %d requests reused some), baseline "
		 "%.0f%% (%d of %d); p99 prefill %s (baseline %s); p99 TTFT %s (baseline %s)",
		 i->hit_ratio * 100, i->reused, i->requests, b->hit_ratio * 100, b->reused, b->requests,
		 timefmt_dur(s1, 16, c->i->m[TM_PREFILL].p99), timefmt_dur(s2, 16, c->b->m[TM_PREFILL].p99),
		 timefmt_dur(s3, 16, tt->inc), timefmt_dur(s4, 16, tt->base));
	snprintf(f->action, sizeof(f->action), "send requests that share a prefix to the server (and "
		 "slot) that holds it, give the cache more sequences or context, or look for what changed "
		 "the prompts' common prefix (a template, a timestamp at its start)");
}

/* 4. run-queue delay of the engine's threads: the process's summed
 * runnable-but-waiting time (samples), and per request while in flight */
static void finding_cpu(const struct fctx *c)
{
	struct report *r = c->r;
	const struct trace_window *i = c->i, *b = c->b;
	const struct rp_attr *ee = c->ee;
	double ssecs = c->ssecs, bssecs = c->bssecs, secs = c->secs, bsecs = c->bsecs;
	char s1[16], s2[16], s3[16], s4[16];
	struct rp_finding *f;

	double rq = i->samples && ssecs > 0 ? (double)i->runq_ns / (ssecs * NS_PER_S) : 0;
	double brq = b->samples && bssecs > 0 ? (double)b->runq_ns / (bssecs * NS_PER_S) : 0;
	/* more work keeps more threads busy, and busy threads wait more: only a
	 * rise beyond what the load explains points at another tenant.  The load
	 * is tokens (prompt + output) per second, not requests: a burst of long
	 * prompts is more work per request than the traffic before it */
	double arr = secs > 0 ? (double)(i->prompt_tokens + i->output_tokens) / secs : 0;
	double barr = bsecs > 0 ? (double)(b->prompt_tokens + b->output_tokens) / bsecs : 0;
	double load = barr > 0 ? fmax(1, arr / barr) : 1;
	int by_samples = rq >= 0.05 && rq >= 2 * brq * load;
	int by_req = i->runq_share >= 0.05 && i->runq_share >= 2 * b->runq_share * load;
	if (by_req || by_samples) {
		static const int ph[] = { PH_PREFILL, PH_DECODE };
		double strength = fmax(rq, i->runq_share);
		if ((f = rp_add_finding(r, "engine run-queue delay (CPU contention)", top_phase(ee, ph, 2),
				     2.5 + fmin(strength, 0.49), 4))) {
			char who[384];
			const struct trace_runq_by *other = trace_runq_culprit(i);
			runq_behind(i, who, sizeof(who));
			double self = i->runq_self_ns >= 0 && i->runq_ns > 0 ? (double)i->runq_self_ns / i->runq_ns : 0;
			if (other)
				snprintf(f->title, sizeof(f->title), "CPU contention: the engine's threads wait to run "
					 "behind %s (pid %d) (run-queue delay stretches %s)", other->comm, other->pid,
					 f->phase);
			else if (self >= 0.5)
				snprintf(f->title, sizeof(f->title), "CPU contention within the daemon: its own threads "
					 "wait for each other (run-queue delay stretches %s)", f->phase);
			else
				snprintf(f->title, sizeof(f->title), "CPU contention: the engine's threads wait to run "
					 "(run-queue delay stretches %s)", f->phase);
			snprintf(f->evidence, sizeof(f->evidence),
				 "the daemon's threads waited runnable %.0f ms per second (baseline %.0f ms) at %.1fx "
				 "the baseline's tokens per second; while a request was in flight, %.2f of the daemon's "
				 "threads waited for a CPU on average (baseline %.2f); mean run-queue delay per request "
				 "%s (baseline %s), mean e2e %s (baseline %s)%s",
				 rq * 1000, brq * 1000, barr > 0 ? arr / barr : 0, i->runq_share, b->runq_share,
				 timefmt_dur(s1, 16, i->m[TM_RUNQ].mean), timefmt_dur(s2, 16, b->m[TM_RUNQ].mean),
				 timefmt_dur(s3, 16, i->m[TM_E2E].mean), timefmt_dur(s4, 16, b->m[TM_E2E].mean), who);
			if (other)
				snprintf(f->action, sizeof(f->action), "move %s (pid %d) off the engine's CPUs, or pin "
					 "the engine to cores of its own (taskset, a cpuset)", other->comm, other->pid);
			else if (self >= 0.5)
				snprintf(f->action, sizeof(f->action), "give kpi-infer as many CPUs as it runs threads, "
					 "or fewer --threads than the CPUs it may use");
			else
				snprintf(f->action, sizeof(f->action), "find what shares the engine's CPUs (runqlat, "
					 "top -H) and pin the engine to cores of its own, or move the other load away");
		}
	}
}

/* 5. network in or out dominating */
static void finding_network(const struct fctx *c)
{
	struct report *r = c->r;
	const struct trace_window *i = c->i, *b = c->b;
	const struct rp_attr *ee = c->ee;
	char s1[16], s2[16], s3[16], s4[16];
	struct rp_finding *f;

	double net_share = ee->inc > ee->base ? ee->share[PH_NET_IN] + ee->share[PH_NET_OUT] : 0;
	double net_now = i->m[TM_E2E].p99 > 0 ? (i->m[TM_NET_IN].p99 + i->m[TM_NET_OUT].p99) / i->m[TM_E2E].p99 : 0;
	if (net_share >= 0.5 || net_now >= 0.5) {
		int in = ee->delta[PH_NET_IN] >= ee->delta[PH_NET_OUT];
		if ((f = rp_add_finding(r, in ? "network-in dominating" : "network-out dominating", in ? "net-in" : "net-out",
				     2 + fmax(net_share, net_now) * 0.4, 5))) {
			snprintf(f->title, sizeof(f->title), "Network %s dominates: time goes to %s (client or network)",
				 in ? "in" : "out", in ? "receiving requests" : "delivering responses");
			snprintf(f->evidence, sizeof(f->evidence),
				 "net-in and net-out carry %.0f%% of the p99 e2e increase; p99 net-in %s (baseline %s), "
				 "p99 net-out %s (baseline %s)", net_share * 100, timefmt_dur(s1, 16, i->m[TM_NET_IN].p99),
				 timefmt_dur(s2, 16, b->m[TM_NET_IN].p99), timefmt_dur(s3, 16, i->m[TM_NET_OUT].p99),
				 timefmt_dur(s4, 16, b->m[TM_NET_OUT].p99));
			snprintf(f->action, sizeof(f->action), "check the clients (slow readers, slow uploads) and the "
				 "path: the connection's RTT is in requests.srtt_us");
		}
	}
}

/* Mean part of each hop name over the top-level requests ranked within +-1
 * percentile of the p99 of e2e, and at least the slowest 5 (one stall of a
 * single request does not name a hop); *p99 that percentile, *n the requests. */
static void hops_band(struct trace_hops *h, int64_t from, int64_t to, double *mean, double *p99, int *n)
{
	const struct trace_hops_req *rows;
	int m = trace_hops_window(h, from, to, &rows);

	memset(mean, 0, sizeof(double) * TRACE_HOPS_NAMES);
	*p99 = 0;
	*n = m > 0 ? m : 0;
	if (m <= 0)
		return;
	struct keyed *k = malloc(sizeof(*k) * (size_t)m);
	if (!k) {
		*n = 0;
		return;
	}
	for (int i = 0; i < m; i++)
		k[i] = (struct keyed){ .key = rows[i].e2e_ns, .i = i };
	qsort(k, (size_t)m, sizeof(*k), cmp_keyed);
	double ix = (m - 1) * 0.99;
	int lo = (int)floor(ix), hi = lo + 1 < m ? lo + 1 : lo;
	*p99 = (double)k[lo].key + ((double)k[hi].key - (double)k[lo].key) * (ix - lo);
	int a = (int)floor((m - 1) * 0.98), b = m - 1;
	if (b - a + 1 < 5)
		a = b - 4 > 0 ? b - 4 : 0;
	for (int j = a; j <= b; j++)
		for (int q = 0; q < TRACE_HOPS_NAMES; q++)
			mean[q] += (double)rows[k[j].i].part_ns[q];
	for (int q = 0; q < TRACE_HOPS_NAMES; q++)
		mean[q] /= (b - a + 1);
	free(k);
}

/* 6. integration overhead: the top-level requests' p99 grew, and the hops of
 * their traces say which one (a guardrail, a retrieval call, the gateway
 * itself, or the model) */
static void finding_integration(const struct fctx *c)
{
	struct report *r = c->r;
	double mb[TRACE_HOPS_NAMES], mi[TRACE_HOPS_NAMES], pb, pi, pos = 0;
	char err[256], s1[16], s2[16], s3[16], s4[16];
	struct trace_hops *h = trace_hops_open(r->t, err, sizeof(err));
	struct rp_finding *f;
	int nb, ni, top = 0;

	if (!h)
		return;         /* a trace without hops (before schema version 8) */
	hops_band(h, r->base.from_ns, r->base.to_ns, mb, &pb, &nb);
	hops_band(h, r->inc.from_ns, r->inc.to_ns, mi, &pi, &ni);
	int names = trace_hops_n_names(h), model = trace_hops_model(h);
	if (nb < 5 || ni < 5 || pi <= 1.05 * pb || !names) {
		trace_hops_close(h);
		return;
	}
	for (int k = 0; k < names; k++) {
		pos += fmax(mi[k] - mb[k], 0);
		if (mi[k] - mb[k] > mi[top] - mb[top])
			top = k;
	}
	double share = pos > 0 ? fmax(mi[top] - mb[top], 0) / pos : 0;
	int is_model = top == model;
	if (pos > 0 && (f = rp_add_finding(r, "integration overhead", "integration",
					is_model ? 1 + 0.5 * share : 4 + 0.9 * share, 6))) {
		const char *name = trace_hops_name(h, top);
		snprintf(f->title, sizeof(f->title), "%s: the %s hop grew, %.0f%% of the p99 increase of the "
			 "top-level requests%s", is_model ? "Model hop" : "Integration overhead", name,
			 share * 100, is_model ? " (the model server itself: see its own findings)" : "");
		int n = snprintf(f->evidence, sizeof(f->evidence),
				 "%d top-level requests with several hops (baseline %d); their p99 e2e %s "
				 "(baseline %s); around the p99, %s took %s (baseline %s)", ni, nb,
				 timefmt_dur(s1, 16, pi), timefmt_dur(s2, 16, pb), name,
				 timefmt_dur(s3, 16, mi[top]), timefmt_dur(s4, 16, mb[top]));
		for (int k = 0; k < names && n < (int)sizeof(f->evidence) - 80; k++) {
			if (k == top || pos <= 0 || fmax(mi[k] - mb[k], 0) / pos < 0.05)
				continue;
			n += snprintf(f->evidence + n, sizeof(f->evidence) - (size_t)n, "; %s %.0f%% (%s → %s)",
				      trace_hops_name(h, k), fmax(mi[k] - mb[k], 0) / pos * 100,
				      timefmt_dur(s1, 16, mb[k]), timefmt_dur(s2, 16, mi[k]));
		}
		if (is_model)
			snprintf(f->action, sizeof(f->action), "the time went to the model server: read its "
				 "phases (queue, prefill, decode) in the findings above");
		else if (strstr(name, " (itself)"))
			snprintf(f->action, sizeof(f->action), "the front process's own time grew (its work, or "
				 "calls to something not traced): profile it, trace what it calls");
		else
			snprintf(f->action, sizeof(f->action), "look at the %s service: the client waits for it "
				 "besides the model (its latency, or run it beside the model call)", name);
	}
	trace_hops_close(h);
}

static void findings(struct report *r)
{
	const struct trace_window *i = &r->inc.w;
	struct fctx c = {
		.r = r, .i = i, .b = &r->base.w, .tt = &r->attr[0], .ee = &r->attr[2],
		.rej = i->samples ? i->rejections : i->rejected,
		.secs = (double)(r->inc.to_ns - r->inc.from_ns) / NS_PER_S,
		.bsecs = (double)(r->base.to_ns - r->base.from_ns) / NS_PER_S,
		.ssecs = (double)(i->samples_to_ns - r->inc.from_ns) / NS_PER_S,
		.bssecs = (double)(r->base.w.samples_to_ns - r->base.from_ns) / NS_PER_S,
	};
	struct rp_finding *f;

	int with_split = 0;
	for (int k = 0; k < TRACE_SRC_N; k++)
		with_split += trace_source_split(k) ? i->by_source[k] : 0;
	if (i->by_source[TRACE_SRC_HTTP] && !with_split) {
		finding_split_unknown(&c);
	} else {
		finding_queue(&c);
		finding_kv(&c);
		finding_prefill(&c);
		finding_reuse(&c);
	}
	finding_cpu(&c);
	finding_network(&c);
	finding_integration(&c);
	report_disagg_findings(r);
	report_agents_findings(r);
	if (!r->nf && (f = rp_add_finding(r, "no known cause matched", trace_phase_name[c.ee->top], 0, 9))) {
		snprintf(f->title, sizeof(f->title), "No known cause matched; the largest change is in %s",
			 c.ee->name[c.ee->top]);
		snprintf(f->evidence, sizeof(f->evidence), "%s %s", c.tt->words, c.ee->words);
		snprintf(f->action, sizeof(f->action), "look at the slowest requests below and the timelines");
	}
	lost_finding(r);
	rp_sort_findings(r);
}

/* ---- the whole analysis --------------------------------------------------- */

/* Picks the baseline for the incident [from, to): the user's, or the
 * quietest comparable window. 1 found (r->base's bounds and base_how set),
 * 0 none (base_how says why and what to pass), -1 on a read error. */
static int pick_baseline(struct report *r, struct ttft_rows *tr, int64_t from, int64_t to,
			 int64_t base_from, int64_t base_to, int have_base)
{
	char a[40];
	int64_t len = to - from, bf;
	if (have_base) {
		r->base.from_ns = base_from;
		r->base.to_ns = base_to;
		snprintf(r->base_how, sizeof(r->base_how), "as given");
		return 1;
	}
	int min_n = r->inc.w.done / 10 > 10 ? r->inc.w.done / 10 : 10;
	double p99;
	int ncand = 0;
	if (search_baseline(tr, r->first_ns, from, len, min_n, &bf, &p99, &ncand)) {
		snprintf(r->base_how, sizeof(r->base_how), "picked automatically: the quietest comparable "
			 "window before the incident, i.e. of the %d windows of the same length with at least "
			 "%d finished requests, the one with the lowest p99 TTFT (%s)",
			 ncand, min_n, timefmt_dur(a, sizeof(a), p99));
	} else if (from - r->first_ns >= 2 * NS_PER_S &&
		   trace_window_stats(r->t, r->first_ns, from, true, &r->base.w) == 0 && r->base.w.done >= min_n) {
		bf = r->first_ns;
		len = from - r->first_ns;
		snprintf(r->base_how, sizeof(r->base_how), "picked automatically: the whole trace before "
			 "the incident (%s, shorter than the incident: no window of its length before it "
			 "had %d finished requests)", timefmt_dur(a, sizeof(a), (double)len), min_n);
	} else if (search_baseline(tr, to, r->last_ns + 1, len, min_n, &bf, &p99, &ncand)) {
		snprintf(r->base_how, sizeof(r->base_how), "picked automatically AFTER the incident: no "
			 "window before it had %d finished requests; of the %d later windows of the same "
			 "length, the one with the lowest p99 TTFT (%s)", min_n, ncand,
			 timefmt_dur(a, sizeof(a), p99));
	} else {
		snprintf(r->base_how, sizeof(r->base_how), "none: no other window of %s in the trace has %d "
			 "finished requests, so nothing is compared; pass --baseline FROM..TO to compare",
			 timefmt_dur(a, sizeof(a), (double)len), min_n);
		return 0;
	}
	r->base.from_ns = bf;
	r->base.to_ns = bf + len;
	return 1;
}


static int analyze(struct report *r, struct ttft_rows *tr, int64_t from, int have_from, int64_t to,
		   int have_to, int64_t base_from, int64_t base_to, int have_base, char *err, size_t errlen)
{
	char a[40], b[40], c[40], d[40];
	int64_t bucket;
	/* incident window */
	if (have_from || have_to) {
		if (!have_to) to = r->last_ns + 1;
		if (!have_from) from = to - DEFAULT_INCIDENT;
		snprintf(r->inc_how, sizeof(r->inc_how), "as given");
	} else if (detect_incident(r, tr, &from, &to, &bucket)) {
		snprintf(r->inc_how, sizeof(r->inc_how), "picked automatically: the stretch where p99 TTFT "
			 "stayed at least half-way up to its worst value over %s buckets",
			 timefmt_dur(a, sizeof(a), (double)bucket));
	} else if (have_base) {
		to = r->last_ns + 1;
		from = to - DEFAULT_INCIDENT;
		snprintf(r->inc_how, sizeof(r->inc_how), "no stretch stood out (p99 TTFT never doubled): "
			 "the last 5 minutes of the trace, against the baseline given");
	} else {
		/* nothing to compare: the whole trace, summarised */
		from = r->first_ns;
		to = r->last_ns + 1;
		snprintf(r->inc_how, sizeof(r->inc_how), "the whole trace: no stretch stood out (p99 TTFT "
			 "never doubled over its buckets)");
		snprintf(r->base_how, sizeof(r->base_how), "none: nothing stood out, so nothing is compared; "
			 "to compare two stretches, pass --from/--to and --baseline FROM..TO");
	}
	if (to <= from) {
		snprintf(err, errlen, "the window %s .. %s is empty: --from must come before --to",
			 trace_fmt_time(r->t, a, sizeof(a), from, 1), trace_fmt_time(r->t, b, sizeof(b), to, 1));
		return -1;
	}
	if (to <= r->first_ns || from > r->last_ns) {
		snprintf(err, errlen, "no requests arrived between %s and %s; the trace spans %s to %s",
			 trace_fmt_time(r->t, a, sizeof(a), from, 1), trace_fmt_time(r->t, b, sizeof(b), to, 1),
			 trace_fmt_time(r->t, c, sizeof(c), r->first_ns, 1), trace_fmt_time(r->t, d, sizeof(d), r->last_ns, 1));
		return -1;
	}
	if (from < r->first_ns) from = r->first_ns;
	r->inc.from_ns = from;
	r->inc.to_ns = to;
	if (load_window(r, &r->inc, err, errlen)) return -1;
	if (r->inc.w.requests == 0) {
		snprintf(err, errlen, "no requests arrived between %s and %s; the trace spans %s to %s",
			 trace_fmt_time(r->t, a, sizeof(a), from, 1), trace_fmt_time(r->t, b, sizeof(b), to, 1),
			 trace_fmt_time(r->t, c, sizeof(c), r->first_ns, 1), trace_fmt_time(r->t, d, sizeof(d), r->last_ns, 1));
		return -1;
	}

	/* baseline window: none when nothing stood out (base_how says so already) */
	int found = r->base_how[0] ? 0 : pick_baseline(r, tr, from, to, base_from, base_to, have_base);
	if (found < 0)
		goto sqlfail;
	r->compare = found;
	if (found) {
		if (load_window(r, &r->base, err, errlen)) return -1;
		if (attribute(r, &r->attr[0], "TTFT", 99) || attribute(r, &r->attr[1], "TTFT", 50) ||
		    attribute(r, &r->attr[2], "e2e", 99) || attribute(r, &r->attr[3], "e2e", 50))
			goto sqlfail;
	} else {
		r->base.from_ns = r->base.to_ns = from;   /* empty: the timeline marks no baseline */
	}

	/* timeline: both windows with some context around them */
	int64_t lo = found && r->base.from_ns < from ? r->base.from_ns : from;
	int64_t hi = found && r->base.to_ns > to ? r->base.to_ns : to;
	int64_t margin = (hi - lo) / 10;
	r->tl_from = lo - margin < r->first_ns ? r->first_ns : lo - margin;
	r->tl_to = hi + margin > r->last_ns + 1 ? r->last_ns + 1 : hi + margin;
	if (trace_series(r->t, r->tl_from, r->tl_to, RP_TIMELINE, r->tl)) goto sqlfail;
	if (trace_queue_series(r->t, r->tl_from, r->tl_to, RP_TIMELINE, r->tl, err, errlen)) return -1;
	r->nslow = trace_slowest(r->t, from, to, r->slow, RP_SLOWEST);
	report_agents_analyze(r);
	if (found)
		findings(r);
	else
		lost_finding(r);   /* a loss is worth saying with or without a comparison */
	report_cost_analyze(r, r->price);
	report_weights_analyze(r);
	report_pods_analyze(r);
	return 0;
sqlfail:
	snprintf(err, errlen, "reading %s failed: %s", trace_path(r->t), trace_errmsg(r->t));
	return -1;
}

int report_analyze(struct report *r, int64_t from, int have_from, int64_t to, int have_to,
		   int64_t base_from, int64_t base_to, int have_base, char *err, size_t errlen)
{
	if (!trace_span(r->t, &r->first_ns, &r->last_ns)) {
		snprintf(err, errlen, "%s holds no requests or samples yet: let kpi-agent record some traffic first",
			 trace_path(r->t));
		return -1;
	}
	struct ttft_rows tr = { 0 };
	int nrows = trace_column(r->t, "ttft_ns", r->first_ns, r->last_ns + 1, &tr.t, &tr.v);
	if (nrows < 0) {
		snprintf(err, errlen, "reading %s failed: %s", trace_path(r->t), trace_errmsg(r->t));
		return -1;
	}
	tr.n = (size_t)nrows;
	tr.scratch = malloc(sizeof(int64_t) * (tr.n ? tr.n : 1));
	if (!tr.scratch) {
		snprintf(err, errlen, "out of memory for the TTFT of %d requests", nrows);
		return -1;
	}
	int rc = analyze(r, &tr, from, have_from, to, have_to, base_from, base_to, have_base, err, errlen);
	free(tr.scratch);
	return rc;
}
