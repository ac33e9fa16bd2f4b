/* trace_hops.c - the top-level requests of a trace window and their hops,
 * read from the views hops and integration on a connection of its own.
 *
 * The views are recursive, and SQLite cannot push a time filter into a
 * recursive view: on the whole trace every query would build every trace
 * (2.3 s at 100,000 requests, linear).  So each query runs on a copy of the
 * rows around what it asks for: TEMP tables requests and exchanges_out, and
 * TEMP views of the same definitions, read from the trace's sqlite_master
 * (one text of them, schema/008_hops.sql), which resolve to the copies (an
 * unqualified name finds TEMP first).  The copy reaches one request span
 * (the longest e2e in the trace) before and after, so every hop of a trace
 * whose top arrived in the window is in it, and nothing before it is. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tools/common/trace_hops.h"

struct trace_hops {
	sqlite3 *db;
	sqlite3_stmt *q, *q_of;
	sqlite3_stmt *span_q, *fill_req, *fill_out;
	int64_t span_ns, span_rowid;    /* the longest e2e seen, up to this rowid of requests */
	char names[TRACE_HOPS_NAMES][TRACE_HOPS_NAME_LEN];
	int n_names, model;
	struct trace_hops_req *rows;
	size_t n, cap;
};

/* The TEMP copies (empty), their indexes, the TEMP views and the statements
 * that fill them; 0, or -1 with the reason in the connection's message. */
static int scope_init(struct trace_hops *h)
{
	static const char *const views[] = { "hops", "integration" };
	sqlite3_stmt *q;

	if (sqlite3_exec(h->db,
			 "CREATE TEMP TABLE requests AS SELECT * FROM main.requests WHERE 0;"
			 "CREATE TEMP TABLE exchanges_out AS SELECT * FROM main.exchanges_out WHERE 0;"
			 "CREATE INDEX temp.scope_req_sock ON requests(sock_local, sock_peer);"
			 "CREATE INDEX temp.scope_out_sock ON exchanges_out(sock_peer, sock_local);",
			 NULL, NULL, NULL) != SQLITE_OK)
		return -1;
	if (sqlite3_prepare_v2(h->db, "SELECT sql FROM main.sqlite_master WHERE type = 'view' AND name = ?1",
			       -1, &q, NULL) != SQLITE_OK)
		return -1;
	for (size_t k = 0; k < sizeof(views) / sizeof(views[0]); k++) {
		sqlite3_reset(q);
		sqlite3_bind_text(q, 1, views[k], -1, SQLITE_STATIC);
		const char *sql = sqlite3_step(q) == SQLITE_ROW ? (const char *)sqlite3_column_text(q, 0) : NULL;
		char *temp = sql && !strncmp(sql, "CREATE VIEW", 11) ? sqlite3_mprintf("CREATE TEMP VIEW%s", sql + 11)
								  : NULL;
		int rc = temp ? sqlite3_exec(h->db, temp, NULL, NULL, NULL) : SQLITE_ERROR;
		sqlite3_free(temp);
		if (rc != SQLITE_OK) {
			sqlite3_finalize(q);
			return -1;
		}
	}
	sqlite3_finalize(q);
	return sqlite3_prepare_v2(h->db, "SELECT MAX(e2e_ns), MAX(rowid) FROM main.requests WHERE rowid > ?1",
				  -1, &h->span_q, NULL) != SQLITE_OK ||
	       sqlite3_prepare_v2(h->db, "INSERT INTO temp.requests SELECT * FROM main.requests "
				  "WHERE t_arrive_ns >= ?1 AND t_arrive_ns < ?2", -1, &h->fill_req, NULL) != SQLITE_OK ||
	       sqlite3_prepare_v2(h->db, "INSERT INTO temp.exchanges_out SELECT * FROM main.exchanges_out "
				  "WHERE t_arrive_ns >= ?1 AND t_arrive_ns < ?2", -1, &h->fill_out, NULL) != SQLITE_OK
	       ? -1 : 0;
}

static int step_done(sqlite3_stmt *q)
{
	int rc = sqlite3_step(q);
	sqlite3_reset(q);
	return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : -1;
}

/* The copies hold the rows that arrived in [from - (1 + back) * span,
 * to + span), span the longest request so far (read on from the rows added
 * since last time: a live trace grows). */
static int scope(struct trace_hops *h, int64_t from_ns, int64_t to_ns, int back)
{
	sqlite3_bind_int64(h->span_q, 1, h->span_rowid);
	if (sqlite3_step(h->span_q) == SQLITE_ROW && sqlite3_column_type(h->span_q, 1) != SQLITE_NULL) {
		int64_t e2e = sqlite3_column_int64(h->span_q, 0);
		if (e2e > h->span_ns)
			h->span_ns = e2e;
		h->span_rowid = sqlite3_column_int64(h->span_q, 1);
	}
	sqlite3_reset(h->span_q);
	if (sqlite3_exec(h->db, "DELETE FROM temp.requests; DELETE FROM temp.exchanges_out;",
			 NULL, NULL, NULL) != SQLITE_OK)
		return -1;
	sqlite3_stmt *fill[2] = { h->fill_req, h->fill_out };
	for (int k = 0; k < 2; k++) {
		sqlite3_bind_int64(fill[k], 1, from_ns - (1 + back) * h->span_ns);
		sqlite3_bind_int64(fill[k], 2, to_ns + h->span_ns);
		if (step_done(fill[k]))
			return -1;
	}
	return 0;
}

struct trace_hops *trace_hops_open(struct trace *t, char *err, size_t errlen)
{
	struct trace_hops *h = calloc(1, sizeof(*h));

	if (!h)
		abort();
	h->model = -1;
	if (sqlite3_open_v2(trace_path(t), &h->db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "cannot open %s for its hops: %s", trace_path(t),
			 h->db ? sqlite3_errmsg(h->db) : "out of memory");
		trace_hops_close(h);
		return NULL;
	}
	sqlite3_busy_timeout(h->db, 1000);
	if (scope_init(h)) {
		snprintf(err, errlen, "%s: no hops views (%s): a trace written before schema version 8 "
			 "has no hops", trace_path(t), sqlite3_errmsg(h->db));
		trace_hops_close(h);
		return NULL;
	}
	/* each top-level request, then one row per hop its calls reached: the
	 * inbound request on the other end of each call (depth 2, by socket),
	 * or one that hangs under it directly (depth 1: a disaggregated
	 * request's decode worker, schema version 10) */
	if (sqlite3_prepare_v2(h->db,
		"SELECT i.trace_id, i.e2e_ns, i.comm, h.comm, h.path, h.e2e_ns, h.hop_id = i.model_hop_id "
		"FROM integration i LEFT JOIN hops h ON h.trace_id = i.trace_id AND h.direction = 'in' "
		"AND ((h.depth = 2 AND h.link_rule = 'socket') OR h.depth = 1) "
		"WHERE i.t_arrive_ns >= ?1 AND i.t_arrive_ns < ?2 AND i.hops > 1 "
		"AND i.e2e_ns IS NOT NULL ORDER BY i.trace_id", -1, &h->q, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "%s: no hops views (%s): a trace written before schema version 8 "
			 "has no hops", trace_path(t), sqlite3_errmsg(h->db));
		trace_hops_close(h);
		return NULL;
	}
	if (sqlite3_prepare_v2(h->db,
		"SELECT depth, pid, comm, direction, link_rule, path, peer, t_arrive_ns, t_done_ns, e2e_ns, "
		"net_in_ns, queue_ns, prefill_ns, decode_ns, net_out_ns, server_wait_ns FROM hops "
		"WHERE trace_id = (SELECT trace_id FROM hops WHERE pid = ?1 AND t_arrive_ns = ?2 "
		"AND direction = 'in' LIMIT 1) ORDER BY t_arrive_ns LIMIT ?3", -1, &h->q_of, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "%s: %s", trace_path(t), sqlite3_errmsg(h->db));
		trace_hops_close(h);
		return NULL;
	}
	return h;
}

void trace_hops_close(struct trace_hops *h)
{
	if (!h)
		return;
	sqlite3_finalize(h->q);
	sqlite3_finalize(h->q_of);
	sqlite3_finalize(h->span_q);
	sqlite3_finalize(h->fill_req);
	sqlite3_finalize(h->fill_out);
	sqlite3_close(h->db);
	free(h->rows);
	free(h);
}

/* The index of name, added when new; the last one holds what does not fit. */
static int name_of(struct trace_hops *h, const char *comm, const char *path, const char *suffix)
{
	char name[TRACE_HOPS_NAME_LEN];

	snprintf(name, sizeof(name), "%s%s%s%s", comm ? comm : "?", path ? " " : "", path ? path : "",
		 suffix);
	for (int k = 0; k < h->n_names; k++)
		if (!strcmp(h->names[k], name))
			return k;
	if (h->n_names == TRACE_HOPS_NAMES - 1)
		snprintf(h->names[h->n_names++], TRACE_HOPS_NAME_LEN, "other hops");
	if (h->n_names == TRACE_HOPS_NAMES)
		return TRACE_HOPS_NAMES - 1;
	snprintf(h->names[h->n_names], TRACE_HOPS_NAME_LEN, "%s", name);
	return h->n_names++;
}

static const char *col_text(sqlite3_stmt *q, int i)
{
	return (const char *)sqlite3_column_text(q, i);
}

int trace_hops_window(struct trace_hops *h, int64_t from_ns, int64_t to_ns,
		      const struct trace_hops_req **rows)
{
	char trace[64] = "";
	struct trace_hops_req *r = NULL;
	int rc, self = -1;

	h->n = 0;
	if (scope(h, from_ns, to_ns, 0))
		return -1;
	sqlite3_reset(h->q);
	sqlite3_bind_int64(h->q, 1, from_ns);
	sqlite3_bind_int64(h->q, 2, to_ns);
	while ((rc = sqlite3_step(h->q)) == SQLITE_ROW) {
		const char *id = col_text(h->q, 0);
		if (!id)
			continue;
		if (!r || strcmp(id, trace)) {
			if (h->n == h->cap) {
				size_t cap = h->cap ? 2 * h->cap : 256;
				void *p = realloc(h->rows, cap * sizeof(*h->rows));
				if (!p)
					return -1;
				h->rows = p;
				h->cap = cap;
			}
			r = &h->rows[h->n++];
			memset(r, 0, sizeof(*r));
			snprintf(trace, sizeof(trace), "%s", id);
			r->e2e_ns = sqlite3_column_int64(h->q, 1);
			self = name_of(h, col_text(h->q, 2), NULL, " (itself)");
			r->part_ns[self] = r->e2e_ns;
		}
		if (sqlite3_column_type(h->q, 3) == SQLITE_NULL)
			continue;       /* no hop below it in this window's rows */
		int k = name_of(h, col_text(h->q, 3), col_text(h->q, 4), "");
		int64_t ns = sqlite3_column_int64(h->q, 5);
		r->part_ns[k] += ns;
		r->part_ns[self] -= ns;
		if (sqlite3_column_int(h->q, 6))
			h->model = k;
	}
	if (rc != SQLITE_DONE)
		return -1;
	*rows = h->rows;
	return (int)h->n;
}

int trace_hops_n_names(const struct trace_hops *h)
{
	return h->n_names;
}

const char *trace_hops_name(const struct trace_hops *h, int k)
{
	return k >= 0 && k < h->n_names ? h->names[k] : "";
}

int trace_hops_model(const struct trace_hops *h)
{
	return h->model;
}

static void text_col(sqlite3_stmt *q, int i, char *out, size_t len)
{
	snprintf(out, len, "%s", col_text(q, i) ? col_text(q, i) : "");
}

static int64_t ns_col(sqlite3_stmt *q, int i)
{
	return sqlite3_column_type(q, i) == SQLITE_NULL ? -1 : sqlite3_column_int64(q, i);
}

int trace_hops_of(struct trace_hops *h, int pid, int64_t t_arrive_ns, struct trace_hop *out, int max)
{
	int n = 0, rc;

	/* its trace's top arrived at most one span before it */
	if (scope(h, t_arrive_ns, t_arrive_ns + 1, 1))
		return -1;
	sqlite3_reset(h->q_of);
	sqlite3_bind_int(h->q_of, 1, pid);
	sqlite3_bind_int64(h->q_of, 2, t_arrive_ns);
	sqlite3_bind_int(h->q_of, 3, max);
	while ((rc = sqlite3_step(h->q_of)) == SQLITE_ROW && n < max) {
		struct trace_hop *o = &out[n++];
		o->depth = sqlite3_column_int(h->q_of, 0);
		o->pid = sqlite3_column_int(h->q_of, 1);
		text_col(h->q_of, 2, o->comm, sizeof(o->comm));
		text_col(h->q_of, 3, o->direction, sizeof(o->direction));
		text_col(h->q_of, 4, o->link_rule, sizeof(o->link_rule));
		text_col(h->q_of, 5, o->path, sizeof(o->path));
		text_col(h->q_of, 6, o->peer, sizeof(o->peer));
		o->t_arrive_ns = ns_col(h->q_of, 7);
		o->t_done_ns = ns_col(h->q_of, 8);
		o->e2e_ns = ns_col(h->q_of, 9);
		for (int p = 0; p < PH_N; p++)
			o->phase[p] = ns_col(h->q_of, 10 + p);
		o->server_wait_ns = ns_col(h->q_of, 15);
	}
	return rc == SQLITE_ROW || rc == SQLITE_DONE ? n : -1;
}
