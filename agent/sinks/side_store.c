/* side_store.c - one connection for the GPU and cost rows: open, prepare,
 * transactions and the step-reset-clear every write does. */
#include <stdio.h>
#include <stdlib.h>
#include "side_store.h"

struct side_store {
	sqlite3 *db;
	int64_t run_id;
};

struct side_store *side_store_open(const char *path, int64_t run_id, char *err, size_t errlen)
{
	struct side_store *s = calloc(1, sizeof(*s));

	if (!s)
		abort();
	s->run_id = run_id;
	if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "cannot open %s for the GPU and cost rows: %s", path,
			 s->db ? sqlite3_errmsg(s->db) : "out of memory");
		side_store_close(s);
		return NULL;
	}
	sqlite3_busy_timeout(s->db, 2000);
	return s;
}

void side_store_close(struct side_store *s)
{
	if (!s)
		return;
	if (s->db)
		sqlite3_close(s->db);
	free(s);
}

int64_t side_store_run_id(const struct side_store *s)
{
	return s->run_id;
}

int side_store_prepare(struct side_store *s, sqlite3_stmt **st, const char *sql, const char *what,
		       int version, char *err, size_t errlen)
{
	if (sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL) == SQLITE_OK)
		return 0;
	snprintf(err, errlen, "cannot prepare the %s statements (%s): is the trace store at schema "
		 "version %d or later?", what, sqlite3_errmsg(s->db), version);
	return -1;
}

int side_store_begin(struct side_store *s)
{
	return sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
}

int side_store_commit(struct side_store *s)
{
	return sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
}

void side_store_rollback(struct side_store *s)
{
	sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

int side_store_run(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	return rc == SQLITE_DONE ? 0 : -1;
}

int side_store_changes(struct side_store *s)
{
	return sqlite3_changes(s->db);
}

const char *side_store_errmsg(struct side_store *s)
{
	return sqlite3_errmsg(s->db);
}
