/* clickhouse.h - a small client of ClickHouse's HTTP interface (libcurl), shared
 * by kpi-ship (inserts) and the fleet readers of kpi-report and kpitop (queries). */
#ifndef KPI_CLICKHOUSE_H
#define KPI_CLICKHOUSE_H

#include <stddef.h>
#include <stdbool.h>
#include "tools/common/buf.h"

#define CH_DEFAULT_PORT 8123
#define CH_DEFAULT_DB "kpiscope"

/* clickhouse://HOST[:PORT][/DB] (http://... is taken too). */
struct ch_url {
	char host[256];
	int port;
	char db[64];
	char text[360];         /* clickhouse://host:port/db, as given back to the user */
};
/* true when s names a ClickHouse server rather than a trace file */
bool ch_is_url(const char *s);
int ch_url_parse(const char *s, struct ch_url *u, char *err, size_t errlen);

/* s as a JSON string, quotes included, appended to b (tools/common/buf.h) */
int ch_json_str(struct buf *b, const char *s, size_t n);
/* s as a ClickHouse string literal: quotes, and ' and \ escaped */
int ch_sql_str(struct buf *b, const char *s);

struct ch_conn;
/* One kept-alive connection; timeout_ms bounds one request, connect to answer. */
struct ch_conn *ch_open(const struct ch_url *u, long timeout_ms);
void ch_set_timeout(struct ch_conn *c, long timeout_ms);
void ch_close(struct ch_conn *c);

/* POSTs body (may be NULL) with query string params ("query=...&x=1": the
 * caller escapes with ch_escape). Returns 0 on HTTP 200 (the answer in out);
 * -1 when the server could not be reached or timed out (*unreachable set),
 * or answered an error (its first line in err). */
int ch_post(struct ch_conn *c, const char *params, const char *body, size_t len, struct buf *out,
	    bool *unreachable, char *err, size_t errlen);
/* sql (a SELECT ... FORMAT TabSeparated, say) into out; 0 or -1 as ch_post. */
int ch_query(struct ch_conn *c, const char *sql, struct buf *out, char *err, size_t errlen);
/* Unescapes one TabSeparated field in place; NULL for \N. */
char *ch_tsv_field(char *s);
/* Splits line (no newline) at its tabs, in place: up to max fields into
 * f[]; returns how many there were (more than max: the rest is lost). */
int ch_tsv_split(char *line, char **f, int max);
/* URL-escaped copy of s, malloc'd */
char *ch_escape(struct ch_conn *c, const char *s);
const struct ch_url *ch_url_of(const struct ch_conn *c);

#endif
