/* fleet_window.h - the fleet's hosts over one window of the wall clock, asked
 * of ClickHouse (schema/clickhouse/) and aggregated there: per host its rate,
 * exact TTFT/TPOT/e2e percentiles and losses; no row leaves the server. */
#ifndef KPI_FLEET_WINDOW_H
#define KPI_FLEET_WINDOW_H

#include <stdint.h>
#include "tools/common/trace.h"

#define FLEET_MAX_HOSTS 512

/* One host in a window, as kpitop's view of one trace counts a window:
 * requests are the rows that arrived in it; rejected the 429s; errors the
 * other 4xx/5xx and finish_reason 'error'; the percentiles (p50, p95, p99,
 * max, n; interpolated between the closest ranks, schema/pct.h) are over
 * the rows that are not 429s and have the value. */
struct fleet_host {
	char name[128];
	int requests, done, rejected, errors;
	int64_t output_tokens;
	double req_per_s, out_tok_per_s;    /* over the window's length */
	struct trace_dist ttft, tpot, e2e;
	int64_t lost;                       /* every loss cause, in the window */
	char top_loss[24];                  /* the largest cause ("": none) */
	int loss_causes;
	/* the host's newest request in the window or sample in the lookback
	 * (0: none): a host whose agent went quiet shows how long ago */
	int64_t last_wall_ns;
};

struct fleet_window {
	int64_t from_wall_ns, to_wall_ns;
	/* the percentiles come from per-minute histograms (request_minutes,
	 * schema/lhist.h): within LHIST_ALPHA of the exact ones; else exact */
	int from_buckets;
	struct fleet_host all;              /* the whole fleet as one host ("") */
	struct fleet_host host[FLEET_MAX_HOSTS];
	int n_hosts;                        /* seen in the lookback, by name */
	int more_hosts;                     /* seen, past FLEET_MAX_HOSTS */
};

struct fleet;

/* Connects to url (clickhouse://HOST[:PORT][/DB]) and checks the tables are
 * there. NULL with a message that says what to do. */
struct fleet *fleet_open(const char *url, char *err, size_t errlen);
void fleet_close(struct fleet *f);
/* How long one query may take, connect to answer (default 60 s): a window
 * of millions of rows takes ClickHouse seconds. */
void fleet_set_timeout(struct fleet *f, long timeout_ms);
const char *fleet_url(const struct fleet *f);
const char *fleet_errmsg(const struct fleet *f);

/* The oldest and the newest request or sample (Unix ns). 1 with data, 0
 * without, -1 on an error. After the first call it reads only what is
 * newer than the newest it saw (the parts before it are skipped). */
int fleet_span(struct fleet *f, int64_t *first_wall_ns, int64_t *last_wall_ns);

/* The window [from, to) of every host with a request or a loss in it, or a
 * sample in [to - lookback_ns, to). Where ClickHouse has request_minutes
 * (schema/clickhouse/003_minutes.sql), the requests' counts and percentiles
 * come from its whole minutes in the window that ended a minute before now
 * (FINAL over thousands of rows), and from the raw rows of the rest (the
 * window's partial minutes at either end, the newest minutes), counted into
 * the same buckets: counts exact, percentiles within 1 % (w->from_buckets).
 * Without it (tables made before it), as follows. Three queries: the window's requests
 * per host and for the fleet, and its losses per host and cause (FINAL: a
 * batch shipped twice counts once); the lookback's samples per host (their
 * newest only). 0, or -1 (fleet_errmsg). */
int fleet_window_read(struct fleet *f, int64_t from_wall_ns, int64_t to_wall_ns, int64_t lookback_ns,
		      struct fleet_window *w);

#endif
