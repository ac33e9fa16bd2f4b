/* retain.h - how long and how large the trace may grow: the agent's writer
 * removes what is past --retain, and the oldest rows while over --max-db-mb. */
#ifndef KPI_RETAIN_H
#define KPI_RETAIN_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

#define RETAIN_DEFAULT_KEEP_NS (14ll * 86400 * 1000000000ll)    /* --retain 14d */
#define RETAIN_DEFAULT_MAX_MB 4096                              /* --max-db-mb */

struct retainer {
	sqlite3 *db;            /* the writer's connection */
	int64_t keep_ns;        /* rows older than this leave; 0: kept for ever */
	int64_t max_bytes;      /* the rows' size bound; 0: none */
	uint64_t removed;       /* rows removed so far */
	uint64_t unshipped;     /* ... of them, rows kpi-ship had not shipped yet */
	int64_t next_age_check; /* wall ns */
};

/* One bounded round (a batch of each table at most, in one transaction).
 * Called by the writer between flushes; readers keep reading (WAL). */
int retain_round(struct retainer *r, int64_t now_wall, char *err, size_t errlen);

#endif
