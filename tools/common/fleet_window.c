/* fleet_window.c - one window of every host, computed by ClickHouse: counts
 * and sorted arrays per host (GROUP BY host WITH TOTALS over requests FINAL),
 * of which only the ranks a percentile needs come back, interpolated here
 * exactly as schema/pct.c does; losses per host and cause, samples' last. */
#include "tools/common/fleet_window.h"
#include "tools/common/clickhouse.h"
#include "schema/lhist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct fleet {
	struct ch_conn *ch;
	struct ch_url u;
	struct buf q, ans;
	int64_t first_wall_ns, last_wall_ns;    /* the span seen so far (0: none yet) */
	int minutes;                            /* request_minutes is there */
	struct minute_acc *acc;                 /* per host, while a window is read from buckets */
	int n_acc;
	char err[512];
};

/* One host's counts and histograms (TTFT, TPOT, e2e) summed over the
 * window's aggregate minutes and raw edges. */
struct minute_acc {
	char name[128];
	int64_t requests, done, rejected, errors, out_tok, last;
	uint64_t h[3][LHIST_BUCKETS];
};

/* ---- connection ---------------------------------------------------------------- */

struct fleet *fleet_open(const char *url, char *err, size_t errlen)
{
	struct fleet *f = calloc(1, sizeof(*f));
	if (!f) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (ch_url_parse(url, &f->u, err, errlen))
		goto fail;
	if (!(f->ch = ch_open(&f->u, 60000))) {
		snprintf(err, errlen, "out of memory for the ClickHouse connection");
		goto fail;
	}
	char sql[256];
	snprintf(sql, sizeof(sql), "SELECT count() FROM system.tables WHERE database = '%s' AND name IN "
		 "('requests', 'samples', 'losses') FORMAT TabSeparated", f->u.db);
	if (ch_query(f->ch, sql, &f->ans, f->err, sizeof(f->err))) {
		snprintf(err, errlen, "%s: %s (is clickhouse-server running there?)", f->u.text, f->err);
		goto fail;
	}
	snprintf(sql, sizeof(sql), "SELECT count() FROM system.tables WHERE database = '%s' AND name = "
		 "'request_minutes' FORMAT TabSeparated", f->u.db);
	int tables = atoi(f->ans.p);
	if (!ch_query(f->ch, sql, &f->ans, f->err, sizeof(f->err)))
		f->minutes = atoi(f->ans.p) == 1;
	if (tables != 3) {
		snprintf(err, errlen, "%s has no kpiscope tables (requests, samples, losses in database %s): create "
			 "them from schema/clickhouse/ (docs/fleet.md, \"ClickHouse\") and ship with kpi-ship",
			 f->u.text, f->u.db);
		goto fail;
	}
	return f;
fail:
	fleet_close(f);
	return NULL;
}

void fleet_close(struct fleet *f)
{
	if (!f)
		return;
	ch_close(f->ch);
	free(f->acc);
	buf_free(&f->q);
	buf_free(&f->ans);
	free(f);
}

void fleet_set_timeout(struct fleet *f, long timeout_ms) { ch_set_timeout(f->ch, timeout_ms); }
const char *fleet_url(const struct fleet *f) { return f->u.text; }
const char *fleet_errmsg(const struct fleet *f) { return f->err; }

/* f->q as a query; the answer's lines in f->ans. */
static int ask(struct fleet *f)
{
	char why[400];
	if (!ch_query(f->ch, f->q.p, &f->ans, why, sizeof(why)))
		return 0;
	snprintf(f->err, sizeof(f->err), "%.100s: %.400s", f->u.text, why);
	return -1;
}

/* The next line of the answer, cut at its newline; NULL at the end. */
static char *next_line(char **p)
{
	char *line = *p;
	if (!line || !*line)
		return NULL;
	char *nl = strchr(line, '\n');
	if (nl)
		*nl = 0;
	*p = nl ? nl + 1 : NULL;
	return line;
}

/* ---- the span ------------------------------------------------------------------ */

/* The requests to read for the span at the first call, as a WHERE: with
 * the aggregates, the rows before the end of their first minute (the oldest
 * row is there, or older: a host whose minutes are not shipped yet) and
 * those from their newest row on (the newest is there, or newer), not every
 * row. */
static void span_rows(struct fleet *f, char *where, size_t len)
{
	const long long min_ns = 60000000000LL;
	char *fl[3], *p;
	const char *line;

	snprintf(where, len, "wall_ns >= %lld", (long long)f->last_wall_ns);
	if (f->last_wall_ns || !f->minutes)
		return;
	buf_reset(&f->q);
	buf_printf(&f->q, "SELECT min(minute), max(last_wall_ns), count() FROM request_minutes "
		      "FORMAT TabSeparated");
	if (ask(f))
		return;         /* asked again below, which says what failed */
	p = f->ans.p;
	if (!(line = next_line(&p)) || ch_tsv_split((char *)line, fl, 3) != 3 || atoll(fl[2]) <= 0)
		return;
	snprintf(where, len, "wall_ns < %lld OR wall_ns >= %lld", atoll(fl[0]) * 1000000000LL + min_ns,
		 atoll(fl[1]));
}

int fleet_span(struct fleet *f, int64_t *first_wall_ns, int64_t *last_wall_ns)
{
	/* past the first call, only what is at least as new as the newest seen:
	 * ClickHouse skips the parts whose wall_ns all lie before it */
	int64_t since = f->last_wall_ns;
	char where[128];
	span_rows(f, where, sizeof(where));
	buf_reset(&f->q);
	buf_printf(&f->q, "SELECT min(a), max(b), sum(c) FROM (SELECT min(wall_ns) AS a, max(wall_ns) AS b, "
		      "count() AS c FROM requests WHERE %s UNION ALL SELECT min(wall_ns), max(wall_ns), "
		      "count() FROM samples WHERE wall_ns >= %lld) FORMAT TabSeparated", where,
		      (long long)since);
	if (ask(f))
		return -1;
	char *fl[3], *p = f->ans.p, *line = next_line(&p);
	if (!line || ch_tsv_split(line, fl, 3) != 3) {
		snprintf(f->err, sizeof(f->err), "%s: an answer of an unexpected shape to the span's query", f->u.text);
		return -1;
	}
	if (atoll(fl[2]) > 0) {
		if (!f->first_wall_ns)
			f->first_wall_ns = atoll(fl[0]);
		f->last_wall_ns = atoll(fl[1]);
	}
	*first_wall_ns = f->first_wall_ns;
	*last_wall_ns = f->last_wall_ns;
	return f->last_wall_ns ? 1 : 0;
}

/* ---- one window ---------------------------------------------------------------- */

static const int pcts[3] = { 50, 95, 99 };

/* The outer query's columns for sorted array a: its length, then for each
 * percentile the values at the two ranks around it (k = floor((n-1)p/100),
 * as pct.c takes it: 1-based k+1 and k+2), then its last (the max). */
static void dist_columns(struct buf *q, const char *a)
{
	buf_printf(q, ", length(%s)", a);
	for (int i = 0; i < 3; i++)
		buf_printf(q, ", %s[intDiv((toInt64(length(%s)) - 1) * %d, 100) + 1], "
			      "%s[intDiv((toInt64(length(%s)) - 1) * %d, 100) + 2]", a, a, pcts[i], a, a, pcts[i]);
	buf_printf(q, ", %s[-1]", a);
}
#define DIST_FIELDS 8

/* pct.c's interpolation over the ranks k and k + 1 of n values. */
static double interpolate(double lo, double hi, int64_t n, int p)
{
	double ix = (double)(n - 1) * p / 100.0;
	int64_t k = (int64_t)ix;
	double frac = ix - (double)k;
	if (frac == 0 || k + 1 >= n)
		return lo;
	return lo + (hi - lo) * frac;
}

static void dist_parse(struct trace_dist *d, char **f)
{
	memset(d, 0, sizeof(*d));
	d->n = atoi(f[0]);
	if (!d->n)
		return;
	double v[3];
	for (int i = 0; i < 3; i++)
		v[i] = interpolate(atof(f[1 + 2 * i]), atof(f[2 + 2 * i]), d->n, pcts[i]);
	d->p50 = v[0];
	d->p95 = v[1];
	d->p99 = v[2];
	d->max = atof(f[7]);
}

/* The host named name, added (in name order) when new; NULL past the most. */
static struct fleet_host *host_of(struct fleet_window *w, const char *name)
{
	int lo = 0, hi = w->n_hosts;
	while (lo < hi) {
		int mid = (lo + hi) / 2, c = strcmp(w->host[mid].name, name);
		if (!c)
			return &w->host[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (w->n_hosts == FLEET_MAX_HOSTS) {
		w->more_hosts++;
		return NULL;
	}
	memmove(&w->host[lo + 1], &w->host[lo], sizeof(w->host[0]) * (size_t)(w->n_hosts - lo));
	memset(&w->host[lo], 0, sizeof(w->host[0]));
	snprintf(w->host[lo].name, sizeof(w->host[0].name), "%s", name);
	w->n_hosts++;
	return &w->host[lo];
}

/* requests FINAL of the window, per host and for the fleet (WITH TOTALS:
 * the row after the empty line) */
static int read_requests(struct fleet *f, struct fleet_window *w)
{
	const char *ok = "ifNull(http_status, 0) != 429";
	buf_reset(&f->q);
	buf_printf(&f->q, "SELECT host, requests, done, rejected, errors, out_tok, last");
	dist_columns(&f->q, "a0");
	dist_columns(&f->q, "a1");
	dist_columns(&f->q, "a2");
	buf_printf(&f->q, " FROM (SELECT host, count() AS requests, countIf(%s AND isNotNull(e2e_ns)) AS done, "
		      "countIf(NOT %s) AS rejected, countIf(%s AND (ifNull(http_status, 0) >= 400 OR "
		      "ifNull(finish_reason, '') = 'error')) AS errors, sumIf(ifNull(output_tokens, 0), %s) AS out_tok, "
		      "max(wall_ns) AS last", ok, ok, ok, ok);
	static const char *const cols[3] = { "ttft_ns", "tpot_ns", "e2e_ns" };
	for (int i = 0; i < 3; i++)
		buf_printf(&f->q, ", arraySort(groupArrayIf(assumeNotNull(%s), %s AND isNotNull(%s))) AS a%d", cols[i],
			      ok, cols[i], i);
	buf_printf(&f->q, " FROM requests FINAL WHERE wall_ns >= %lld AND wall_ns < %lld GROUP BY host "
		      "WITH TOTALS) FORMAT TabSeparated", (long long)w->from_wall_ns, (long long)w->to_wall_ns);
	if (ask(f))
		return -1;
	char *p = f->ans.p, *line, *fl[7 + 3 * DIST_FIELDS];
	int totals = 0;
	double secs = (double)(w->to_wall_ns - w->from_wall_ns) / 1e9;
	while ((line = next_line(&p))) {
		if (!*line) {
			totals = 1;         /* the empty line before the totals */
			continue;
		}
		if (ch_tsv_split(line, fl, 7 + 3 * DIST_FIELDS) != 7 + 3 * DIST_FIELDS) {
			snprintf(f->err, sizeof(f->err), "%s: an answer of an unexpected shape to the window's query",
				 f->u.text);
			return -1;
		}
		const char *name = ch_tsv_field(fl[0]);
		struct fleet_host *h = totals ? &w->all : host_of(w, name ? name : "");
		if (!h)
			continue;
		h->requests = atoi(fl[1]);
		h->done = atoi(fl[2]);
		h->rejected = atoi(fl[3]);
		h->errors = atoi(fl[4]);
		h->output_tokens = atoll(fl[5]);
		h->last_wall_ns = atoll(fl[6]);
		h->req_per_s = h->requests / secs;
		h->out_tok_per_s = (double)h->output_tokens / secs;
		dist_parse(&h->ttft, fl + 7);
		dist_parse(&h->tpot, fl + 7 + DIST_FIELDS);
		dist_parse(&h->e2e, fl + 7 + 2 * DIST_FIELDS);
	}
	return 0;
}

/* ---- one window from the per-minute buckets ------------------------------------ */

static struct minute_acc *acc_of(struct fleet *f, const char *name)
{
	for (int i = 0; i < f->n_acc; i++)
		if (!strcmp(f->acc[i].name, name))
			return &f->acc[i];
	if (f->n_acc == FLEET_MAX_HOSTS)
		return NULL;
	if (!f->acc && !(f->acc = malloc(sizeof(*f->acc) * FLEET_MAX_HOSTS)))
		return NULL;
	struct minute_acc *a = &f->acc[f->n_acc++];
	memset(a, 0, sizeof(*a));
	snprintf(a->name, sizeof(a->name), "%s", name);
	return a;
}

/* "[1,0,3]" added into h */
static void add_array(uint64_t *h, const char *s)
{
	int i = 0;
	for (const char *p = s; *p && i < LHIST_BUCKETS; p++) {
		if (*p < '0' || *p > '9')
			continue;
		char *end;
		h[i++] += strtoull(p, &end, 10);
		p = end - 1;
	}
}

static void acc_counts(struct minute_acc *a, char **fl)
{
	a->requests += atoll(fl[0]);
	a->done += atoll(fl[1]);
	a->rejected += atoll(fl[2]);
	a->errors += atoll(fl[3]);
	a->out_tok += atoll(fl[4]);
	if (atoll(fl[5]) > a->last)
		a->last = atoll(fl[5]);
}

static const char *const hist_col[3] = { "ttft_ns", "tpot_ns", "e2e_ns" };

/* request_minutes FINAL of the whole minutes [lo, hi), per host */
static int read_minute_rows(struct fleet *f, int64_t lo, int64_t hi)
{
	buf_reset(&f->q);
	buf_printf(&f->q, "SELECT host, sum(requests), sum(done), sum(rejected), sum(errors), sum(output_tokens), "
		      "max(last_wall_ns), sumForEach(ttft), sumForEach(tpot), sumForEach(e2e) FROM request_minutes FINAL "
		      "WHERE minute >= %lld AND minute < %lld GROUP BY host FORMAT TabSeparated",
		      (long long)(lo / 1000000000LL), (long long)(hi / 1000000000LL));
	if (ask(f))
		return -1;
	char *p = f->ans.p, *line, *fl[10];
	while ((line = next_line(&p))) {
		if (ch_tsv_split(line, fl, 10) != 10)
			continue;
		const char *name = ch_tsv_field(fl[0]);
		struct minute_acc *a = acc_of(f, name ? name : "");
		if (!a)
			continue;
		acc_counts(a, fl + 1);
		for (int k = 0; k < 3; k++)
			add_array(a->h[k], fl[7 + k]);
	}
	return 0;
}

/* the raw rows of [from, lo) and [hi, to), counted and bucketed as kpi-ship does */
static int read_edges(struct fleet *f, const struct fleet_window *w, int64_t lo, int64_t hi)
{
	const char *ok = "ifNull(http_status, 0) != 429";
	char where[200];
	snprintf(where, sizeof(where), "((wall_ns >= %lld AND wall_ns < %lld) OR (wall_ns >= %lld AND wall_ns < %lld))",
		 (long long)w->from_wall_ns, (long long)lo, (long long)hi, (long long)w->to_wall_ns);
	buf_reset(&f->q);
	buf_printf(&f->q, "SELECT host, count(), countIf(%s AND isNotNull(e2e_ns)), countIf(NOT %s), countIf(%s AND "
		      "(ifNull(http_status, 0) >= 400 OR ifNull(finish_reason, '') = 'error')), "
		      "sumIf(ifNull(output_tokens, 0), %s), max(wall_ns) FROM requests FINAL WHERE %s GROUP BY host "
		      "FORMAT TabSeparated", ok, ok, ok, ok, where);
	if (ask(f))
		return -1;
	char *p = f->ans.p, *line, *fl[7];
	while ((line = next_line(&p))) {
		if (ch_tsv_split(line, fl, 7) != 7)
			continue;
		const char *name = ch_tsv_field(fl[0]);
		struct minute_acc *a = acc_of(f, name ? name : "");
		if (a)
			acc_counts(a, fl + 1);
	}
	for (int k = 0; k < 3; k++) {
		/* schema/lhist.c's lhist_index, in ClickHouse */
		buf_reset(&f->q);
		buf_printf(&f->q, "SELECT host, if(v < %d, 0, least(%d, 1 + toInt64(floor(log(v / %d) / "
			      "log((1 + %.17g) / (1 - %.17g)))))) AS i, count() FROM (SELECT host, assumeNotNull(%s) AS v "
			      "FROM requests FINAL WHERE %s AND %s AND isNotNull(%s)) GROUP BY host, i FORMAT TabSeparated",
			      LHIST_MIN_NS, LHIST_BUCKETS - 1, LHIST_MIN_NS, LHIST_ALPHA, LHIST_ALPHA, hist_col[k], where,
			      ok, hist_col[k]);
		if (ask(f))
			return -1;
		char *q = f->ans.p, *fk[3];
		while ((line = next_line(&q))) {
			if (ch_tsv_split(line, fk, 3) != 3)
				continue;
			const char *name = ch_tsv_field(fk[0]);
			struct minute_acc *a = acc_of(f, name ? name : "");
			int i = atoi(fk[1]);
			if (a && i >= 0 && i < LHIST_BUCKETS)
				a->h[k][i] += strtoull(fk[2], NULL, 10);
		}
	}
	return 0;
}

static void hist_dist(struct trace_dist *d, const uint64_t *h)
{
	memset(d, 0, sizeof(*d));
	d->n = (int)lhist_count(h, LHIST_BUCKETS);
	if (!d->n)
		return;
	d->p50 = lhist_quantile(h, LHIST_BUCKETS, 50);
	d->p95 = lhist_quantile(h, LHIST_BUCKETS, 95);
	d->p99 = lhist_quantile(h, LHIST_BUCKETS, 99);
	d->max = lhist_quantile(h, LHIST_BUCKETS, 100);
}

static void acc_host(struct fleet_host *h, const struct minute_acc *a, double secs)
{
	h->requests = (int)a->requests;
	h->done = (int)a->done;
	h->rejected = (int)a->rejected;
	h->errors = (int)a->errors;
	h->output_tokens = a->out_tok;
	h->last_wall_ns = a->last;
	h->req_per_s = (double)h->requests / secs;
	h->out_tok_per_s = (double)h->output_tokens / secs;
	hist_dist(&h->ttft, a->h[0]);
	hist_dist(&h->tpot, a->h[1]);
	hist_dist(&h->e2e, a->h[2]);
}

/* The window's requests from the whole minutes closed a minute before now,
 * the rest from the raw rows; every host's and the fleet's (their sum). */
static int read_requests_minutes(struct fleet *f, struct fleet_window *w, int64_t now_wall_ns)
{
	const int64_t min_ns = 60000000000LL;
	int64_t lo = (w->from_wall_ns + min_ns - 1) / min_ns * min_ns;
	int64_t closed = now_wall_ns - min_ns < w->to_wall_ns ? now_wall_ns - min_ns : w->to_wall_ns;
	int64_t hi = closed / min_ns * min_ns;
	if (w->from_wall_ns < 0 || hi <= lo)
		lo = hi = w->to_wall_ns;        /* no whole minute: every row raw */
	f->n_acc = 0;
	/* a window of whole closed minutes reads no raw row: its cost is hosts x minutes */
	if ((hi > lo && read_minute_rows(f, lo, hi)) ||
	    ((w->from_wall_ns < lo || hi < w->to_wall_ns) && read_edges(f, w, lo, hi)))
		return -1;
	static struct minute_acc all;
	memset(&all, 0, sizeof(all));
	double secs = (double)(w->to_wall_ns - w->from_wall_ns) / 1e9;
	for (int i = 0; i < f->n_acc; i++) {
		const struct minute_acc *a = &f->acc[i];
		if (!a->requests)
			continue;
		struct fleet_host *h = host_of(w, a->name);
		if (h)
			acc_host(h, a, secs);
		all.requests += a->requests;
		all.done += a->done;
		all.rejected += a->rejected;
		all.errors += a->errors;
		all.out_tok += a->out_tok;
		all.last = a->last > all.last ? a->last : all.last;
		for (int k = 0; k < 3; k++)
			for (int b = 0; b < LHIST_BUCKETS; b++)
				all.h[k][b] += a->h[k][b];
	}
	acc_host(&w->all, &all, secs);
	w->from_buckets = 1;
	return 0;
}

/* samples of the lookback: each host's newest (an agent writes one a second
 * per target, busy or idle: a host with no request in the window is a row
 * too, and one whose agent stopped shows since when) */
static int read_samples(struct fleet *f, struct fleet_window *w, int64_t look_from)
{
	buf_reset(&f->q);
	buf_printf(&f->q, "SELECT host, max(wall_ns) FROM samples WHERE wall_ns >= %lld AND wall_ns < %lld "
		      "GROUP BY host FORMAT TabSeparated", (long long)look_from, (long long)w->to_wall_ns);
	if (ask(f))
		return -1;
	char *p = f->ans.p, *line, *fl[2];
	while ((line = next_line(&p))) {
		if (ch_tsv_split(line, fl, 2) != 2)
			continue;
		const char *name = ch_tsv_field(fl[0]);
		struct fleet_host *h = host_of(w, name ? name : "");
		int64_t t = atoll(fl[1]);
		if (h && t > h->last_wall_ns)
			h->last_wall_ns = t;
		if (t > w->all.last_wall_ns)
			w->all.last_wall_ns = t;
	}
	return 0;
}

/* losses FINAL of the window, per host and cause, largest first */
static int read_losses(struct fleet *f, struct fleet_window *w)
{
	buf_reset(&f->q);
	buf_printf(&f->q, "SELECT host, cause, sum(n) AS lost FROM losses FINAL WHERE wall_ns >= %lld AND "
		      "wall_ns < %lld GROUP BY host, cause ORDER BY host, lost DESC, cause FORMAT TabSeparated",
		      (long long)w->from_wall_ns, (long long)w->to_wall_ns);
	if (ask(f))
		return -1;
	/* the fleet's largest cause: the causes summed over hosts */
	struct { char cause[24]; int64_t n; } sum[64];
	int ns = 0;
	char *p = f->ans.p, *line, *fl[3];
	while ((line = next_line(&p))) {
		if (ch_tsv_split(line, fl, 3) != 3)
			continue;
		const char *name = ch_tsv_field(fl[0]), *cause = ch_tsv_field(fl[1]);
		int64_t n = atoll(fl[2]);
		cause = cause ? cause : "?";
		struct fleet_host *h = host_of(w, name ? name : "");
		if (h) {
			if (!h->loss_causes++)
				snprintf(h->top_loss, sizeof(h->top_loss), "%s", cause);
			h->lost += n;
		}
		w->all.lost += n;
		int k;
		for (k = 0; k < ns && strcmp(sum[k].cause, cause); k++)
			;
		if (k == ns && ns < 64) {
			snprintf(sum[ns].cause, sizeof(sum[0].cause), "%s", cause);
			sum[ns++].n = 0;
		}
		if (k < ns)
			sum[k].n += n;
	}
	int best = 0;
	for (int k = 1; k < ns; k++)
		if (sum[k].n > sum[best].n || (sum[k].n == sum[best].n && strcmp(sum[k].cause, sum[best].cause) < 0))
			best = k;
	w->all.loss_causes = ns;
	if (ns)
		snprintf(w->all.top_loss, sizeof(w->all.top_loss), "%s", sum[best].cause);
	return 0;
}

int fleet_window_read(struct fleet *f, int64_t from_wall_ns, int64_t to_wall_ns, int64_t lookback_ns,
		      struct fleet_window *w)
{
	memset(w, 0, sizeof(*w));
	w->from_wall_ns = from_wall_ns;
	w->to_wall_ns = to_wall_ns;
	int64_t look_from = to_wall_ns - (lookback_ns > to_wall_ns - from_wall_ns ? lookback_ns
										  : to_wall_ns - from_wall_ns);
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	int64_t now_ns = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;
	if ((f->minutes ? read_requests_minutes(f, w, now_ns) : read_requests(f, w)) ||
	    read_samples(f, w, look_from) || read_losses(f, w))
		return -1;
	return 0;
}
