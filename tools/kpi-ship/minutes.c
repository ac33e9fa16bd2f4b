/* minutes.c - per-minute aggregates of the requests rows (counts, phase sums,
 * histograms on schema/lhist.h's buckets), shipped beside the rows into
 * request_minutes (schema/clickhouse/003_minutes.sql), each minute exactly
 * once as readers see it: a minute is recomputed whole from the trace and
 * posted with a higher version whenever rows of it arrived after its last
 * shipping, and ReplacingMergeTree(version) keeps the newest.
 *
 * State, in the trace beside the rows' cursor: a cursor of its own over
 * requests (ship_cursor, sink "<URL> minutes", so that the agent's retention
 * clamps it and counts rows past it as unshipped like any cursor's), and
 * ship_minutes(sink, minute, version, dirty). A round marks the minutes of
 * the rows past that cursor dirty and moves it; then ships dirty minutes
 * that are closed (SHIP_MINUTE_GRACE_S past their end on the later of this
 * machine's clock and the trace's newest row), each computed from the rows
 * at or before the cursor, so that what a version holds is fixed by the
 * trace; the version is stored before the POST, so no two POSTs of a minute
 * share one (a SIGKILL between the POST and the clearing sends the minute
 * again, as a newer version of the same or a later content). */
#include "tools/kpi-ship/ship.h"
#include "schema/lhist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MINUTE_NS 60000000000LL
#define MAX_GROUPS 256          /* dimension combinations in one minute; past it, endpoint "other" */

enum { H_TTFT, H_TPOT, H_ITL, H_E2E, H_QUEUE, H_PREFILL, H_DECODE, H_KV, H_TTFO, N_HIST };
static const char *const hist_name[N_HIST] = { "ttft", "tpot", "itl", "e2e", "queue", "prefill", "decode",
					       "kv_transfer", "ttfo" };
/* the trace's column each histogram counts */
static const char *const hist_col[N_HIST] = { "ttft_ns", "tpot_ns", "itl_p99_ns", "e2e_ns", "queue_ns",
					      "prefill_ns", "decode_ns", "kv_transfer_ns", "ttfo_ns" };
enum { S_NET_IN, S_QUEUE, S_PREFILL, S_SERVER_WAIT, S_DECODE, S_NET_OUT, S_ROUTER, S_KV, S_DECODE_QUEUE, N_SUM };
static const char *const sum_col[N_SUM] = { "net_in_ns", "queue_ns", "prefill_ns", "server_wait_ns", "decode_ns",
					    "net_out_ns", "router_ns", "kv_transfer_ns", "decode_queue_ns" };

struct minute_group {
	char model[128], endpoint[128], source[16], pod[256];
	int64_t requests, done, rejected, errors, cancelled, prompt_tokens, output_tokens, last_wall_ns;
	int64_t sum[N_SUM];
	uint64_t h[N_HIST][LHIST_BUCKETS];
};

/* The SELECT's columns, in this order after the dimensions (model, path,
 * source, pod): a column an older trace lacks reads NULL. */
enum { C_MODEL, C_PATH, C_SOURCE, C_POD_NS, C_POD, C_STATUS, C_FINISH, C_PROMPT, C_OUTPUT, C_WALL, C_SUM0,
       C_HIST0 = C_SUM0 + N_SUM, N_COLS = C_HIST0 + N_HIST };

static const char MINUTES_DDL[] =
	"CREATE TABLE IF NOT EXISTS ship_minutes (sink TEXT NOT NULL, minute INTEGER NOT NULL, "
	"version INTEGER NOT NULL DEFAULT 0, dirty INTEGER NOT NULL DEFAULT 1, PRIMARY KEY (sink, minute)) "
	"WITHOUT ROWID";

/* floor(wall_ns / 1 min), in SQL and in C, right for times before 1970 too */
#define SQL_MINUTE "((wall_ns - ((wall_ns % 60000000000) + 60000000000) % 60000000000) / 60000000000)"
static int64_t minute_of(int64_t wall_ns)
{
	return (wall_ns - ((wall_ns % MINUTE_NS) + MINUTE_NS) % MINUTE_NS) / MINUTE_NS;
}

int minutes_open(struct shipper *s, char *err, size_t errlen)
{
	snprintf(s->minutes_sink, sizeof(s->minutes_sink), "%s minutes", s->sink);
	s->minutes_cur.name = "requests";
	s->minutes_cur.present = true;
	if (sqlite3_exec(s->db, MINUTES_DDL, NULL, NULL, NULL) != SQLITE_OK ||
	    ship_load_cursor(s, s->minutes_sink, &s->minutes_cur)) {
		snprintf(err, errlen, "cannot keep the minutes' state in %s: %s", s->db_path, sqlite3_errmsg(s->db));
		return -1;
	}
	char *e = ch_escape(s->ch, "INSERT INTO request_minutes FORMAT JSONEachRow");
	if (!e || asprintf(&s->minutes_params, "query=%s&insert_distributed_sync=1", e) < 0)
		s->minutes_params = NULL;
	free(e);
	if (!s->minutes_params) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	return 0;
}

void minutes_close(struct shipper *s)
{
	free(s->minutes_params);
	free(s->groups);
	s->minutes_params = NULL;
	s->groups = NULL;
}

/* The newest requests row's rowid (0: none); *found false when it cannot be read. */
static int64_t last_rowid(struct shipper *s, bool *found)
{
	return ship_one_i64(s->db, "SELECT coalesce(max(rowid), 0) FROM requests", NULL, NULL, found);
}

int minutes_mark(struct shipper *s, char *err, size_t errlen)
{
	struct ship_table *t = &s->minutes_cur;
	bool found;
	int64_t last = last_rowid(s, &found);
	if (!found)
		goto fail;
	if (last <= t->cursor)
		return 0;
	if (last - t->cursor > SHIP_MINUTES_MARK_ROWS)      /* one transaction's worth at a time */
		last = t->cursor + SHIP_MINUTES_MARK_ROWS;
	int64_t from = t->cursor;
	sqlite3_stmt *st;
	if (sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
		goto fail;
	if (sqlite3_prepare_v2(s->db, "INSERT INTO ship_minutes(sink, minute, dirty) SELECT DISTINCT ?1, " SQL_MINUTE
			       ", 1 FROM requests WHERE rowid > ?2 AND rowid <= ?3 "
			       "ON CONFLICT (sink, minute) DO UPDATE SET dirty = 1", -1, &st, NULL) != SQLITE_OK)
		goto rollback;
	sqlite3_bind_text(st, 1, s->minutes_sink, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, t->cursor);
	sqlite3_bind_int64(st, 3, last);
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE || ship_advance_cursor(s, s->minutes_sink, t, last, ship_wall_ns()))
		goto rollback;
	if (sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
		goto rollback;
	return (int)(last - from);
rollback:
	snprintf(err, errlen, "marking the minutes of %s failed: %s", s->db_path, sqlite3_errmsg(s->db));
	sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
	/* the cursor in memory may have moved inside the rolled-back transaction */
	ship_load_cursor(s, s->minutes_sink, t);
	return -2;
fail:
	snprintf(err, errlen, "reading %s failed: %s", s->db_path, sqlite3_errmsg(s->db));
	return -2;
}

static int64_t first_open_minute(struct shipper *s);

int64_t minutes_behind(struct shipper *s, bool all)
{
	bool found;
	int64_t last = last_rowid(s, &found);
	return minutes_pending(s, all) + (found && last > s->minutes_cur.cursor ? last - s->minutes_cur.cursor : 0);
}

/* The minutes due: dirty, and closed unless all. */
static const char DUE[] = "FROM ship_minutes WHERE sink = ?1 AND dirty = 1 AND (?2 OR minute < ?3)";

int64_t minutes_pending(struct shipper *s, bool all)
{
	sqlite3_stmt *st;
	int64_t n = -1;
	char sql[200];
	snprintf(sql, sizeof(sql), "SELECT count(*) %s", DUE);
	if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
		return -1;
	sqlite3_bind_text(st, 1, s->minutes_sink, -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 2, all);
	sqlite3_bind_int64(st, 3, all ? INT64_MAX : first_open_minute(s));
	if (sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	pthread_mutex_lock(&s->st.mu);
	s->st.minutes_pending = n;
	pthread_mutex_unlock(&s->st.mu);
	return n;
}

/* The first minute not yet closed: SHIP_MINUTE_GRACE_S past its end on the
 * later of this machine's clock and the newest row's wall clock (a trace
 * whose clock runs ahead, or an old trace shipped now). */
static int64_t first_open_minute(struct shipper *s)
{
	bool found;
	int64_t newest = ship_one_i64(s->db, "SELECT max(wall_ns) FROM requests", NULL, NULL, &found);
	int64_t now = ship_wall_ns();
	if (found && newest > now)
		now = newest;
	return minute_of(now - SHIP_MINUTE_GRACE_S * 1000000000LL);
}

/* "SELECT model, path, ..." with NULL for what the trace lacks. */
static int build_select(struct shipper *s, struct buf *q)
{
	sqlite3_stmt *st;
	char have[N_COLS];
	static const char *const dim[C_SUM0] = { "model", "path", "source", "pod_namespace", "pod_name",
						  "http_status", "finish_reason", "prompt_tokens", "output_tokens",
						  "wall_ns" };
	const char *name[N_COLS];
	for (int i = 0; i < C_SUM0; i++)
		name[i] = dim[i];
	for (int i = 0; i < N_SUM; i++)
		name[C_SUM0 + i] = sum_col[i];
	for (int i = 0; i < N_HIST; i++)
		name[C_HIST0 + i] = hist_col[i];
	memset(have, 0, sizeof(have));
	if (sqlite3_prepare_v2(s->db, "SELECT name FROM pragma_table_info('requests')", -1, &st, NULL) != SQLITE_OK)
		return -1;
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *c = (const char *)sqlite3_column_text(st, 0);
		for (int i = 0; i < N_COLS; i++)
			if (c && !strcmp(c, name[i]))
				have[i] = 1;
	}
	sqlite3_finalize(st);
	buf_reset(q);
	buf_printf(q, "SELECT ");
	for (int i = 0; i < N_COLS; i++)
		buf_printf(q, "%s%s", i ? ", " : "", have[i] ? name[i] : "NULL");
	return buf_printf(q, " FROM requests WHERE wall_ns >= ?1 AND wall_ns < ?2 AND rowid <= ?3");
}

static const char *text_or(sqlite3_stmt *st, int c, const char *dflt)
{
	const char *v = (const char *)sqlite3_column_text(st, c);
	return v ? v : dflt;
}

static struct minute_group *group_of(struct shipper *s, sqlite3_stmt *st)
{
	char pod[256];
	const char *ns = text_or(st, C_POD_NS, NULL), *name = text_or(st, C_POD, NULL);
	snprintf(pod, sizeof(pod), "%s%s%s", name && ns ? ns : "", name && ns ? "/" : "", name ? name : "");
	const char *model = text_or(st, C_MODEL, s->model ? s->model : "");
	const char *endpoint = text_or(st, C_PATH, "");
	const char *source = text_or(st, C_SOURCE, "usdt");
	if (s->n_groups >= MAX_GROUPS)
		endpoint = "other";
	for (int i = 0; i < s->n_groups; i++) {
		struct minute_group *g = &s->groups[i];
		if (!strncmp(g->model, model, sizeof(g->model) - 1) && !strncmp(g->endpoint, endpoint,
		    sizeof(g->endpoint) - 1) && !strncmp(g->source, source, sizeof(g->source) - 1) &&
		    !strcmp(g->pod, pod))
			return g;
	}
	if (s->n_groups == s->cap_groups) {
		int cap = s->cap_groups ? s->cap_groups * 2 : 4;
		struct minute_group *n = realloc(s->groups, sizeof(*n) * (size_t)cap);
		if (!n)
			return NULL;
		s->groups = n;
		s->cap_groups = cap;
	}
	struct minute_group *g = &s->groups[s->n_groups++];
	memset(g, 0, sizeof(*g));
	snprintf(g->model, sizeof(g->model), "%s", model);
	snprintf(g->endpoint, sizeof(g->endpoint), "%s", endpoint);
	snprintf(g->source, sizeof(g->source), "%s", source);
	snprintf(g->pod, sizeof(g->pod), "%s", pod);
	return g;
}

static int add_row(struct shipper *s, sqlite3_stmt *st)
{
	struct minute_group *g = group_of(s, st);
	if (!g)
		return -1;
	bool null_status = sqlite3_column_type(st, C_STATUS) == SQLITE_NULL;
	int64_t status = sqlite3_column_int64(st, C_STATUS), wall = sqlite3_column_int64(st, C_WALL);
	const char *finish = text_or(st, C_FINISH, "");
	g->requests++;
	if (wall > g->last_wall_ns)
		g->last_wall_ns = wall;
	if (!null_status && status == 429) {
		g->rejected++;
		return 0;
	}
	if ((!null_status && status >= 400) || !strcmp(finish, "error"))
		g->errors++;
	if (!strcmp(finish, "cancelled"))
		g->cancelled++;
	g->prompt_tokens += sqlite3_column_int64(st, C_PROMPT);
	g->output_tokens += sqlite3_column_int64(st, C_OUTPUT);
	for (int i = 0; i < N_SUM; i++)
		g->sum[i] += sqlite3_column_int64(st, C_SUM0 + i);
	for (int i = 0; i < N_HIST; i++)
		if (sqlite3_column_type(st, C_HIST0 + i) != SQLITE_NULL)
			g->h[i][lhist_index(sqlite3_column_int64(st, C_HIST0 + i))]++;
	if (sqlite3_column_type(st, C_HIST0 + H_E2E) != SQLITE_NULL)
		g->done++;
	return 0;
}

/* One group as a JSON row; arrays end at their last non-zero bucket. */
static int group_json(struct shipper *s, const struct minute_group *g, int64_t minute, int64_t version)
{
	struct buf *b = &s->body;
	if (buf_append(b, "{\"host\":", 8) || ch_json_str(b, s->host, strlen(s->host)) ||
	    buf_printf(b, ",\"minute\":%lld,\"model\":", (long long)(minute * 60)) ||
	    ch_json_str(b, g->model, strlen(g->model)) || buf_append(b, ",\"endpoint\":", 12) ||
	    ch_json_str(b, g->endpoint, strlen(g->endpoint)) || buf_append(b, ",\"source\":", 10) ||
	    ch_json_str(b, g->source, strlen(g->source)) || buf_append(b, ",\"pod\":", 7) ||
	    ch_json_str(b, g->pod, strlen(g->pod)) ||
	    buf_printf(b, ",\"version\":%lld,\"requests\":%lld,\"done\":%lld,\"rejected\":%lld,\"errors\":%lld,"
		       "\"cancelled\":%lld,\"prompt_tokens\":%lld,\"output_tokens\":%lld,\"last_wall_ns\":%lld",
		       (long long)version, (long long)g->requests, (long long)g->done, (long long)g->rejected,
		       (long long)g->errors, (long long)g->cancelled, (long long)g->prompt_tokens,
		       (long long)g->output_tokens, (long long)g->last_wall_ns))
		return -1;
	for (int i = 0; i < N_SUM; i++)
		if (buf_printf(b, ",\"%s\":%lld", sum_col[i], (long long)g->sum[i]))
			return -1;
	for (int i = 0; i < N_HIST; i++) {
		int end = LHIST_BUCKETS;
		while (end > 0 && !g->h[i][end - 1])
			end--;
		if (buf_printf(b, ",\"%s\":[", hist_name[i]))
			return -1;
		for (int k = 0; k < end; k++)
			if ((k && buf_append(b, ",", 1)) || ship_put_i64(b, (int64_t)g->h[i][k]))
				return -1;
		if (buf_append(b, "]", 1))
			return -1;
	}
	return buf_append(b, "}\n", 2);
}

/* The minute's rows (at or before the cursor) into groups, then JSON. */
static int minute_json(struct shipper *s, sqlite3_stmt *st, int64_t minute, int64_t version, int *rows)
{
	s->n_groups = 0;
	sqlite3_reset(st);
	sqlite3_bind_int64(st, 1, minute * MINUTE_NS);
	sqlite3_bind_int64(st, 2, (minute + 1) * MINUTE_NS);
	sqlite3_bind_int64(st, 3, s->minutes_cur.cursor);
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		if (add_row(s, st))
			return -1;
	if (rc != SQLITE_DONE)
		return -2;
	for (int i = 0; i < s->n_groups; i++)
		if (group_json(s, &s->groups[i], minute, version))
			return -1;
	*rows += s->n_groups;
	return 0;
}

static int set_minutes(struct shipper *s, const char *sql, const int64_t *minute, int n)
{
	sqlite3_stmt *st;
	if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
		return -1;
	for (int i = 0; i < n; i++) {
		sqlite3_reset(st);
		sqlite3_bind_text(st, 1, s->minutes_sink, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, minute[i]);
		if (sqlite3_step(st) != SQLITE_DONE) {
			sqlite3_finalize(st);
			return -1;
		}
	}
	sqlite3_finalize(st);
	return 0;
}

int minutes_ship(struct shipper *s, bool all, bool *unreachable, char *err, size_t errlen)
{
	int64_t minute[SHIP_MINUTES_PER_POST], version[SHIP_MINUTES_PER_POST];
	int n = 0, rows = 0, again = 0;
	sqlite3_stmt *st = NULL, *q = NULL;
	struct buf sel = { 0 };
	char sql[240];

	*unreachable = false;
	snprintf(sql, sizeof(sql), "SELECT minute, version %s ORDER BY minute LIMIT %d", DUE, SHIP_MINUTES_PER_POST);
	if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
		goto sqlfail;
	sqlite3_bind_text(st, 1, s->minutes_sink, -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 2, all);
	sqlite3_bind_int64(st, 3, all ? INT64_MAX : first_open_minute(s));
	while (n < SHIP_MINUTES_PER_POST && sqlite3_step(st) == SQLITE_ROW) {
		minute[n] = sqlite3_column_int64(st, 0);
		version[n] = sqlite3_column_int64(st, 1) + 1;
		again += version[n] > 1;
		n++;
	}
	sqlite3_finalize(st);
	st = NULL;
	if (!n)
		return 0;
	/* the versions first: a POST that ClickHouse took but the trace never
	 * heard of (a SIGKILL) is followed by a higher version, never an equal */
	if (set_minutes(s, "UPDATE ship_minutes SET version = version + 1 WHERE sink = ?1 AND minute = ?2", minute,
			n))
		goto sqlfail;
	if (build_select(s, &sel) || sqlite3_prepare_v2(s->db, sel.p, -1, &q, NULL) != SQLITE_OK)
		goto sqlfail;
	buf_reset(&s->body);
	for (int i = 0; i < n; i++) {
		int rc = minute_json(s, q, minute[i], version[i], &rows);
		if (rc == -2)
			goto sqlfail;
		if (rc) {
			snprintf(err, errlen, "out of memory for the aggregates of %d minutes", n);
			sqlite3_finalize(q);
			buf_free(&sel);
			return -2;
		}
	}
	sqlite3_finalize(q);
	q = NULL;
	buf_free(&sel);
	/* a minute whose rows retention removed since it was marked has no row:
	 * nothing to post, but it is shipped all the same */
	if (s->body.len && ch_post(s->ch, s->minutes_params, s->body.p, s->body.len, &s->answer, unreachable, err,
				   errlen))
		return -1;
	if (set_minutes(s, "UPDATE ship_minutes SET dirty = 0 WHERE sink = ?1 AND minute = ?2", minute, n))
		goto sqlfail;   /* posted; the minutes go again with a higher version (harmless) */
	ship_acked(s, &s->st.minute_rows, (uint64_t)rows);
	pthread_mutex_lock(&s->st.mu);
	s->st.minutes += (uint64_t)n;
	s->st.minutes_again += (uint64_t)again;
	pthread_mutex_unlock(&s->st.mu);
	return n;
sqlfail:
	snprintf(err, errlen, "reading %s failed: %s", s->db_path, sqlite3_errmsg(s->db));
	if (st)
		sqlite3_finalize(st);
	if (q)
		sqlite3_finalize(q);
	buf_free(&sel);
	return -2;
}
