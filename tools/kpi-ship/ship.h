/* ship.h - kpi-ship: one host's trace into ClickHouse, table by table, in
 * batches read past a cursor kept in the trace itself (ship_cursor). */
#ifndef KPI_SHIP_H
#define KPI_SHIP_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

#include "tools/common/clickhouse.h"

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
};

int ship_open(struct shipper *s, const char *db_path, const struct ch_url *u, const char *host,
	      const char *model, int batch, long timeout_ms, char *err, size_t errlen);
void ship_close(struct shipper *s);

/* One batch of one table past its cursor: read, POST, then move the cursor.
 * Returns the rows shipped (0: nothing new), -1 when ClickHouse did not take
 * them (*unreachable: it could not be reached or timed out; err says what
 * ClickHouse answered otherwise), -2 when the trace could not be read. */
int ship_batch(struct shipper *s, int table, bool *unreachable, char *err, size_t errlen);
/* Rows past each cursor, into st.t[].backlog; the sum. */
int64_t ship_backlog(struct shipper *s);

int64_t ship_wall_ns(void);

/* /metrics on 127.0.0.1:port (or ADDR:PORT): a thread of its own. */
int ship_metrics_start(struct shipper *s, const char *listen, char *err, size_t errlen);
void ship_metrics_stop(void);

#endif
