/* assemble.h - turns the BPF event stream into one record per request:
 * joins connection events (by pid+fd) and engine events (by pid+id), and
 * publishes every record on the bus (bus.h); it knows no sink. */
#ifndef KPI_ASSEMBLE_H
#define KPI_ASSEMBLE_H

#include "agent/record.h"

struct assembler;
struct bus;

/* Publishes on bus, which must outlive it; subscribes the hop graph and its
 * own per-process counts there first (neither hands a record to the sinks
 * before their own turn). NULL when out of memory. */
struct assembler *assemble_new(struct bus *bus);
void assemble_free(struct assembler *a);
/* One ring-buffer record of size bytes (bpf/kpi_event.h): -1, and counted
 * as malformed, when it is shorter than its type's struct or of no known type. */
int assemble_event(struct assembler *a, const void *rec, size_t size);
/* The target exited: records its requests that were finished and written out
 * but whose response__end never fired (t_done = the last write, http_status
 * NULL), drops the others (cut off by the exit). */
void assemble_forget_pid(struct assembler *a, uint32_t pid);
/* Hands out the HTTP path's inbound records whose inferred split is decided
 * (every one when final): call before the joins and the store flush. */
void assemble_flush(struct assembler *a, uint64_t now, bool final);
/* One sample per pid in pids[] covering (last sample, now]. runq[i] is pid
 * i's cumulative run-queue delay (BPF runq_total); drops the agent-wide
 * drops so far.  The RUNQ_BY events since the last sample name the other
 * processes in it. */
/* Also ends HTTP exchanges fed nothing for a minute (http_path_expire). */
void assemble_sample(struct assembler *a, uint64_t now, const uint32_t *pids,
		     const struct kpi_runq *runq, int n, uint64_t drops);
/* How the HTTP path asks whether a process's TLS is read (agent/tls.c's
 * agent_tls_readable); unset, no TLS connection is. */
/* How long an HTTP exchange may move no byte before it ends as a timeout. */
void assemble_set_http_timeout(struct assembler *a, uint64_t ns);
/* How long a process that serves nothing may pause before its next call starts a new task. */
void assemble_set_task_idle_gap(struct assembler *a, uint64_t ns);
/* The agent stops: what the HTTP path held for evidence goes out, the tasks still open end. */
void assemble_finish(struct assembler *a);
void assemble_set_tls_query(struct assembler *a, bool (*readable)(void *ctx, uint32_t pid),
			    void *ctx);
/* Hands out the rows that wait for their request's other processes'
 * (disaggregated prefill and decode: agent/track/disagg.c) as they are: at
 * the end of a run. */
void assemble_release_held(struct assembler *a);
/* Calls fn for every request in flight. */
void assemble_foreach_inflight(struct assembler *a,
			       void (*fn)(void *ctx, const struct kpi_inflight_record *r), void *ctx);
/* The same, with the arrivals counted before their attach, for a sink that
 * shows them (the trace store's inflight table). */
struct kpi_inflight_view assemble_inflight_view(struct assembler *a);

struct assemble_stats {
	/* orphans: arrivals that became no request (a client that left, or a
	 * request with no engine part, /health); orphan_requests: requests known
	 * only from events after their admission (attached mid-request, a drop) */
	uint64_t events, requests, rejected, orphans, orphan_requests, clamped;
	uint64_t malformed;                  /* records of no known type, or cut short */
	uint64_t exit_completed, exit_cut;   /* requests in flight when their target exited */
	uint64_t before_attach;              /* requests that arrived while their target was
					      * followed but its USDT probes were not
					      * attached yet (their engine marks may lack) */
	/* outbound exchanges of HTTP-mode targets by the rule that linked them
	 * (enum hop_rule, hop_link.h: [0] unlinked), and of the unlinked those
	 * made while several inbound requests were open */
	uint64_t hops_out[5], hops_ambiguous;
	/* disaggregated requests (disagg.h): client-facing rows joined with
	 * every worker's row expected, and those that went with one missing */
	uint64_t pd_joined, pd_partial;
	/* agent tasks by the rule that made them (inbound, traceparent,
	 * conversation, idle_gap), and escalations (agent/track/trajectory.c) */
	uint64_t tasks[4], escalations;
};
void assemble_stats(const struct assembler *a, struct assemble_stats *out);
/* What the inferred split of HTTP-mode streams came to (split_infer.h). */
const struct split_stats *assemble_split_stats(const struct assembler *a);
/* A request of an HTTP-mode target is in flight or held before its row
 * (http_path_in_flight); a (struct assembler *) as agent_cost_watch_http's ctx. */
bool assemble_http_in_flight(void *a);
/* What the HTTP/2 connections came to (http2_track.h). */
const struct http2_track_stats *assemble_h2_stats(const struct assembler *a);
/* Fills in the causes the assembler counts (orphans, clamped, before_attach,
 * http_unsynced, tls_unreadable, hops_unlinked, h2_headers_undecodable) and
 * publishes l on the bus. */
void assemble_losses(struct assembler *a, struct kpi_loss_record *l);

#endif
