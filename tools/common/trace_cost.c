/* trace_cost.c - a trace window's cost and energy: the requests' attributed
 * shares plus the idle line of its sample intervals, priced by the agent's or the tool's price. */
#include <math.h>
#include <stdbool.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tools/common/trace_cost.h"

struct trace_cost {
	sqlite3 *db;
	sqlite3_stmt *q_req, *q_iv, *q_steps;
	double price, agent_price;
	int overridden;
	char source[256];
};

static int prep(struct trace_cost *c, sqlite3_stmt **st, const char *sql, char *err, size_t errlen)
{
	if (sqlite3_prepare_v2(c->db, sql, -1, st, NULL) == SQLITE_OK)
		return 0;
	snprintf(err, errlen, "%s: no cost tables (%s): a trace written before schema version 5 "
		 "has no cost or energy", sqlite3_db_filename(c->db, "main"), sqlite3_errmsg(c->db));
	return -1;
}

static void meta_text(struct trace_cost *c, const char *key, char *out, size_t len)
{
	sqlite3_stmt *q;
	out[0] = 0;
	if (sqlite3_prepare_v2(c->db, "SELECT value FROM meta WHERE key = ?", -1, &q, NULL) != SQLITE_OK)
		return;
	sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
	if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_text(q, 0))
		snprintf(out, len, "%s", (const char *)sqlite3_column_text(q, 0));
	sqlite3_finalize(q);
}

struct trace_cost *trace_cost_open(struct trace *t, double price_per_hour, char *err, size_t errlen)
{
	struct trace_cost *c = calloc(1, sizeof(*c));
	char price[64];

	if (!c)
		abort();
	if (sqlite3_open_v2(trace_path(t), &c->db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "cannot open %s for its cost tables: %s", trace_path(t),
			 c->db ? sqlite3_errmsg(c->db) : "out of memory");
		goto fail;
	}
	sqlite3_busy_timeout(c->db, 1000);
	/* A disaggregated request leaves a row in each process it went through
	 * (010_disagg.sql): it counts once, with its tokens, by the row that
	 * stands for it, while every row's machine time and energy count (each
	 * process's work for it); it is priced by its decode worker's row, the
	 * one engine every routed request reaches (the router's row has no
	 * steps to price). */
	bool pd = trace_top_sql(t)[0] != '\0';
	char req[1024];
	snprintf(req, sizeof(req), "SELECT TOTAL(%1$s), TOTAL(CASE WHEN %1$s THEN output_tokens END), "
		 "TOTAL(CASE WHEN %1$s THEN COALESCE(prompt_tokens, 0) + COALESCE(output_tokens, 0) END), "
		 "TOTAL(machine_ns), SUM(energy_j), TOTAL(machine_ns IS NOT NULL AND %2$s), "
		 "TOTAL(machine_ns IS NOT NULL), TOTAL(machine_ns IS NOT NULL AND %3$s) FROM requests "
		 "WHERE t_arrive_ns >= ? AND t_arrive_ns < ?",
		 pd ? TRACE_TOP_EXPR : "1", pd ? "(pd_role IS NULL OR pd_role = 'decode')" : "1",
		 trace_has_source(t) ? "source LIKE 'http%'" : "0");
	if (prep(c, &c->q_req, req, err, errlen) ||
	    prep(c, &c->q_iv, "SELECT count(*), TOTAL(interval_ns), TOTAL(idle_ns + unattributed_ns), "
		 "SUM(energy_uj), SUM(idle_energy_uj + unattributed_energy_uj) FROM cost_samples "
		 "WHERE t_ns > ? AND t_ns <= ?", err, errlen) ||
	    prep(c, &c->q_steps, "SELECT avg(decode_seqs + (prefill_tokens > 0)) FROM steps "
		 "WHERE t_start_ns >= ? AND t_start_ns < ?", err, errlen))
		goto fail;
	meta_text(c, "price_per_hour", price, sizeof(price));
	c->agent_price = price[0] ? atof(price) : -1;
	c->overridden = price_per_hour >= 0;
	c->price = c->overridden ? price_per_hour : c->agent_price;
	meta_text(c, "energy_source", c->source, sizeof(c->source));
	return c;
fail:
	trace_cost_close(c);
	return NULL;
}

void trace_cost_close(struct trace_cost *c)
{
	if (!c)
		return;
	sqlite3_finalize(c->q_req);
	sqlite3_finalize(c->q_iv);
	sqlite3_finalize(c->q_steps);
	sqlite3_close(c->db);
	free(c);
}

const char *trace_cost_energy_source(const struct trace_cost *c)
{
	return c ? c->source : "";
}

static int run2(sqlite3_stmt *q, int64_t a, int64_t b)
{
	sqlite3_reset(q);
	sqlite3_bind_int64(q, 1, a);
	sqlite3_bind_int64(q, 2, b);
	return sqlite3_step(q) == SQLITE_ROW ? 0 : -1;
}

static double col_or_nan(sqlite3_stmt *q, int i)
{
	return sqlite3_column_type(q, i) == SQLITE_NULL ? NAN : sqlite3_column_double(q, i);
}

int trace_cost_window(struct trace_cost *c, int64_t from_ns, int64_t to_ns, struct trace_cost_window *w)
{
	double machine_ns, usd_per_ns, n_priced;

	memset(w, 0, sizeof(*w));
	w->price = c->price;
	w->price_overridden = c->overridden;
	if (run2(c->q_req, from_ns, to_ns) || run2(c->q_iv, from_ns, to_ns) ||
	    run2(c->q_steps, from_ns, to_ns))
		return -1;
	w->requests = sqlite3_column_int(c->q_req, 0);
	w->output_tokens = sqlite3_column_int64(c->q_req, 1);
	w->total_tokens = sqlite3_column_int64(c->q_req, 2);
	machine_ns = sqlite3_column_double(c->q_req, 3);
	w->req_energy_j = col_or_nan(c->q_req, 4);
	n_priced = sqlite3_column_double(c->q_req, 5);
	w->priced = sqlite3_column_int(c->q_req, 6);
	w->priced_http = sqlite3_column_int(c->q_req, 7);
	w->have = sqlite3_column_int(c->q_iv, 0) > 0;
	w->interval_s = sqlite3_column_double(c->q_iv, 1) / 1e9;
	w->idle_s = sqlite3_column_double(c->q_iv, 2) / 1e9;
	w->energy_j = col_or_nan(c->q_iv, 3) / 1e6;
	w->idle_energy_j = col_or_nan(c->q_iv, 4) / 1e6;
	w->mean_batch = col_or_nan(c->q_steps, 0);
	sqlite3_reset(c->q_req);
	sqlite3_reset(c->q_iv);
	sqlite3_reset(c->q_steps);

	w->idle_share = w->interval_s > 0 ? w->idle_s / w->interval_s : NAN;
	w->machine_s = machine_ns / 1e9 + w->idle_s;
	w->s_per_tok = w->output_tokens && w->have ? w->machine_s / (double)w->output_tokens : NAN;
	usd_per_ns = c->price >= 0 ? c->price / 3.6e12 : NAN;
	w->req_cost_usd = usd_per_ns * machine_ns;
	w->idle_cost_usd = usd_per_ns * w->idle_s * 1e9;
	w->cost_usd = w->req_cost_usd + w->idle_cost_usd;
	w->usd_per_request = n_priced > 0 ? w->req_cost_usd / n_priced : NAN;
	w->usd_per_mtok_out = w->output_tokens ? 1e6 * w->cost_usd / (double)w->output_tokens : NAN;
	w->usd_per_mtok_total = w->total_tokens ? 1e6 * w->cost_usd / (double)w->total_tokens : NAN;
	if (isnan(w->req_energy_j))
		w->req_energy_j = w->energy_j - w->idle_energy_j;  /* NAN when not measured */
	double e = w->req_energy_j + w->idle_energy_j;
	w->j_per_tok = w->output_tokens ? e / (double)w->output_tokens : NAN;
	w->wh_per_1k_req = w->requests ? e / 3.6 / w->requests : NAN; /* J/3600 per request, x1000 */
	if (!w->have)
		w->idle_cost_usd = w->cost_usd = w->usd_per_mtok_out = w->usd_per_mtok_total = NAN;
	return 0;
}

const char *trace_cost_method(const struct trace_cost_window *w)
{
	if (!w->priced_http)
		return TRACE_COST_METHOD;
	return w->priced_http == w->priced ? TRACE_COST_METHOD_HTTP : TRACE_COST_METHOD_BOTH;
}
