/* trace_fleet.c - reads a window of the fleet's rows from ClickHouse into a
 * private SQLite trace (the agent's own schema, kpi_schema.h), so that
 * kpi-report's analysis and kpitop's data layer run unchanged over many
 * hosts; and the split of a p99 change by host or model over that copy. */
#include "tools/common/trace_fleet.h"
#include "tools/common/clickhouse.h"
#include "kpi_schema.h"

#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define N_SCHEMA_FILES (sizeof(kpi_schema_files) / sizeof(kpi_schema_files[0]))
/* pids are made unique per host: host k's pid p becomes p + (k + 1) << 22
 * (Linux pids stay below 2^22), 500 hosts in an int */
#define PID_SHIFT 22
#define MAX_HOSTS 500

struct trace_fleet {
	char path[256];
	sqlite3 *db;                    /* the copy, read-write */
	struct ch_conn *ch;
	char hosts[MAX_HOSTS][128];
	int n_hosts;
	int64_t rows;
	double copy_s;
	char url[360];
};

/* The monotonic marks of each copied table, and the mark its wall_ns is. */
static const struct copy_table {
	const char *name, *anchor;
	const char *const marks[10];
	bool by_model;
} copy_tables[] = {
	{ "requests", "t_arrive_ns", { "t_admit_ns", "t_sched_ns", "t_first_ns", "t_last_ns", "t_first_write_ns",
				       "t_done_ns", "t_req_read_ns", "t_resp_start_ns" }, true },
	{ "exchanges_out", "t_arrive_ns", { "t_admit_ns", "t_sched_ns", "t_first_ns", "t_last_ns",
					    "t_first_write_ns", "t_done_ns", "t_req_read_ns", "t_resp_start_ns" },
	  true },
	{ "steps", "t_start_ns", { "t_end_ns" }, false },
	{ "samples", "t_ns", { 0 }, false },
	{ "losses", "t_ns", { 0 }, false },
};

static bool is_mark(const struct copy_table *ct, const char *col)
{
	if (!strcmp(col, ct->anchor))
		return true;
	for (int i = 0; i < 10 && ct->marks[i]; i++)
		if (!strcmp(col, ct->marks[i]))
			return true;
	return false;
}

static int host_index(struct trace_fleet *fl, const char *h)
{
	for (int i = 0; i < fl->n_hosts; i++)
		if (!strcmp(fl->hosts[i], h))
			return i;
	if (fl->n_hosts >= MAX_HOSTS)
		return -1;
	snprintf(fl->hosts[fl->n_hosts], sizeof(fl->hosts[0]), "%s", h);
	return fl->n_hosts++;
}

static void where_clause(struct buf *b, const struct trace_fleet_filter *f, bool by_model, int64_t from,
			 int64_t to)
{
	buf_printf(b, " WHERE wall_ns >= %lld AND wall_ns < %lld", (long long)from, (long long)to);
	if (f->host) {
		buf_printf(b, " AND host = ");
		ch_sql_str(b, f->host);
	}
	if (f->model && by_model) {
		buf_printf(b, " AND model = ");
		ch_sql_str(b, f->model);
	}
}

/* requests has 104 columns at schema 014: the first 96 alone once dropped
 * its container and pod columns from every fleet report */
#define MAX_COPY_COLUMNS 256

/* The columns both sides have, in the copy's order; -1 (err said) on more
 * than max. */
static int common_columns(struct trace_fleet *fl, const char *table, char cols[][48], int max, char *err,
			  size_t errlen)
{
	struct buf ans = { 0 };
	char sql[256], *line, *save;
	sqlite3_stmt *st;
	int n = 0;

	snprintf(sql, sizeof(sql), "DESCRIBE TABLE %s FORMAT TabSeparated", table);
	if (ch_query(fl->ch, sql, &ans, err, errlen)) {
		buf_free(&ans);
		return -1;
	}
	snprintf(sql, sizeof(sql), "SELECT name FROM pragma_table_info('%s')", table);
	if (sqlite3_prepare_v2(fl->db, sql, -1, &st, NULL) != SQLITE_OK) {
		buf_free(&ans);
		return -1;
	}
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *c = (const char *)sqlite3_column_text(st, 0);
		size_t cl = strlen(c);
		bool there = false;
		if (n == max) {         /* never a table's last columns left out unsaid */
			snprintf(err, errlen, "copying %s: more than %d columns", table, max);
			n = -1;
			break;
		}
		for (line = ans.p; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
			if (!strncmp(line, c, cl) && line[cl] == '\t')
				there = true;
		if (there && cl < 48)
			snprintf(cols[n++], 48, "%s", c);
	}
	sqlite3_finalize(st);
	(void)save;
	buf_free(&ans);
	return n;
}

static int copy_table(struct trace_fleet *fl, const struct copy_table *ct, const struct trace_fleet_filter *f,
		      int64_t from, int64_t to, char *err, size_t errlen)
{
	char cols[MAX_COPY_COLUMNS][48];
	int nc = common_columns(fl, ct->name, cols, MAX_COPY_COLUMNS, err, errlen);
	if (nc < 0)
		return -1;
	if (!nc)
		return 0;
	struct buf q = { 0 }, ins = { 0 }, ans = { 0 };
	int pid_col = -1, id_col = -1, rc = -1;
	/* host first, then the columns, the marks moved onto the wall clock */
	buf_printf(&q, "SELECT host");
	buf_printf(&ins, "INSERT INTO %s (host", ct->name);
	for (int i = 0; i < nc; i++) {
		if (is_mark(ct, cols[i]))
			buf_printf(&q, ", %s + (wall_ns - %s)", cols[i], ct->anchor);
		else
			buf_printf(&q, ", %s", cols[i]);
		buf_printf(&ins, ", %s", cols[i]);
		if (!strcmp(cols[i], "pid"))
			pid_col = i;
		if (!strcmp(cols[i], "request_id"))
			id_col = i;
	}
	buf_printf(&q, " FROM %s FINAL", ct->name);
	where_clause(&q, f, ct->by_model, from, to);
	buf_printf(&q, " FORMAT TabSeparated");
	buf_printf(&ins, ") VALUES (?");
	for (int i = 0; i < nc; i++)
		buf_printf(&ins, ", ?");
	buf_printf(&ins, ")");
	sqlite3_stmt *st = NULL;
	if (ch_query(fl->ch, q.p, &ans, err, errlen))
		goto out;
	if (sqlite3_prepare_v2(fl->db, ins.p, -1, &st, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "copying %s: %s", ct->name, sqlite3_errmsg(fl->db));
		goto out;
	}
	char *line = ans.p, *fields[MAX_COPY_COLUMNS + 1];
	while (line && *line) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = 0;
		int nf = ch_tsv_split(line, fields, nc + 1);
		if (nf != nc + 1) {
			snprintf(err, errlen, "copying %s: a row of %d fields, want %d", ct->name, nf, nc + 1);
			goto out;
		}
		char *host = ch_tsv_field(fields[0]);
		int hi = host_index(fl, host ? host : "");
		if (hi < 0) {
			snprintf(err, errlen, "more than %d hosts: narrow the report with --host", MAX_HOSTS);
			goto out;
		}
		sqlite3_bind_text(st, 1, host, -1, SQLITE_TRANSIENT);
		for (int i = 0; i < nc; i++) {
			char *v = ch_tsv_field(fields[i + 1]), buf[256];
			if (!v) {
				sqlite3_bind_null(st, i + 2);
			} else if (i == pid_col) {
				sqlite3_bind_int64(st, i + 2, atoll(v) + ((int64_t)(hi + 1) << PID_SHIFT));
			} else if (i == id_col) {
				snprintf(buf, sizeof(buf), "%s/%s", fl->hosts[hi], v);
				sqlite3_bind_text(st, i + 2, buf, -1, SQLITE_TRANSIENT);
			} else {
				/* text into INTEGER/REAL columns: SQLite's affinity stores numbers */
				sqlite3_bind_text(st, i + 2, v, -1, SQLITE_STATIC);
			}
		}
		if (sqlite3_step(st) != SQLITE_DONE) {
			snprintf(err, errlen, "copying %s: %s", ct->name, sqlite3_errmsg(fl->db));
			goto out;
		}
		sqlite3_reset(st);
		if (!strcmp(ct->name, "requests"))
			fl->rows++;
		line = nl ? nl + 1 : NULL;
	}
	rc = 0;
out:
	sqlite3_finalize(st);
	buf_free(&q);
	buf_free(&ins);
	buf_free(&ans);
	return rc;
}

static int make_copy(struct trace_fleet *fl, char *err, size_t errlen)
{
	const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	snprintf(fl->path, sizeof(fl->path), "%s/kpi-fleet-XXXXXX", tmp);
	int fd = mkstemp(fl->path);
	if (fd < 0) {
		snprintf(err, errlen, "cannot make a scratch file in %s for the fleet's rows: set TMPDIR", tmp);
		fl->path[0] = 0;
		return -1;
	}
	close(fd);
	if (sqlite3_open(fl->path, &fl->db) != SQLITE_OK)
		goto fail;
	/* a scratch copy: nothing to recover after a crash */
	if (sqlite3_exec(fl->db, "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF", NULL, NULL, NULL) != SQLITE_OK)
		goto fail;
	int version = 0;
	for (size_t i = 0; i < N_SCHEMA_FILES; i++) {
		if (sqlite3_exec(fl->db, kpi_schema_files[i].sql, NULL, NULL, NULL) != SQLITE_OK)
			goto fail;
		if (atoi(kpi_schema_files[i].name) > version)
			version = atoi(kpi_schema_files[i].name);
	}
	char sql[200];
	snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", version);
	if (sqlite3_exec(fl->db, sql, NULL, NULL, NULL) != SQLITE_OK)
		goto fail;
	for (size_t i = 0; i < sizeof(copy_tables) / sizeof(copy_tables[0]); i++) {
		snprintf(sql, sizeof(sql), "ALTER TABLE %s ADD COLUMN host TEXT", copy_tables[i].name);
		if (sqlite3_exec(fl->db, sql, NULL, NULL, NULL) != SQLITE_OK)
			goto fail;
	}
	return 0;
fail:
	snprintf(err, errlen, "cannot build the fleet's scratch trace %s: %s", fl->path,
		 fl->db ? sqlite3_errmsg(fl->db) : "out of memory");
	return -1;
}

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

struct trace_fleet *trace_fleet_open(const char *url, const struct trace_fleet_filter *f, struct trace **t,
				     char *err, size_t errlen)
{
	struct trace_fleet *fl = calloc(1, sizeof(*fl));
	struct ch_url u;
	struct buf q = { 0 }, ans = { 0 };
	double t0 = mono_s();

	*t = NULL;
	if (!fl)
		return NULL;
	if (ch_url_parse(url, &u, err, errlen))
		goto fail;
	snprintf(fl->url, sizeof(fl->url), "%s", u.text);
	if (!(fl->ch = ch_open(&u, 120000)))
		goto fail;
	/* the window: back from the newest matching request, or from to_wall_ns */
	int64_t to = f->to_wall_ns;
	if (!to) {
		buf_printf(&q, "SELECT max(wall_ns), count() FROM requests");
		where_clause(&q, f, true, 0, INT64_MAX);
		buf_printf(&q, " FORMAT TabSeparated");
		if (ch_query(fl->ch, q.p, &ans, err, errlen)) {
			char why[512];
			snprintf(why, sizeof(why), "%s", err);
			snprintf(err, errlen, "%s: %s (is clickhouse-server running there, with the tables of "
				 "schema/clickhouse/?)", u.text, why);
			goto fail;
		}
		if (atoll(strchr(ans.p, '\t') ? strchr(ans.p, '\t') + 1 : "0") == 0) {
			snprintf(err, errlen, "%s holds no requests%s%s%s%s: ship some with kpi-ship first", u.text,
				 f->host ? " of host " : "", f->host ? f->host : "", f->model ? " of model " : "",
				 f->model ? f->model : "");
			goto fail;
		}
		to = atoll(ans.p) + 1;
	}
	int64_t from = to - f->window_ns;
	if (make_copy(fl, err, errlen))
		goto fail;
	sqlite3_exec(fl->db, "BEGIN", NULL, NULL, NULL);
	for (size_t i = 0; i < sizeof(copy_tables) / sizeof(copy_tables[0]); i++)
		if (copy_table(fl, &copy_tables[i], f, from, to, err, errlen)) {
			char why[512];
			snprintf(why, sizeof(why), "%s", err);
			snprintf(err, errlen, "reading %s from %s: %s", copy_tables[i].name, u.text, why);
			goto fail;
		}
	if (sqlite3_exec(fl->db, "INSERT INTO agent_runs(run_id, started_wall_ns, mono_to_wall_ns, hostname) "
			 "VALUES (1, 0, 0, 'fleet'); COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "writing the fleet's scratch trace: %s", sqlite3_errmsg(fl->db));
		goto fail;
	}
	if (!fl->rows) {
		snprintf(err, errlen, "%s: no requests in the window read", u.text);
		goto fail;
	}
	fl->copy_s = mono_s() - t0;
	if (!(*t = trace_open(fl->path, err, errlen)))
		goto fail;
	buf_free(&q);
	buf_free(&ans);
	return fl;
fail:
	buf_free(&q);
	buf_free(&ans);
	trace_fleet_close(fl, NULL);
	return NULL;
}

void trace_fleet_close(struct trace_fleet *fl, struct trace *t)
{
	trace_close(t);
	if (!fl)
		return;
	if (fl->db)
		sqlite3_close(fl->db);
	if (fl->path[0])
		unlink(fl->path);
	ch_close(fl->ch);
	free(fl);
}

const char *trace_fleet_url(const struct trace_fleet *fl) { return fl->url; }
int64_t trace_fleet_rows(const struct trace_fleet *fl) { return fl->rows; }
int trace_fleet_hosts(const struct trace_fleet *fl) { return fl->n_hosts; }
double trace_fleet_copy_s(const struct trace_fleet *fl) { return fl->copy_s; }

/* ---- the split of a p99 change by group ------------------------------------ */

int trace_fleet_rank(struct trace_fleet *fl, const char *by, int64_t base_from, int64_t base_to, int64_t inc_from,
		     int64_t inc_to, struct trace_rank_group *out, int max)
{
	return trace_rank(fl->db, by, base_from, base_to, inc_from, inc_to, out, max);
}
