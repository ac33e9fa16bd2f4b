/* retain.c - the trace's retention: rows older than --retain, and the oldest
 * rows while the file is over --max-db-mb, leave in small batches that never
 * stall the writer; freed pages go back to the file system. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "retain.h"

/* Rows one round removes from each table at most: a few ms of the writer's
 * time, between two flushes. */
#define RETAIN_BATCH 2000
#define STR_(x) #x
#define STR(x) STR_(x)
/* The file is kept at or below this share of --max-db-mb, so that the rows
 * written between two rounds never take it over. */
#define RETAIN_FILL 0.9

/* Tables whose rows carry their own wall_ns. Only requests has an index on
 * it; the others are written in time order, so their first row by rowid is
 * their oldest. (A request's row is written when it ends, so a long one can
 * follow shorter ones that arrived after it; so can an exchanges_out row,
 * whose first by rowid is then its oldest but for those.) */
static const char *const wall_tables[] = { "requests", "exchanges_out", "tasks", "steps", "samples",
					     "runq_by", "losses", "cost_samples", "energy_readings" };
#define N_WALL_TABLES (sizeof(wall_tables) / sizeof(wall_tables[0]))

static const char *oldest_sql(const char *table)
{
	return strcmp(table, "requests") ? "SELECT wall_ns FROM %s ORDER BY rowid LIMIT 1"
					 : "SELECT min(wall_ns) FROM %s";
}

static int64_t query_i64(sqlite3 *db, const char *sql, int64_t bind, bool has_bind, bool *null)
{
	sqlite3_stmt *s;
	int64_t v = 0;

	*null = true;
	if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
		return 0;
	if (has_bind)
		sqlite3_bind_int64(s, 1, bind);
	if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL) {
		v = sqlite3_column_int64(s, 0);
		*null = false;
	}
	sqlite3_finalize(s);
	return v;
}

/* Bytes the rows take: pages in use, free pages not counted (SQLite reuses
 * them; with auto_vacuum they also leave the file). */
static int64_t used_bytes(sqlite3 *db)
{
	bool null;
	int64_t pages = query_i64(db, "PRAGMA page_count", 0, false, &null);
	int64_t free_pages = query_i64(db, "PRAGMA freelist_count", 0, false, &null);
	int64_t size = query_i64(db, "PRAGMA page_size", 0, false, &null);

	return (pages - free_pages) * size;
}

/* The wall time before which a round removes rows to bring the file under its
 * bound: the RETAIN_BATCH-th oldest row's time in each table, the earliest of
 * them, so that no table loses more than a batch and all keep one horizon. */
static int64_t size_cutoff(sqlite3 *db)
{
	int64_t cut = INT64_MAX;
	char sql[160];
	bool null;

	for (size_t i = 0; i < N_WALL_TABLES; i++) {
		snprintf(sql, sizeof(sql), "SELECT wall_ns FROM %s ORDER BY rowid LIMIT 1 OFFSET ?",
			 wall_tables[i]);
		int64_t t = query_i64(db, sql, RETAIN_BATCH - 1, true, &null);
		if (null) {
			/* fewer rows than a batch: half of them at most, so that a
			 * small table never sets a horizon that empties the others */
			snprintf(sql, sizeof(sql), "SELECT wall_ns FROM %s ORDER BY rowid LIMIT 1 "
				 "OFFSET (SELECT count(*) / 2 FROM %s)", wall_tables[i], wall_tables[i]);
			t = query_i64(db, sql, 0, false, &null);
			if (null)
				continue;
		}
		if (t < cut)
			cut = t;
	}
	return cut == INT64_MAX ? 0 : cut;
}

static int exec_changes(sqlite3 *db, const char *sql, int64_t bind, int64_t *changed)
{
	sqlite3_stmt *s;
	int rc;

	if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
		return -1;
	if (sqlite3_bind_parameter_count(s))
		sqlite3_bind_int64(s, 1, bind);
	rc = sqlite3_step(s);
	sqlite3_finalize(s);
	if (rc != SQLITE_DONE)
		return -1;
	*changed += sqlite3_changes(db);
	return 0;
}

/* kpi-ship keeps its cursor in the trace (ship_cursor: the rowid of the last
 * row ClickHouse acknowledged, per destination and table). Rows of a shipped
 * table past the lowest cursor that a batch is about to remove were never
 * shipped: the loss unshipped_rows. */
static int count_unshipped(sqlite3 *db, const char *t, int64_t cut, uint64_t *unshipped)
{
	char sql[400];
	bool null;

	snprintf(sql, sizeof(sql), "SELECT count(*) FROM (SELECT rowid AS r FROM %s WHERE wall_ns < ?1 %s "
		 "LIMIT %d) WHERE r > (SELECT min(last_rowid) FROM ship_cursor WHERE tbl = '%s')", t,
		 strcmp(t, "requests") ? "" : "ORDER BY wall_ns", RETAIN_BATCH, t);
	int64_t n = query_i64(db, sql, cut, true, &null);
	if (null)
		return -1;
	*unshipped += (uint64_t)n;
	return 0;
}

/* A cursor past the table's last rowid (retention removed the newest rows,
 * or all of them) comes back to it: SQLite gives the next row max(rowid) + 1,
 * which the cursor must not hide. kpi-ship moves its cursor only if it is
 * still what it read (compare and set), so it sees this. */
static int clamp_cursors(sqlite3 *db, const char *t, int64_t *changed)
{
	char sql[300];

	snprintf(sql, sizeof(sql), "UPDATE ship_cursor SET last_rowid = (SELECT coalesce(max(rowid), 0) FROM %s) "
		 "WHERE tbl = '%s' AND last_rowid > (SELECT coalesce(max(rowid), 0) FROM %s)", t, t, t);
	return exec_changes(db, sql, 0, changed);
}

/* One batch of every table's rows from before cut (wall ns). The gate on the
 * oldest row keeps a table with nothing to remove from being scanned. */
static int remove_before(sqlite3 *db, int64_t cut, bool shipped, uint64_t *unshipped, int64_t *removed)
{
	char sql[400];
	bool null;
	int64_t clamped = 0;

	/* a request's token times leave with it, in the same round: the same
	 * batch of requests, by their time index */
	if (exec_changes(db, "DELETE FROM tokens WHERE rowid IN (SELECT t.rowid FROM tokens t JOIN "
			 "(SELECT request_id, pid FROM requests WHERE wall_ns < ?1 ORDER BY wall_ns LIMIT "
			 STR(RETAIN_BATCH) ") q ON t.request_id = q.request_id AND t.pid = q.pid)", cut, removed))
		return -1;
	for (size_t i = 0; i < N_WALL_TABLES; i++) {
		const char *t = wall_tables[i];
		snprintf(sql, sizeof(sql), oldest_sql(t), t);
		int64_t first = query_i64(db, sql, 0, false, &null);
		if (null || first >= cut)
			continue;
		if (shipped && count_unshipped(db, t, cut, unshipped))
			return -1;
		snprintf(sql, sizeof(sql), "DELETE FROM %s WHERE rowid IN (SELECT rowid FROM %s "
			 "WHERE wall_ns < ?1 %s LIMIT %d)", t, t,
			 strcmp(t, "requests") ? "" : "ORDER BY wall_ns", RETAIN_BATCH);
		if (exec_changes(db, sql, cut, removed) || (shipped && clamp_cursors(db, t, &clamped)))
			return -1;
	}
	if (!*removed)
		return 0;       /* nothing left the main tables: neither do tokens or GPU rows */
	/* GPU records carry monotonic times: their run's offset makes them wall */
	if (exec_changes(db, "DELETE FROM gpu_kernels WHERE rowid IN (SELECT g.rowid FROM gpu_kernels g "
			 "JOIN agent_runs r ON r.run_id = g.run_id WHERE g.start_ns + r.mono_to_wall_ns < ?1 "
			 "ORDER BY g.rowid LIMIT " STR(RETAIN_BATCH) ")", cut, removed))
		return -1;
	/* tokens whose request went some other way (a trace of an older agent) */
	return exec_changes(db, "DELETE FROM tokens WHERE rowid IN (SELECT t.rowid FROM (SELECT rowid, "
			    "request_id FROM tokens ORDER BY rowid LIMIT " STR(RETAIN_BATCH) ") t WHERE NOT "
			    "EXISTS (SELECT 1 FROM requests q WHERE q.request_id = t.request_id))", 0, removed);
}

int retain_round(struct retainer *r, int64_t now_wall, char *err, size_t errlen)
{
	int64_t cut = 0, removed = 0;
	uint64_t unshipped = 0;
	bool null, over = r->max_bytes > 0 && used_bytes(r->db) > (int64_t)(RETAIN_FILL * (double)r->max_bytes);

	/* age is checked once a second; a file over its bound, every flush */
	if (!over && now_wall < r->next_age_check)
		return 0;
	r->next_age_check = now_wall + 1000000000ll;
	if (r->keep_ns > 0)
		cut = now_wall - r->keep_ns;
	if (over) {
		int64_t c = size_cutoff(r->db);
		if (c > cut)
			cut = c;
	}
	if (cut <= 0)
		return 0;
	if (sqlite3_exec(r->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
		goto fail;
	/* a trace kpi-ship follows has its cursors (tools/kpi-ship) */
	bool shipped = query_i64(r->db, "SELECT count(*) FROM sqlite_master WHERE name = 'ship_cursor'", 0,
				 false, &null) > 0;
	if (remove_before(r->db, cut, shipped, &unshipped, &removed) ||
	    sqlite3_exec(r->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
		goto fail;
	r->removed += (uint64_t)removed;
	r->unshipped += unshipped;
	/* the freed pages leave the file (auto_vacuum=INCREMENTAL; a no-op on a
	 * trace made before it, whose free pages SQLite reuses instead) */
	if (removed)
		sqlite3_exec(r->db, "PRAGMA incremental_vacuum", NULL, NULL, NULL);
	return 0;
fail:
	snprintf(err, errlen, "retention could not remove old rows: %s (the trace keeps growing "
		 "until it can)", sqlite3_errmsg(r->db));
	sqlite3_exec(r->db, "ROLLBACK", NULL, NULL, NULL);
	return -1;
}
