/* sql_util.h - shared by the unit tests that read a trace database back: one
 * integer from a query on its own connection. */
#ifndef KPI_TEST_SQL_UTIL_H
#define KPI_TEST_SQL_UTIL_H

#include <sqlite3.h>
#include <stdint.h>

/* The first column of the first row of sql on path; -1 no row, -2 cannot
 * open, -3 NULL, -4 the statement does not prepare. */
static int64_t q(const char *path, const char *sql)
{
	sqlite3 *db;
	sqlite3_stmt *s;
	int64_t v = -1;
	if (sqlite3_open(path, &db) != SQLITE_OK)
		return -2;
	if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK) {
		if (sqlite3_step(s) == SQLITE_ROW)
			v = sqlite3_column_type(s, 0) == SQLITE_NULL ? -3 : sqlite3_column_int64(s, 0);
		sqlite3_finalize(s);
	} else {
		v = -4;
	}
	sqlite3_close(db);
	return v;
}

#endif
