/* trace_disagg.c - the client-facing rows of disaggregated requests over a
 * window: phase percentiles, the KV transfer's rate, the decode side's slot
 * waits and the p99 TTFT band's make-up (trace_disagg.h). */
#include <math.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tools/common/trace_disagg.h"
#include "schema/pct.h"

const char *const trace_disagg_phase_name[TD_N] = {
	"net-in", "router", "prefill queue", "prefill", "KV transfer", "decode queue", "decode", "net-out",
};
const char *const trace_slot_wait_name[TD_SLOT_N] = { "slots", "blocks", "queue", "none" };

struct pd_row {
	int64_t ph[TD_N], ttft, kv_bytes, kv_stream;
	bool kv_ok;
};

struct trace_disagg {
	sqlite3 *db;
	sqlite3_stmt *q;
	struct pd_row *rows;
	size_t n, cap;
	double *scratch;
};

/* The row that stands for the request: the router's, or a decode worker's
 * that no traced router's row holds (010_disagg.sql). */
#define PD_TOP "pd_role IN ('router', 'decode') AND parent_hop_id IS NULL"

struct trace_disagg *trace_disagg_open(struct trace *t, char *err, size_t errlen)
{
	struct trace_disagg *d = calloc(1, sizeof(*d));

	if (!d)
		abort();
	if (sqlite3_open_v2(trace_path(t), &d->db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "cannot open %s for its disaggregated requests: %s", trace_path(t),
			 d->db ? sqlite3_errmsg(d->db) : "out of memory");
		goto fail;
	}
	sqlite3_busy_timeout(d->db, 1000);
	if (sqlite3_prepare_v2(d->db,
			       "SELECT net_in_ns, router_ns, queue_ns, prefill_ns, kv_transfer_ns, "
			       "decode_queue_ns, decode_ns, net_out_ns, ttft_ns, kv_bytes, kv_stream_ns, "
			       "kv_status, slot_wait, slot_waiting_ahead FROM requests "
			       "WHERE t_arrive_ns >= ?1 AND t_arrive_ns < ?2 AND " PD_TOP,
			       -1, &d->q, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "%s: no disaggregation columns (%s): a trace written before schema "
			 "version 10 has no disaggregated requests", trace_path(t), sqlite3_errmsg(d->db));
		goto fail;
	}
	return d;
fail:
	trace_disagg_close(d);
	return NULL;
}

void trace_disagg_close(struct trace_disagg *d)
{
	if (!d)
		return;
	sqlite3_finalize(d->q);
	sqlite3_close(d->db);
	free(d->rows);
	free(d->scratch);
	free(d);
}

static int64_t col(sqlite3_stmt *q, int c)
{
	return sqlite3_column_type(q, c) == SQLITE_NULL ? -1 : sqlite3_column_int64(q, c);
}

/* Percentiles of the non-negative values v(row) of the rows. */
static void dist(struct trace_disagg *d, int64_t (*v)(const struct pd_row *, int), int k,
		 struct trace_dist *out)
{
	size_t n = 0;
	double sum = 0;

	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < d->n; i++) {
		int64_t x = v(&d->rows[i], k);
		if (x < 0)
			continue;
		d->scratch[n++] = (double)x;
		sum += (double)x;
	}
	out->n = (int)n;
	if (!n)
		return;
	out->mean = sum / (double)n;
	out->p50 = pct_select_f64(d->scratch, n, 50);
	out->p95 = pct_select_f64(d->scratch, n, 95);
	out->p99 = pct_select_f64(d->scratch, n, 99);
	out->max = out->p50;
	for (size_t i = 0; i < n; i++)
		out->max = fmax(out->max, d->scratch[i]);
}

static int64_t phase_of(const struct pd_row *r, int k) { return r->ph[k]; }
static int64_t ttft_of(const struct pd_row *r, int k) { return r->ttft; }

static int cmp_ttft(const void *a, const void *b)
{
	int64_t x = ((const struct pd_row *)a)->ttft, y = ((const struct pd_row *)b)->ttft;
	return x < y ? -1 : x > y;
}

/* The mean phases of the rows ranked within +-width percentiles of the p-th
 * by TTFT (at least the 5 nearest) into band[]; d->rows sorted by TTFT, the
 * first lo without one.  Returns how many rows it took. */
static int ttft_band(const struct trace_disagg *d, size_t lo, double p, double width, double *band)
{
	size_t m = d->n - lo;
	if (!m)
		return 0;
	size_t a = (size_t)floor((double)(m - 1) * fmax(p - width, 0) / 100);
	size_t b = (size_t)ceil((double)(m - 1) * fmin(p + width, 100) / 100);
	while (b - a + 1 < 5 && (a > 0 || b < m - 1)) {
		if (b < m - 1)
			b++;
		if (b - a + 1 < 5 && a > 0)
			a--;
	}
	for (size_t j = a; j <= b; j++) {
		const struct pd_row *r = &d->rows[lo + j];
		double known = 0;
		for (int k = 0; k < TD_TTFT_N; k++) {
			double v = r->ph[k] > 0 ? (double)r->ph[k] : 0;
			band[k] += v;
			known += v;
		}
		band[TD_TTFT_N] += fmax((double)r->ttft - known, 0);
	}
	for (int k = 0; k <= TD_TTFT_N; k++)
		band[k] /= (double)(b - a + 1);
	return (int)(b - a + 1);
}

/* The p99 and the median TTFT bands (rows without a TTFT left out). */
static void ttft_bands(struct trace_disagg *d, struct trace_disagg_window *w)
{
	size_t lo = 0;

	qsort(d->rows, d->n, sizeof(*d->rows), cmp_ttft);
	while (lo < d->n && d->rows[lo].ttft < 0)
		lo++;
	w->band_n = ttft_band(d, lo, 99, 1, w->band);
	w->band50_n = ttft_band(d, lo, 50, 5, w->band50);
}

int trace_disagg_window(struct trace_disagg *d, int64_t from_ns, int64_t to_ns,
			struct trace_disagg_window *w)
{
	double bytes = 0, stream = 0;
	int rc;

	memset(w, 0, sizeof(*w));
	w->rate = w->rate_p50 = -1;
	d->n = 0;
	sqlite3_reset(d->q);
	sqlite3_bind_int64(d->q, 1, from_ns);
	sqlite3_bind_int64(d->q, 2, to_ns);
	while ((rc = sqlite3_step(d->q)) == SQLITE_ROW) {
		if (d->n == d->cap) {
			size_t cap = d->cap ? d->cap * 2 : 256;
			struct pd_row *nr = realloc(d->rows, cap * sizeof(*nr));
			double *ns = realloc(d->scratch, cap * sizeof(*ns));
			if (!nr || !ns)
				abort();
			d->rows = nr;
			d->scratch = ns;
			d->cap = cap;
		}
		struct pd_row *r = &d->rows[d->n++];
		r->kv_ok = false;
		for (int k = 0; k < TD_N; k++)
			r->ph[k] = col(d->q, k);
		r->ttft = col(d->q, 8);
		r->kv_bytes = col(d->q, 9);
		r->kv_stream = col(d->q, 10);
		const char *st = (const char *)sqlite3_column_text(d->q, 11);
		const char *slot = (const char *)sqlite3_column_text(d->q, 12);
		int ahead = (int)col(d->q, 13);
		w->requests++;
		if (r->kv_bytes >= 0) {
			w->transfers++;
			w->kv_bytes += r->kv_bytes;
			if (st && strcmp(st, "ok"))
				w->failed++;
			r->kv_ok = st && !strcmp(st, "ok") && r->kv_stream > 0;
			if (r->kv_ok) {
				bytes += (double)r->kv_bytes;
				stream += (double)r->kv_stream;
			}
		}
		for (int k = 0; slot && k < TD_SLOT_N; k++)
			if (!strcmp(slot, trace_slot_wait_name[k]))
				w->slot[k]++;
		if (ahead > w->slot_ahead_max)
			w->slot_ahead_max = ahead;
	}
	sqlite3_reset(d->q);
	if (rc != SQLITE_DONE)
		return -1;
	if (!d->n)
		return 0;
	for (int k = 0; k < TD_N; k++)
		dist(d, phase_of, k, &w->ph[k]);
	dist(d, ttft_of, 0, &w->ttft);
	if (w->transfers)
		w->kv_bytes_mean = (double)w->kv_bytes / w->transfers;
	if (stream > 0) {
		size_t n = 0;
		w->rate = bytes / (stream / 1e9);
		for (size_t i = 0; i < d->n; i++)
			if (d->rows[i].kv_ok)
				d->scratch[n++] = (double)d->rows[i].kv_bytes / ((double)d->rows[i].kv_stream / 1e9);
		w->rate_p50 = pct_select_f64(d->scratch, n, 50);
	}
	ttft_bands(d, w);
	return 0;
}
