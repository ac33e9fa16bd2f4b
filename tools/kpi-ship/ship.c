/* ship.c - reads a trace table past its cursor, one batch at a time, as
 * JSONEachRow with the host's name, POSTs it to ClickHouse, and moves the
 * cursor only once ClickHouse acknowledged the batch (at least once). */
#include "tools/kpi-ship/ship.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *const ship_table_name[SHIP_TABLES] = { "requests", "exchanges_out", "steps", "samples", "losses" };

int64_t ship_wall_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The cursor lives in the trace, so that it survives kpi-ship (a SIGKILL
 * resends at most one batch) and the agent's retention can tell shipped rows
 * from unshipped ones (it counts the latter as the loss unshipped_rows, and
 * resets a cursor when it empties its table: rowids then start again at 1). */
static const char CURSOR_DDL[] =
	"CREATE TABLE IF NOT EXISTS ship_cursor ("
	"sink TEXT NOT NULL, tbl TEXT NOT NULL, last_rowid INTEGER NOT NULL, wall_ns INTEGER, "
	"PRIMARY KEY (sink, tbl))";

int64_t ship_one_i64(sqlite3 *db, const char *sql, const char *a, const char *b, bool *found)
{
	sqlite3_stmt *st;
	int64_t v = 0;
	*found = false;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return 0;
	if (a)
		sqlite3_bind_text(st, 1, a, -1, SQLITE_STATIC);
	if (b)
		sqlite3_bind_text(st, 2, b, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW) {
		v = sqlite3_column_int64(st, 0);
		*found = true;
	}
	sqlite3_finalize(st);
	return v;
}

int ship_load_cursor(struct shipper *s, const char *sink, struct ship_table *t)
{
	bool found;
	char sql[200];
	sqlite3_stmt *st;

	snprintf(sql, sizeof(sql), "INSERT OR IGNORE INTO ship_cursor(sink, tbl, last_rowid) VALUES (?1, ?2, 0)");
	if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
		return -1;
	sqlite3_bind_text(st, 1, sink, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, t->name, -1, SQLITE_STATIC);
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return -1;
	t->cursor = ship_one_i64(s->db, "SELECT last_rowid FROM ship_cursor WHERE sink = ?1 AND tbl = ?2", sink,
			    t->name, &found);
	return found ? 0 : -1;
}

/* The host's name as the agent recorded it (its latest run), else ours. */
static void default_host(struct shipper *s)
{
	sqlite3_stmt *st;
	s->host[0] = 0;
	if (sqlite3_prepare_v2(s->db, "SELECT hostname FROM agent_runs WHERE hostname IS NOT NULL "
			       "ORDER BY run_id DESC LIMIT 1", -1, &st, NULL) == SQLITE_OK) {
		if (sqlite3_step(st) == SQLITE_ROW)
			snprintf(s->host, sizeof(s->host), "%s", (const char *)sqlite3_column_text(st, 0));
		sqlite3_finalize(st);
	}
	if (!s->host[0])
		gethostname(s->host, sizeof(s->host) - 1);
}

/* Opens the trace for the cursor, never creating it: 1 while it is not
 * there yet (no file, or a file the agent has not written its schema into),
 * -1 when it cannot be a trace. As root, SQLite gives the -wal and -shm
 * files it creates the trace's owner and mode (os_unix.c, robustFchown), so
 * an agent that runs as that user opens them after kpi-ship did. */
static int open_trace(struct shipper *s, const char *db_path, char *err, size_t errlen)
{
	bool found;
	struct stat st;

	if (stat(db_path, &st)) {
		snprintf(err, errlen, "no trace at %s: start kpi-agent --db %s first, or give --db the trace's path",
			 db_path, db_path);
		return 1;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s is not a file: give --db the trace's path", db_path);
		return -1;
	}
	/* read-write for the cursor alone, no SQLITE_OPEN_CREATE: WAL lets the agent write meanwhile */
	if (sqlite3_open_v2(db_path, &s->db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "cannot open %s read-write (the cursor is kept in it): %s", db_path,
			 s->db ? sqlite3_errmsg(s->db) : "out of memory");
		return -1;
	}
	sqlite3_busy_timeout(s->db, 5000);
	int64_t tables = ship_one_i64(s->db, "SELECT count(*) FROM sqlite_master WHERE type = 'table'", NULL, NULL, &found);
	if (!found) {
		snprintf(err, errlen, "cannot read %s: %s", db_path, sqlite3_errmsg(s->db));
		return -1;
	}
	int64_t requests = ship_one_i64(s->db, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
				   "name = 'requests'", NULL, NULL, &found);
	if (requests == 1)
		return 0;
	snprintf(err, errlen, tables ? "%s is not a kpi-agent trace (no requests table)" :
		 "%s is empty: kpi-agent has not written its schema yet", db_path);
	return tables ? -1 : 1;
}

int ship_open(struct shipper *s, const char *db_path, const struct ch_url *u, const char *host,
	      const char *model, int batch, long timeout_ms, char *err, size_t errlen)
{
	bool found;

	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->st.mu, NULL);
	s->db_path = db_path;
	s->model = model;
	s->batch = batch;
	snprintf(s->sink, sizeof(s->sink), "%s", u->text);
	int rc = open_trace(s, db_path, err, errlen);
	if (rc)
		return rc;
	if (sqlite3_exec(s->db, CURSOR_DDL, NULL, NULL, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "cannot keep the cursor in %s: %s", db_path, sqlite3_errmsg(s->db));
		return -1;
	}
	if (host && *host)
		snprintf(s->host, sizeof(s->host), "%s", host);
	else
		default_host(s);
	s->ch = ch_open(u, timeout_ms);
	if (!s->ch) {
		snprintf(err, errlen, "out of memory for the ClickHouse connection");
		return -1;
	}
	for (int i = 0; i < SHIP_TABLES; i++) {
		struct ship_table *t = &s->st.t[i];
		char sql[160], q[200];
		t->name = ship_table_name[i];
		snprintf(sql, sizeof(sql), "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '%s'",
			 t->name);
		t->present = ship_one_i64(s->db, sql, NULL, NULL, &found) == 1;
		if (t->present && ship_load_cursor(s, s->sink, t)) {
			snprintf(err, errlen, "cannot read the cursor in %s: %s", db_path, sqlite3_errmsg(s->db));
			return -1;
		}
		snprintf(q, sizeof(q), "INSERT INTO %s FORMAT JSONEachRow", t->name);
		char *e = ch_escape(s->ch, q);
		if (!e)
			return -1;
		/* unknown columns (a newer trace) are skipped, not refused; with
		 * insert_distributed_sync the answer comes once every shard wrote
		 * its part, so an acknowledged batch is on the shards' disks */
		if (asprintf(&s->insert_params[i], "query=%s&input_format_skip_unknown_fields=1"
			     "&insert_distributed_sync=1", e) < 0)
			s->insert_params[i] = NULL;
		free(e);
		if (!s->insert_params[i])
			return -1;
	}
	return 0;
}

void ship_close(struct shipper *s)
{
	for (int i = 0; i < SHIP_TABLES; i++)
		free(s->insert_params[i]);
	ch_close(s->ch);
	if (s->db)
		sqlite3_close(s->db);
	buf_free(&s->body);
	buf_free(&s->answer);
	buf_free(&s->keys);
	buf_free(&s->row_head);
	pthread_mutex_destroy(&s->st.mu);
}

int ship_put_i64(struct buf *b, int64_t v)
{
	char tmp[24], *e = tmp + sizeof(tmp), *p = e;
	uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
	do
		*--p = (char)('0' + u % 10);
	while (u /= 10);
	if (v < 0)
		*--p = '-';
	return buf_append(b, p, (size_t)(e - p));
}

/* ,"name": of every column of the batch's statement, once per batch */
static int column_keys(struct shipper *s, sqlite3_stmt *st, int ncol)
{
	buf_reset(&s->keys);
	for (int c = 0; c < ncol && c < SHIP_MAX_COLS; c++) {
		const char *name = sqlite3_column_name(st, c);
		s->key_off[c] = s->keys.len;
		if (buf_append(&s->keys, ",", 1) || ch_json_str(&s->keys, name, strlen(name)) ||
		    buf_append(&s->keys, ":", 1))
			return -1;
		s->key_len[c] = s->keys.len - s->key_off[c];
	}
	return 0;
}

/* One row as a JSON object: host and row_id, then the trace's columns by
 * name; a NULL is left out (every column that can be NULL in the trace is
 * Nullable in ClickHouse, whose default for it is NULL), which keeps the
 * batch small. */
static int row_json(struct shipper *s, sqlite3_stmt *st, int ncol, int model_col)
{
	struct buf *b = &s->body;
	if (buf_append(b, s->row_head.p, s->row_head.len) || buf_append(b, ",\"row_id\":", 10) ||
	    ship_put_i64(b, sqlite3_column_int64(st, 0)))
		return -1;
	for (int c = 1; c < ncol; c++) {
		int type = sqlite3_column_type(st, c), rc = 0;
		if (type == SQLITE_NULL && !(c == model_col && s->model))
			continue;
		if (buf_append(b, s->keys.p + s->key_off[c], s->key_len[c]))
			return -1;
		switch (type) {
		case SQLITE_INTEGER:
			rc = ship_put_i64(b, sqlite3_column_int64(st, c));
			break;
		case SQLITE_FLOAT:
			rc = buf_printf(b, "%.17g", sqlite3_column_double(st, c));
			break;
		case SQLITE_TEXT:
		case SQLITE_BLOB:
			rc = ch_json_str(b, (const char *)sqlite3_column_text(st, c),
					     (size_t)sqlite3_column_bytes(st, c));
			break;
		default:
			rc = ch_json_str(b, s->model, strlen(s->model));
		}
		if (rc)
			return -1;
	}
	return buf_append(b, "}\n", 2);
}

/* Moves the cursor from what it was to last, unless the agent's retention
 * reset it meanwhile (it emptied the table: rowids start again), in which
 * case the reset stands and the cursor is read again. */
int ship_advance_cursor(struct shipper *s, const char *sink, struct ship_table *t, int64_t last, int64_t wall)
{
	sqlite3_stmt *st;
	bool found;
	if (sqlite3_prepare_v2(s->db, "UPDATE ship_cursor SET last_rowid = ?1, wall_ns = ?2 "
			       "WHERE sink = ?3 AND tbl = ?4 AND last_rowid = ?5", -1, &st, NULL) != SQLITE_OK)
		return -1;
	sqlite3_bind_int64(st, 1, last);
	sqlite3_bind_int64(st, 2, wall);
	sqlite3_bind_text(st, 3, sink, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, t->name, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 5, t->cursor);
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return -1;
	if (sqlite3_changes(s->db) == 1) {
		t->cursor = last;
		return 0;
	}
	int64_t c = ship_one_i64(s->db, "SELECT last_rowid FROM ship_cursor WHERE sink = ?1 AND tbl = ?2", sink,
			    t->name, &found);
	if (!found)
		return -1;
	t->cursor = c;
	return 0;
}

void ship_acked(struct shipper *s, uint64_t *rows, uint64_t n)
{
	pthread_mutex_lock(&s->st.mu);
	*rows += n;
	s->st.batches++;
	s->st.bytes += s->body.len;
	pthread_mutex_unlock(&s->st.mu);
}

int ship_batch(struct shipper *s, int table, bool *unreachable, char *err, size_t errlen)
{
	struct ship_table *t = &s->st.t[table];
	char sql[160];
	sqlite3_stmt *st;
	int n = 0, model_col = -1;
	int64_t last = t->cursor;

	*unreachable = false;
	if (!t->present)
		return 0;
	snprintf(sql, sizeof(sql), "SELECT rowid, * FROM %s WHERE rowid > ?1 ORDER BY rowid LIMIT ?2", t->name);
	if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
		goto sqlfail;
	sqlite3_bind_int64(st, 1, t->cursor);
	sqlite3_bind_int(st, 2, s->batch);
	int ncol = sqlite3_column_count(st);
	if (ncol > SHIP_MAX_COLS) {
		sqlite3_finalize(st);
		snprintf(err, errlen, "%s has %d columns, more than kpi-ship reads (%d): a newer kpi-ship ships it",
			 t->name, ncol, SHIP_MAX_COLS);
		return -2;
	}
	buf_reset(&s->row_head);
	if (column_keys(s, st, ncol) || buf_append(&s->row_head, "{\"host\":", 8) ||
	    ch_json_str(&s->row_head, s->host, strlen(s->host))) {
		sqlite3_finalize(st);
		snprintf(err, errlen, "out of memory");
		return -2;
	}
	for (int c = 1; c < ncol; c++)
		if (!strcmp(sqlite3_column_name(st, c), "model"))
			model_col = c;
	buf_reset(&s->body);
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (row_json(s, st, ncol, model_col)) {
			sqlite3_finalize(st);
			snprintf(err, errlen, "out of memory for a batch of %d rows", s->batch);
			return -2;
		}
		last = sqlite3_column_int64(st, 0);
		n++;
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		goto sqlfail;
	if (!n)
		return 0;
	if (ch_post(s->ch, s->insert_params[table], s->body.p, s->body.len, &s->answer, unreachable, err, errlen))
		return -1;
	if (ship_advance_cursor(s, s->sink, t, last, ship_wall_ns()))
		goto sqlfail;   /* shipped, but the cursor stays: the batch goes again (harmless) */
	ship_acked(s, &t->rows, (uint64_t)n);
	return n;
sqlfail:
	snprintf(err, errlen, "reading %s failed: %s", s->db_path, sqlite3_errmsg(s->db));
	return -2;
}

int64_t ship_backlog(struct shipper *s)
{
	int64_t total = 0;
	for (int i = 0; i < SHIP_TABLES; i++) {
		struct ship_table *t = &s->st.t[i];
		sqlite3_stmt *st;
		char sql[128];
		int64_t n = 0;
		if (!t->present)
			continue;
		snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s WHERE rowid > ?1", t->name);
		if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) == SQLITE_OK) {
			sqlite3_bind_int64(st, 1, t->cursor);
			if (sqlite3_step(st) == SQLITE_ROW)
				n = sqlite3_column_int64(st, 0);
			sqlite3_finalize(st);
		}
		pthread_mutex_lock(&s->st.mu);
		t->backlog = n;
		pthread_mutex_unlock(&s->st.mu);
		total += n;
	}
	return total;
}
