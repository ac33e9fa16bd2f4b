/* trace_fleet.h - the fleet as one trace: the rows of many hosts, read from
 * ClickHouse (schema/clickhouse/) into a private SQLite trace that every
 * reader of trace.h reads as it reads one host's, plus the ranking of hosts
 * and models by their share of a p99 change. */
#ifndef KPI_TRACE_FLEET_H
#define KPI_TRACE_FLEET_H

#include <stdint.h>
#include "tools/common/trace.h"
#include "tools/common/trace_rank.h"

/* What to read: rows of hosts/models matching (NULL: all) that arrived in
 * the last window_ns before the newest such row (to_wall_ns 0) or before
 * to_wall_ns. */
struct trace_fleet_filter {
	const char *host, *model;
	int64_t window_ns;
	int64_t to_wall_ns;
};

struct trace_fleet;

/* Opens url (clickhouse://HOST[:PORT][/DB]), copies the window's rows, and
 * opens them as a trace (*t). The copy's clock is the wall clock (each
 * host's monotonic marks are moved by its rows' own offset), a pid is made
 * unique per host, and a request_id reads "HOST/ID". NULL with a message. */
struct trace_fleet *trace_fleet_open(const char *url, const struct trace_fleet_filter *f, struct trace **t,
				     char *err, size_t errlen);
/* Closes the trace it opened and removes the copy. */
void trace_fleet_close(struct trace_fleet *fl, struct trace *t);
const char *trace_fleet_url(const struct trace_fleet *fl);
int64_t trace_fleet_rows(const struct trace_fleet *fl);      /* requests copied */
int trace_fleet_hosts(const struct trace_fleet *fl);
double trace_fleet_copy_s(const struct trace_fleet *fl);    /* seconds the copy took */

/* The hosts, models or pods of the copy ranked by their share of a p99 TTFT
 * change (trace_rank.h). */
int trace_fleet_rank(struct trace_fleet *fl, const char *by, int64_t base_from, int64_t base_to, int64_t inc_from,
		     int64_t inc_to, struct trace_rank_group *out, int max);

#endif
