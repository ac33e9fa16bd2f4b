/* assemble.h - turns the BPF event stream into one record per request:
 * joins connection events (by pid+fd) and engine events (by pid+id). */
#ifndef KPI_ASSEMBLE_H
#define KPI_ASSEMBLE_H

#include "agent/record.h"

#define ASSEMBLE_MAX_SINKS 6

struct assembler;

struct assembler *assemble_new(void);
void assemble_free(struct assembler *a);
/* Records go to every sink added, in order. */
int assemble_add_sink(struct assembler *a, const struct kpi_sink *sink);
/* One ring-buffer record of size bytes (bpf/kpi_event.h): -1, and counted
 * as malformed, when it is shorter than its type's struct or of no known type. */
int assemble_event(struct assembler *a, const void *rec, size_t size);
/* The target exited: records its requests that were finished and written out
 * but whose response__end never fired (t_done = the last write, http_status
 * NULL), drops the others (cut off by the exit). */
void assemble_forget_pid(struct assembler *a, uint32_t pid);
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
void assemble_set_tls_query(struct assembler *a, bool (*readable)(void *ctx, uint32_t pid),
			    void *ctx);
/* Calls fn for every request in flight. */
void assemble_foreach_inflight(struct assembler *a,
			       void (*fn)(void *ctx, const struct kpi_inflight_record *r), void *ctx);

/* Hands a finished record to every sink and counts it in its process's
 * sample (other producers of records than the USDT assembly use it too). */
void assemble_request_out(struct assembler *a, const struct kpi_request_record *rec);
/* Hands a top-level request's integration overhead (agent/hop_graph.c) to
 * every sink that takes them; ctx is the assembler. */
void assemble_integration_out(void *ctx, const struct kpi_integration_record *rec);
/* Hands an outbound exchange (direction "out") to every sink that takes them. */
void assemble_exchange_out(struct assembler *a, const struct kpi_request_record *rec);
/* What agent/http_path.c hands a finished exchange's record to: the hold set
 * below first, which may take it (copied) to hand out later completed with
 * assemble_request_out; else assemble_request_out now. */
void assemble_http_request_out(struct assembler *a, const struct kpi_request_record *rec);
void assemble_set_http_hold(struct assembler *a,
			    bool (*hold)(void *ctx, const struct kpi_request_record *rec), void *ctx);
/* Hands a finished batch step to every sink (producers other than the USDT
 * assembly use it too). */
void assemble_step_out(struct assembler *a, const struct kpi_step_record *step);
/* Raises each of the n marks (0: not reached) to the last reached one
 * before it; true when one moved. */
bool assemble_marks_clamp(uint64_t *m, int n);
/* n marks, the last the end (reached): n - 1 phases, *ph[i] from mark i
 * (when reached; phase 0 always) to the next mark reached, else KPI_NULL,
 * so the non-null ones sum to m[n-1] - m[0]. */
void assemble_phases(const uint64_t *m, int n, int64_t *const *ph);
/* itl_p50/p99/max of n_tok (> 1) token write times (schema/pct.h). */
void assemble_itl(struct kpi_request_record *rec, const uint64_t *tok, size_t n_tok);

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
	uint64_t hops_out[4], hops_ambiguous;
};
void assemble_stats(const struct assembler *a, struct assemble_stats *out);
/* Fills in the causes the assembler counts (orphans, clamped, before_attach,
 * http_unsynced, tls_unreadable, hops_unlinked)
 * and hands l to every sink. */
void assemble_losses(struct assembler *a, struct kpi_loss_record *l);

#endif
