/* trace_pods.c - a window's requests grouped by pod_namespace/pod_name
 * (schema/013_containers.sql) on a connection of its own; the percentiles
 * are schema/pct.h's. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "schema/pct.h"
#include "tools/common/trace_pods.h"

struct trace_pods {
	sqlite3 *db;
	sqlite3_stmt *q;
	int64_t *ttft, *tpot;           /* one pod's values, reused */
	size_t cap;
};

/* Ordered by pod, so that one pass groups them; (host) sorts with the rest. */
static const char pods_sql[] =
	"SELECT coalesce(pod_namespace || '/' || pod_name, '(host)') AS pod, container_name, ttft_ns, tpot_ns, "
	"http_status, finish_reason FROM requests WHERE t_arrive_ns >= ?1 AND t_arrive_ns < ?2 "
	"ORDER BY pod, t_arrive_ns";

struct trace_pods *trace_pods_open(struct trace *t, char *err, size_t errlen)
{
	struct trace_pods *p = calloc(1, sizeof(*p));

	if (!p)
		abort();
	if (sqlite3_open_v2(trace_path(t), &p->db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "cannot open %s for its pods: %s", trace_path(t),
			 p->db ? sqlite3_errmsg(p->db) : "out of memory");
		trace_pods_close(p);
		return NULL;
	}
	sqlite3_busy_timeout(p->db, 1000);
	if (sqlite3_prepare_v2(p->db, pods_sql, -1, &p->q, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "this trace names no pods (written before schema version 13)");
		trace_pods_close(p);
		return NULL;
	}
	return p;
}

void trace_pods_close(struct trace_pods *p)
{
	if (!p)
		return;
	sqlite3_finalize(p->q);
	sqlite3_close(p->db);
	free(p->ttft);
	free(p->tpot);
	free(p);
}

static void grow(struct trace_pods *p, size_t n)
{
	if (n <= p->cap)
		return;
	p->cap = p->cap ? p->cap * 2 : 1024;
	if (p->cap < n)
		p->cap = n;
	p->ttft = realloc(p->ttft, p->cap * sizeof(*p->ttft));
	p->tpot = realloc(p->tpot, p->cap * sizeof(*p->tpot));
	if (!p->ttft || !p->tpot)
		abort();
}

/* The pod being read: its percentiles from the values gathered. */
static void pod_close(struct trace_pod *x, struct trace_pods *p, size_t n_ttft, size_t n_tpot)
{
	x->ttft_p50 = n_ttft ? (int64_t)pct_select_i64(p->ttft, n_ttft, 50) : -1;
	x->ttft_p99 = n_ttft ? (int64_t)pct_select_i64(p->ttft, n_ttft, 99) : -1;
	x->tpot_p99 = n_tpot ? (int64_t)pct_select_i64(p->tpot, n_tpot, 99) : -1;
}

static int busiest_first(const void *a, const void *b)
{
	const struct trace_pod *x = a, *y = b;
	if (x->requests != y->requests)
		return x->requests < y->requests ? 1 : -1;
	return strcmp(x->name, y->name);
}

int trace_pods_window(struct trace_pods *p, int64_t from_ns, int64_t to_ns, struct trace_pod *out, int max)
{
	/* every pod of the window is counted before the busiest are kept */
	struct trace_pod *all = NULL, *x = NULL;
	int n = 0, cap = 0, rc;
	size_t n_ttft = 0, n_tpot = 0;

	sqlite3_reset(p->q);
	sqlite3_bind_int64(p->q, 1, from_ns);
	sqlite3_bind_int64(p->q, 2, to_ns);
	while ((rc = sqlite3_step(p->q)) == SQLITE_ROW) {
		const char *pod = (const char *)sqlite3_column_text(p->q, 0);
		if (!x || strcmp(x->name, pod)) {
			if (x)
				pod_close(x, p, n_ttft, n_tpot);
			if (n == cap) {
				cap = cap ? cap * 2 : 16;
				if (!(all = realloc(all, (size_t)cap * sizeof(*all))))
					abort();
			}
			x = &all[n++];
			memset(x, 0, sizeof(*x));
			snprintf(x->name, sizeof(x->name), "%s", pod);
			const char *c = (const char *)sqlite3_column_text(p->q, 1);
			snprintf(x->container, sizeof(x->container), "%s", c ? c : "");
			n_ttft = n_tpot = 0;
		}
		x->requests++;
		int status = sqlite3_column_int(p->q, 4);
		const char *fin = (const char *)sqlite3_column_text(p->q, 5);
		x->rejected += status == 429;
		x->errors += status >= 500 || (fin && !strcmp(fin, "error"));
		grow(p, (size_t)x->requests);
		if (sqlite3_column_type(p->q, 2) != SQLITE_NULL)
			p->ttft[n_ttft++] = sqlite3_column_int64(p->q, 2);
		if (sqlite3_column_type(p->q, 3) != SQLITE_NULL)
			p->tpot[n_tpot++] = sqlite3_column_int64(p->q, 3);
	}
	if (x)
		pod_close(x, p, n_ttft, n_tpot);
	if (rc != SQLITE_DONE) {
		free(all);
		return -1;
	}
	qsort(all, (size_t)n, sizeof(*all), busiest_first);
	if (n > max)
		n = max;
	if (n)
		memcpy(out, all, (size_t)n * sizeof(*out));
	free(all);
	return n;
}

int trace_pods_rank(struct trace_pods *p, int64_t base_from, int64_t base_to, int64_t inc_from, int64_t inc_to,
		    struct trace_rank_group *out, int max)
{
	return trace_rank(p->db, "pod", base_from, base_to, inc_from, inc_to, out, max);
}
