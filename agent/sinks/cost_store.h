/* cost_store.h - kpi-agent's cost and energy rows in the trace store
 * (schema/005_cost.sql): cost_samples, energy_readings, the requests'
 * machine_ns / energy_j / cost_usd and the method in meta, on the side
 * connection (side_store.h). */
#ifndef KPI_COST_STORE_H
#define KPI_COST_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cost_store;
struct side_store;

/* An interval waits for a step still open at its end at most this long;
 * a request's shares without a row are dropped (and counted) after it. */
#define COST_KEEP_NS 30000000000ull

/* One settled sample interval (t_end - interval_ns, t_end]: interval_ns =
 * busy_ns + idle_ns, busy_ns = the union of its steps, of which
 * unattributed_ns fell to steps with no sequence list. The energies (µJ,
 * < 0: not measured) split the same way, exactly: energy_uj = the requests'
 * part + idle_energy_uj + unattributed_energy_uj. */
struct cost_interval {
	uint64_t t_end, interval_ns, busy_ns, idle_ns, unattributed_ns;
	uint64_t steps, step_tokens;
	int64_t energy_uj, idle_energy_uj, unattributed_energy_uj;
};

/* A request whose row was handed to the store and whose every interval has
 * settled: its machine time and energy (µJ, < 0: not measured). */
struct cost_req {
	uint32_t pid;
	uint64_t seq_id;
	uint64_t machine_ns;
	int64_t energy_uj;
	uint64_t t_done;
	/* a request of a target traced from its HTTP exchange has no seq_id:
	 * its row is found by (pid, t_arrive_ns, its HTTP/2 stream or 0) */
	bool http;
	int64_t t_arrive, stream;
};

/* Prepares its statements on s (a trace at schema version >= 5), which must
 * outlive it. price_per_hour < 0: no price (cost columns NULL). Returns NULL
 * with the reason in err. */
struct cost_store *cost_store_open(struct side_store *s, double price_per_hour, char *err,
				   size_t errlen);
void cost_store_close(struct cost_store *c);

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
