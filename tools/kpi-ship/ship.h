/* ship.h - kpi-ship: one host's trace into ClickHouse, table by table, in
 * batches read past a cursor kept in the trace itself (ship_cursor). */
#ifndef KPI_SHIP_H
#define KPI_SHIP_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

#include "tools/common/clickhouse.h"

/* The most columns a shipped table may have (the requests table has 103). */
#define SHIP_MAX_COLS 256

/* The trace tables shipped, in the order a round visits them. */
#define SHIP_TABLES 5
extern const char *const ship_table_name[SHIP_TABLES];

struct ship_table {
	const char *name;
	bool present;                   /* the trace has it (older traces lack some) */
	int64_t cursor;                 /* rowid of the last row ClickHouse acknowledged */
	int64_t backlog;                /* rows past the cursor at the last look */
	uint64_t rows;                  /* rows shipped since start */
};

/* What /metrics and the exit line show; guarded by mu (the metrics thread reads it). */
struct ship_stats {
	pthread_mutex_t mu;
	struct ship_table t[SHIP_TABLES];
	uint64_t batches, failures, bytes;
	uint64_t minute_rows;           /* aggregate rows shipped (request_minutes) */
	uint64_t minutes, minutes_again;/* minutes shipped; of them, shipped again (late rows) */
	int64_t minutes_pending;        /* dirty minutes at the last look */
	bool up;                        /* the last POST worked */
	int64_t caught_up_wall_ns;      /* when every table was last shipped to its end */
	int64_t first_fail_wall_ns;     /* start of the current outage (0: none) */
};

struct shipper {
	sqlite3 *db;
	const char *db_path;
	struct ch_conn *ch;
	char sink[360];                 /* the cursor's name: the destination's URL */
	char host[256];                 /* host column of every row */
	const char *model;              /* fills a NULL model column (kpi-infer rows) */
	int batch;                      /* rows per POST */
	struct ship_stats st;
	char *insert_params[SHIP_TABLES];
	struct buf body, answer;
	struct buf keys, row_head;      /* a batch's ,"column": keys; {"host":"..." */
	size_t key_off[SHIP_MAX_COLS], key_len[SHIP_MAX_COLS];
	/* per-minute aggregates (minutes.c): a cursor of their own over requests */
	char minutes_sink[380];
	struct ship_table minutes_cur;
	char *minutes_params;
	struct minute_group *groups;
	int n_groups, cap_groups;
};

/* The seconds a minute stays open past its end (rows arrive as requests
 * finish): then it is shipped; a row that comes later ships it again. */
#define SHIP_MINUTE_GRACE_S 10

int ship_open(struct shipper *s, const char *db_path, const struct ch_url *u, const char *host,
	      const char *model, int batch, long timeout_ms, char *err, size_t errlen);
void ship_close(struct shipper *s);

/* One batch of one table past its cursor: read, POST, then move the cursor.
 * Returns the rows shipped (0: nothing new), -1 when ClickHouse did not take
 * them (*unreachable: it could not be reached or timed out; err says what
 * ClickHouse answered otherwise), -2 when the trace could not be read. */
int ship_batch(struct shipper *s, int table, bool *unreachable, char *err, size_t errlen);
/* A POST of s->body acknowledged: n rows added to *rows, a batch and its bytes. */
void ship_acked(struct shipper *s, uint64_t *rows, uint64_t n);
/* Rows past each cursor, into st.t[].backlog; the sum. */
int64_t ship_backlog(struct shipper *s);

int64_t ship_wall_ns(void);
/* v in decimal, appended to b (faster than printf for a batch's numbers) */
int ship_put_i64(struct buf *b, int64_t v);

/* One integer a query (up to two text parameters) answers; *found false when none. */
int64_t ship_one_i64(sqlite3 *db, const char *sql, const char *a, const char *b, bool *found);
/* The cursor kept in the trace (ship.c), for the tables and the aggregates. */
int ship_load_cursor(struct shipper *s, const char *sink, struct ship_table *t);
int ship_advance_cursor(struct shipper *s, const char *sink, struct ship_table *t, int64_t last, int64_t wall);

/* Per-minute aggregates (minutes.c, schema/clickhouse/003_minutes.sql).
 * minutes_open: their state in the trace; 0 or -1. minutes_mark: the minutes
 * of the requests rows past their cursor become dirty (to ship); rows read,
 * or -2, at most SHIP_MINUTES_MARK_ROWS (one transaction's worth: a call that
 * marks that many leaves more to mark). minutes_ship: up to a POST's worth of dirty minutes, closed ones only
 * unless all: computed from the trace, posted with a version one higher than
 * the minute's last; the minutes shipped (0: none due), -1 (ClickHouse, as
 * ship_batch) or -2 (the trace). minutes_pending: dirty minutes (all, or
 * closed only); minutes_behind: those and the requests rows not marked yet
 * (what is left to do; 0 when the aggregates are all shipped). */
int minutes_open(struct shipper *s, char *err, size_t errlen);
void minutes_close(struct shipper *s);
int minutes_mark(struct shipper *s, char *err, size_t errlen);
int minutes_ship(struct shipper *s, bool all, bool *unreachable, char *err, size_t errlen);
int64_t minutes_pending(struct shipper *s, bool all);
int64_t minutes_behind(struct shipper *s, bool all);
#define SHIP_MINUTES_PER_POST 16
#define SHIP_MINUTES_MARK_ROWS 100000

/* /metrics on 127.0.0.1:port (or ADDR:PORT): a thread of its own. */
int ship_metrics_start(struct shipper *s, const char *listen, char *err, size_t errlen);
void ship_metrics_stop(void);

#endif
