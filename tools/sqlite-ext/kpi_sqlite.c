/* kpi_sqlite.c - SQLite loadable extension for ad-hoc trace queries in the
 * sqlite3 CLI: percentile(x, p) and median(x), with p from 0 to 100 and the
 * same interpolation as SQLite's own percentile extension (schema/pct.c).
 *   sqlite3 trace.db -cmd '.load build/libkpi_sqlite' \
 *     "SELECT percentile(ttft_ns, 99) / 1e6 FROM requests" */
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1

#include "schema/pct.h"

#include <stdlib.h>
#include <string.h>

struct pct_agg {
	double *v;
	size_t n, cap;
	double p;
	int have_p;
};

static void pct_step(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	struct pct_agg *a = sqlite3_aggregate_context(ctx, sizeof(*a));
	if (!a) {
		sqlite3_result_error_nomem(ctx);
		return;
	}
	double p = 50;
	if (argc == 2) {
		int pt = sqlite3_value_numeric_type(argv[1]);
		if (pt != SQLITE_INTEGER && pt != SQLITE_FLOAT) {
			sqlite3_result_error(ctx, "percentile(x, p): p must be a number from 0 to 100", -1);
			return;
		}
		p = sqlite3_value_double(argv[1]);
		if (!(p >= 0 && p <= 100)) {
			sqlite3_result_error(ctx, "percentile(x, p): p must be from 0 to 100 (99 for p99)", -1);
			return;
		}
		if (a->have_p && a->p != p) {
			sqlite3_result_error(ctx, "percentile(x, p): p must be the same for every row of a group", -1);
			return;
		}
	}
	a->p = p;
	a->have_p = 1;
	int t = sqlite3_value_numeric_type(argv[0]);
	if (t == SQLITE_NULL) return;               /* NULLs are ignored, like avg() */
	if (t != SQLITE_INTEGER && t != SQLITE_FLOAT) {
		sqlite3_result_error(ctx, "percentile(x, p): x must be numeric (or NULL)", -1);
		return;
	}
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 256;
		double *v = sqlite3_realloc64(a->v, cap * sizeof(*v));
		if (!v) {
			sqlite3_result_error_nomem(ctx);
			return;
		}
		a->v = v;
		a->cap = cap;
	}
	a->v[a->n++] = sqlite3_value_double(argv[0]);
}

static void pct_final(sqlite3_context *ctx)
{
	struct pct_agg *a = sqlite3_aggregate_context(ctx, 0);
	if (!a || !a->n) {
		if (a) sqlite3_free(a->v);
		sqlite3_result_null(ctx);
		return;
	}
	sqlite3_result_double(ctx, pct_select_f64(a->v, a->n, a->p));
	sqlite3_free(a->v);
}

#define KPI_EXPORT __attribute__((visibility("default")))

KPI_EXPORT int sqlite3_kpisqlite_init(sqlite3 *db, char **errmsg, const sqlite3_api_routines *api)
{
	SQLITE_EXTENSION_INIT2(api);
	int flags = SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS;
	int rc = sqlite3_create_function(db, "percentile", 2, flags, NULL, NULL, pct_step, pct_final);
	if (rc == SQLITE_OK)
		rc = sqlite3_create_function(db, "median", 1, flags, NULL, NULL, pct_step, pct_final);
	return rc;
}

/* the name sqlite3_load_extension looks for when none is derived */
KPI_EXPORT int sqlite3_extension_init(sqlite3 *db, char **errmsg, const sqlite3_api_routines *api)
{
	return sqlite3_kpisqlite_init(db, errmsg, api);
}
