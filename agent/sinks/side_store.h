/* side_store.h - the agent's second connection to the trace, for the rows
 * written apart from and after the request rows: the GPU side's (gpu_store.h)
 * and the cost side's (cost_store.h), each a set of statements on it. */
#ifndef KPI_SIDE_STORE_H
#define KPI_SIDE_STORE_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

struct side_store;

/* Opens path, already migrated by trace_store_open (WAL: the two connections
 * take turns, on the same thread); rows carry run_id. NULL with err. */
struct side_store *side_store_open(const char *path, int64_t run_id, char *err, size_t errlen);
/* After every statement prepared on it is finalized. NULL-safe. */
void side_store_close(struct side_store *s);
int64_t side_store_run_id(const struct side_store *s);

/* A statement that lives as long as the connection; what: whose ("GPU",
 * "cost"), version: the schema version the statement needs, both named in err
 * when it cannot be prepared. 0, or -1 with err. */
int side_store_prepare(struct side_store *s, sqlite3_stmt **st, const char *sql, const char *what,
		       int version, char *err, size_t errlen);
int side_store_begin(struct side_store *s);
int side_store_commit(struct side_store *s);
void side_store_rollback(struct side_store *s);
/* Steps st once, resets it and clears its bindings: 0 when it ran to the end. */
int side_store_run(sqlite3_stmt *st);
/* Rows the last statement changed. */
int side_store_changes(struct side_store *s);
const char *side_store_errmsg(struct side_store *s);

#endif
