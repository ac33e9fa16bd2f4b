/* hop_graph.h - the hops of the last minutes in memory, so that a top-level
 * request's model hop, and so its integration overhead, is known shortly
 * after it is written (/metrics), by the rules the views use
 * (schema/008_hops.sql). */
#ifndef KPI_HOP_GRAPH_H
#define KPI_HOP_GRAPH_H

#include <stdint.h>
#include "hop_link.h"
#include "agent/record.h"

#define HOP_GRAPH_KEEP_NS (120ULL * 1000000000ULL)     /* a hop is kept this long after it ended */
#define HOP_GRAPH_OPEN_NS (600ULL * 1000000000ULL)     /* an outbound one never ended: given up */
/* A top-level request whose calls' other ends are not all written yet (a
 * model server's record can follow its caller's by a few ms) waits this long
 * for them, then goes with what is known (a call to a process not traced). */
#define HOP_GRAPH_WAIT_NS (2ULL * 1000000000ULL)

struct hop_graph;

/* on_integration gets each top-level request whose trace reached a model hop
 * in another process. */
struct hop_graph *hop_graph_new(void (*on_integration)(void *ctx, const struct kpi_integration_record *r),
				void *ctx);
void hop_graph_free(struct hop_graph *g);
/* An outbound exchange's request was written at t0 on a connection with
 * ends e, for parent ("" none); it is open until hop_graph_out_done. */
void hop_graph_out_open(struct hop_graph *g, const char *hop_id, const char *parent,
			const struct hop_ends *e, uint64_t t0);
void hop_graph_out_done(struct hop_graph *g, const char *hop_id, const struct hop_ends *e,
			uint64_t t1);
/* An outbound exchange opened without a parent was linked to one later (the
 * response-id rule), before that parent's record is written. */
void hop_graph_out_link(struct hop_graph *g, const char *hop_id, const struct hop_ends *e, const char *parent);
/* An inbound request's record r is being written: kept as a hop; a
 * top-level one (no traced call on the other end of its connection) waits
 * for its trace's hops, then goes to on_integration if it reached a model
 * hop other than itself.  Waiting ones are looked at again here. */
void hop_graph_in(struct hop_graph *g, const struct kpi_request_record *r);
/* Sends the top-level requests that waited HOP_GRAPH_WAIT_NS; forgets hops
 * that ended HOP_GRAPH_KEEP_NS before now. */
void hop_graph_expire(struct hop_graph *g, uint64_t now);

#endif
