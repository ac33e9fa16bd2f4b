/* cost_store.h - kpi-agent's cost and energy rows in the trace store
 * (schema/005_cost.sql): cost_samples, energy_readings, the requests'
 * machine_ns / energy_j / cost_usd and the method in meta, on its own connection. */
#ifndef KPI_COST_STORE_H
#define KPI_COST_STORE_H

#include <stddef.h>
#include <stdint.h>
#include "agent/track/cost_attr.h"

struct cost_store;

/* Opens path, already migrated to version >= 5 by trace_store_open; rows carry
 * run_id. price_per_hour < 0: no price (cost columns NULL). Returns NULL with
 * the reason in err. */
struct cost_store *cost_store_open(const char *path, int64_t run_id, double price_per_hour,
				   char *err, size_t errlen);
void cost_store_close(struct cost_store *s);

/* A counter's reading at t (delta < 0: its first). */
struct cost_reading {
	uint64_t t;
	int domain;
	uint64_t reading_uj;
	int64_t delta_uj;
};

/* What a flush writes; requests whose row is not in the store yet stay
 * queued, up to COST_KEEP_NS after their end. */
struct cost_queue {
	struct cost_interval *iv;
	size_t n_iv, cap_iv;
	struct cost_req *req;
	size_t n_req, cap_req;
	struct cost_reading *rd;
	size_t n_rd, cap_rd;
};
void cost_queue_interval(struct cost_queue *q, const struct cost_interval *i);
void cost_queue_req(struct cost_queue *q, const struct cost_req *r);
void cost_queue_reading(struct cost_queue *q, const struct cost_reading *r);
void cost_queue_free(struct cost_queue *q);

/* meta rows (key, text value), in their own transaction. */
int cost_store_meta(struct cost_store *s, const char *const *kv, int n, char *err, size_t errlen);
/* One transaction: q's intervals and readings inserted, requests updated.
 * What was written leaves q; requests not in the store yet stay, unless
 * final or older than COST_KEEP_NS (*not_found counts those). Returns 0, or
 * -1 with the error in err, q untouched. */
int cost_store_flush(struct cost_store *s, struct cost_queue *q, const char *const *domains,
		     uint64_t now, bool final, uint64_t *not_found, char *err, size_t errlen);

#endif
