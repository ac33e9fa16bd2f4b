/* disagg.h - a disaggregated request's rows joined: the router's, the decode
 * worker's and the prefill worker's rows of one x-request-id, held until all
 * are in, then given the phases across the three processes and linked as one
 * trace's hops (docs/disaggregation.md "How to read the trace"). */
#ifndef KPI_DISAGG_H
#define KPI_DISAGG_H

#include <stddef.h>
#include <stdint.h>
#include "agent/record.h"

/* After the row that ends a request (the router's, else the decode
 * worker's) the others are waited for this long, then it goes with what is
 * known; rows expected but never come are given up after DISAGG_OPEN_NS. */
#define DISAGG_WAIT_NS (2ULL * 1000000000ULL)
#define DISAGG_OPEN_NS (600ULL * 1000000000ULL)

struct bus;
struct disagg;

struct disagg_stats {
	uint64_t joined;        /* client-facing rows (router's, else decode's) with every row expected */
	uint64_t partial;       /* ... that went with a row missing (a worker not traced, a failure) */
	uint64_t clamped;       /* of those, with a mark of one process before the one it follows */
};

/* Rows go to bus (bus_request), the router's joined ones' integration
 * overhead too (bus_integration); NULL when out of memory. */
struct disagg *disagg_new(struct bus *bus);
void disagg_free(struct disagg *d);

/* A router (pid) chose the workers of request_id at ts: its row, the decode
 * worker's ("host:port" decode) and, when prefill is not "", the prefill
 * worker's are expected. */
void disagg_routed(struct disagg *d, uint32_t pid, const char *request_id, uint64_t ts,
		   const char *decode, const char *prefill);
/* A decode worker (pid) began to receive request_id's KV at ts: its row and
 * the prefill worker's are expected. */
void disagg_fetching(struct disagg *d, uint32_t pid, const char *request_id, uint64_t ts);

/* A usdt request row: held when it belongs to a disaggregated request (its
 * pd_role, or an id a router routed), else published at once.  writes: the
 * response's write times (sorted, up to t_done), which a router's row needs
 * to find its first token's once the decode worker's marks are known. */
void disagg_request(struct disagg *d, const struct kpi_request_record *r, const uint64_t *writes,
		    size_t n_writes);

/* Publishes what waited long enough before now (UINT64_MAX: everything). */
void disagg_expire(struct disagg *d, uint64_t now);

const struct disagg_stats *disagg_stats(const struct disagg *d);

/* A row's marks for the disaggregated split, in order (0: not reached):
 * arrival, routing decision, decode admitted, prefill scheduled, prefill's
 * first token, KV received, decode scheduled (where the decode worker
 * prefilled itself: its first token, and the two before it unreached), last
 * token, done.  Their DISAGG_MARKS - 1 phases are net_in, router_ns, queue,
 * prefill, kv_transfer_ns, decode_queue_ns, decode, net_out (disagg_phases). */
#define DISAGG_MARKS 9
/* Clamps m (marks_clamp) and fills rec's eight phases and e2e from it;
 * true when a mark was raised. */
bool disagg_phases(uint64_t m[DISAGG_MARKS], struct kpi_request_record *rec);

#endif
