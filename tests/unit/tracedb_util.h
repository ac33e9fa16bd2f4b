/* tracedb_util.h - shared by the unit tests of the trace readers: a fresh
 * store in /tmp, empty or with kpi-agent's schema (the schema/ files). */
#ifndef KPI_TEST_TRACEDB_UTIL_H
#define KPI_TEST_TRACEDB_UTIL_H

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* A new database file holding what sql creates; the path is static. */
static char *tmpdb(const char *sql)
{
	static char path[64];
	snprintf(path, sizeof(path), "/tmp/test_tools_trace.XXXXXX");
	int fd = mkstemp(path);
	close(fd);
	sqlite3 *db;
	sqlite3_open(path, &db);
	sqlite3_exec(db, sql, NULL, NULL, NULL);
	sqlite3_close(db);
	return path;
}

/* A fresh store with the agent's schema up to version `upto` (each file's
 * DDL sets its user_version), or NULL when the DDL is not found (run from
 * the repository root). */
static char *schema_db_v(int upto)
{
	static const char *const files[] = { "schema/001_init.sql", "schema/002_gpu.sql",
					     "schema/003_runq_by.sql" };
	static char sql[32768];
	size_t n = 0;
	for (int i = 0; i < upto && i < (int)(sizeof(files) / sizeof(*files)); i++) {
		FILE *f = fopen(files[i], "r");
		if (!f) return NULL;
		n += fread(sql + n, 1, sizeof(sql) - 1 - n, f);
		fclose(f);
	}
	sql[n] = 0;
	return tmpdb(sql);
}

#endif
