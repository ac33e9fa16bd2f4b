/* record.h - what the agent produces: one record per request, per batch step,
 * per sample, per in-flight request; and the sink interface that consumers
 * (the SQLite store, later exporters) implement to receive them. */
#ifndef KPI_RECORD_H
#define KPI_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "bpf/kpi_event.h"

/* An integer column with no value (stored as SQL NULL). */
#define KPI_NULL INT64_MIN

struct kpi_request_record {
	char request_id[KPI_REQID_LEN];
	uint32_t pid;
	int64_t seq_id;
	/* CLOCK_MONOTONIC ns; for rejected requests t_admit is the rejection */
	int64_t t_arrive, t_admit, t_sched, t_first, t_last, t_first_write, t_done;
	/* phases: contiguous, non-null ones sum exactly to e2e */
	int64_t net_in, queue, prefill, decode, net_out;
	int64_t ttft, tpot, e2e, itl_p50, itl_p99, itl_max;
	int64_t prompt_tokens, output_tokens, http_status, preemptions, srtt_us, runq_ns;
	int arrive_src;                 /* enum kpi_arrive_src, 0 = admit time */
	const char *finish_reason;      /* stop | length | cancelled | error | NULL */
	const char *reject_reason;      /* rejected only */
	/* gen_ai.operation.name: text_completion | chat; NULL when not admitted
	 * (a rejected request) or the probe did not say */
	const char *operation;
	/* token write times (sys_enter), first = the write of the first token;
	 * valid only during the sink callback */
	const uint64_t *token_writes;
	size_t n_token_writes;
	/* which path made the record: "usdt" (kpi-infer's probes) or "http"
	 * (the HTTP exchange on the target's sockets, agent/http_path.c) */
	const char *source;
	/* http only (KPI_NULL / "" / NULL for usdt): the read that completed the
	 * request, the response's first write; server_wait = the first content
	 * write (streamed) or t_resp_start, minus t_req_read: queue and prefill
	 * together, which the wire cannot tell apart */
	int64_t t_req_read, t_resp_start, server_wait, content_events, stream, max_tokens;
	const char *end_reason;         /* complete | client_closed | server_closed | unsynced | timeout; usdt: target_exit or NULL */
	char method[16], path[64], model[64];
	/* hops (schema/008_hops.sql), "" / NULL / 0 when unknown: "in" for a
	 * request the target served, "out" for an exchange it made as a client
	 * (its marks are then its own writes and reads: t_arrive its request's
	 * first write, t_req_read its last, t_done the read that ended the
	 * response); hop_id names the exchange, parent_hop_id (out only) the
	 * inbound request it was made for, by link_rule */
	const char *direction;
	char hop_id[32], parent_hop_id[32];
	const char *link_rule;          /* header | thread | loop; NULL: unlinked */
	uint32_t tid;                   /* the thread that read the request (in) or wrote it (out) */
	char comm[16];
	char sock_local[48], sock_peer[48];     /* "addr:port" of this end and of the other */
	/* http+libllama only (KPI_NULL / NULL otherwise, agent/llama.c): prompt
	 * tokens the KV cache held, the prompt as the engine computed it (cached +
	 * prefilled), its prefill steps, and the rule that matched its sequence */
	int64_t cached_prompt_tokens, engine_prompt_tokens, prefill_steps;
	const char *engine_join;
	/* usdt rows of kpi-infer with its prefix cache on: cached_prompt_tokens
	 * is the prompt tokens it held (request__prefix_hit), 0 for a miss */
	bool prefix_cache;
	/* disaggregated prefill and decode (schema/010_disagg.sql,
	 * agent/track/disagg.c); KPI_NULL / NULL / "" where not one.  pd_role:
	 * "router" (the row the client sees), "decode", "prefill".  The router's
	 * and the decode worker's rows split e2e as net_in, router_ns, queue
	 * (the prefill queue), prefill, kv_transfer_ns, decode_queue_ns, decode,
	 * net_out; their marks: t_admit the routing decision (the decode
	 * worker's admission on its own row), t_pd_admit the decode worker's
	 * admission, t_sched and t_first the prefill worker's, t_kv_end the
	 * decode worker's kv__recv_end, t_pd_sched its request__scheduled.  The
	 * strings here are fixed words (static), which a sink may keep */
	const char *pd_role;
	int64_t t_pd_admit, t_kv_end, t_pd_sched;
	/* the transfer's own marks: its first KV byte handed to the prefill
	 * worker's socket (kv__send_start; on a decode worker's row whose
	 * prefill worker's row is not in, its own kv__recv_start) and its last
	 * byte in and checked (kv__recv_end; on a prefill worker's row, the
	 * last byte handed over, kv__send_end) */
	int64_t t_kv_start;
	int64_t router_ns, kv_transfer_ns, decode_queue_ns;
	/* the transfer: bytes moved (received; sent on a prefill row), the
	 * worker's KV blocks, the whole stream's time (t_kv_end - t_kv_start),
	 * its status (enum kpi_kv_status name) and the other worker ("host:port") */
	int64_t kv_bytes, kv_blocks, kv_stream_ns;
	const char *kv_status;
	char kv_peer[KPI_PD_ADDR_LEN];
	/* the router's decision (router rows) */
	const char *route_policy;
	char decode_worker[KPI_PD_ADDR_LEN], prefill_worker[KPI_PD_ADDR_LEN];
	/* why the decode worker's request waited for a slot (kv__slot_wait):
	 * "slots" (the running set was full), "blocks" (too few free KV
	 * blocks), "queue" (others waiting ahead), "none"; and how many waited
	 * ahead of it */
	const char *slot_wait;
	int64_t slot_waiting_ahead;
	/* reasoning (schema 011; http rows of event streams, KPI_NULL / NULL
	 * otherwise): the first answer event's write - t_arrive (TTFO), the first
	 * reasoning event to the first answer event, the content events by kind,
	 * the first tool-call event's write - t_arrive, usage's reasoning_tokens,
	 * and how the reasoning came (field | responses | think) */
	int64_t ttfo, reasoning_ns, reasoning_events, answer_events, ttftc, reasoning_tokens;
	const char *reasoning_shape;
	char conversation_id[KPI_REQID_LEN];    /* the request's gen_ai.conversation.id, "" none */
	/* tasks (agent/track/trajectory.c, http rows): the task the row is the
	 * root of (in) or the task or request it served (out), "" none; a call's
	 * kind (model | tool, NULL on in rows), JSON-RPC method and MCP tool name
	 * ("" none), retry and call_error (0/1; KPI_NULL on in rows), the hop id
	 * of the model call it escalated ("" none) */
	char task_id[KPI_REQID_LEN];
	const char *call_kind;
	char rpc_method[32], tool_name[64];
	int64_t retry, call_error;
	char escalated_from[32];
	/* in memory only, no sink stores them: what the track's rules read (the
	 * ids the response carried, the request's traceparent trace id, the
	 * request body's fingerprint without its model, a JSON-RPC error) */
	char resp_header_id[KPI_REQID_LEN], resp_body_id[KPI_REQID_LEN], trace_ctx[33];
	uint64_t body_digest;
	bool body_digest_ok, rpc_error;
	int64_t escalation_added;       /* an escalation: its answer's end - the first answer's */
	/* an outbound exchange: when its answer's last read's first unread
	 * segment arrived (tcp_probe), else t_done: the call's end on a task's
	 * critical path (a caller late to read is its own time, not the call's) */
	int64_t t_answered;
	/* http only (NULL / ignored otherwise, agent/track/split_infer.c): the
	 * rule that inferred queue, prefill, t_sched and t_first from the times
	 * the server wrote its streams' tokens ("idle", "step", "chunked"; NULL:
	 * none applied, or the split is measured), and the decode step it saw */
	const char *split_rule;
	int64_t step_ns;
	/* http only (schema/014_http2.sql; NULL otherwise): what carried it
	 * ("http/1.1", "h2", "grpc": a static name), the HTTP/2 stream's id and
	 * a gRPC call's grpc-status (KPI_NULL without one) */
	const char *protocol;
	int64_t h2_stream, grpc_status;
};

/* An agent task (agent/track/trajectory.c, schema/011_tasks.sql): the calls a
 * process made for one inbound request, or under one trace or conversation
 * id, or between idle gaps; its span split on the critical path. */
struct kpi_task_record {
	char task_id[KPI_REQID_LEN], request_id[KPI_REQID_LEN];
	uint32_t pid;
	char comm[16];
	const char *rule;               /* inbound | traceparent | conversation | idle_gap */
	char hop_id[32];                /* the inbound request's (rule inbound), "" else */
	int64_t t_start, t_end, duration;
	int model_calls, tool_calls, mcp_calls, retries, errors;
	int64_t model_ns, tool_ns, agent_ns;    /* sum to duration */
	bool success;
	int64_t http_status;            /* the inbound response's, KPI_NULL without one */
};

/* A top-level request whose trace reached a model hop in another process
 * (agent/hop_graph.c, as the view integration of schema/008_hops.sql finds
 * it): sent once its hops are all known, shortly after its own record. */
struct kpi_integration_record {
	char request_id[KPI_REQID_LEN];
	uint32_t pid;
	char comm[16];                  /* the process that served it */
	int64_t e2e, model_e2e;
	int64_t before_model, after_model;
	int64_t overhead;               /* e2e - model_e2e = before_model + after_model */
};

struct kpi_step_record {
	uint32_t pid;
	uint64_t step_id;
	uint64_t t_start, t_end;
	int prefill_tokens, decode_seqs, kv_used, kv_free;
	const char *source;             /* NULL: "usdt" (kpi-infer's probes); "libllama" (agent/llama.c) */
};

/* Run-queue delay of a target's threads in one sample that ended when a task
 * of another process left the CPU: the processes it waited behind most. */
#define KPI_RUNQ_BY_MAX  8
#define KPI_RUNQ_BY_REST UINT32_MAX     /* pid of the entry that sums the rest */
struct kpi_runq_by {
	uint32_t pid;                   /* 0: an idle CPU (or unknown: a wait begun before the attach) */
	char comm[16];                  /* of the first of its threads seen */
	uint64_t ns;
};

struct kpi_sample_record {
	uint32_t pid;
	uint64_t t;
	int queue_depth, running;
	int64_t kv_used, kv_free;       /* KPI_NULL before the first step */
	double kv_usage;                /* < 0: unknown */
	double requests_per_s, output_tokens_per_s;
	int preemptions, rejections, errors;
	uint64_t drops, runq_ns;
	uint64_t runq_self_ns;          /* part of runq_ns behind the target's own threads */
	uint64_t runq_idle_ns;          /* ... behind the idle task (also runq_by's pid 0) */
	int n_runq_by;                  /* the rest of runq_ns, largest first */
	struct kpi_runq_by runq_by[KPI_RUNQ_BY_MAX + 1];
};

struct kpi_inflight_record {
	const char *request_id;
	uint32_t pid;
	const char *state;              /* arriving | queued | prefill | decode | writing */
	int64_t t_arrive, t_admit, t_sched, t_first, prompt_tokens;
	int output_writes;
};

/* The requests in flight now, for a sink that shows them (the trace's
 * inflight table): each calls fn once per request; before_attach: requests
 * that arrived while their target's probes were not attached yet, so far. */
struct kpi_inflight_view {
	void *ctx;
	void (*each)(void *ctx, void (*fn)(void *fctx, const struct kpi_inflight_record *r), void *fctx);
	uint64_t before_attach;
};

/* What the agent lost or could not see, by cause (schema/004_losses.sql says
 * what each means; docs/agent.md where each is counted). */
enum kpi_loss {
	KPI_LOSS_RINGBUF_DROPS,         /* events the ring buffer had no room for */
	KPI_LOSS_CONN_UNTRACKED,        /* connections not tracked: conns table full */
	KPI_LOSS_ORPHANS,               /* requests seen only after their admission: no row */
	KPI_LOSS_CLAMPED,               /* requests with a mark out of order, clamped */
	KPI_LOSS_MAP_EVICTIONS,         /* entries evicted from the socks / sys_args tables */
	KPI_LOSS_BEFORE_ATTACH,         /* connections to a target's port before its attach */
	KPI_LOSS_SHED_ROWS,             /* rows dropped while the trace could not be written */
	KPI_LOSS_RETENTION_ROWS,        /* rows removed by retention */
	KPI_LOSS_HTTP_UNSYNCED,         /* times an HTTP tracker lost a connection's framing */
	KPI_LOSS_TLS_UNREADABLE,        /* TLS connections of a process whose libssl is not
					 * probed, and SSL calls with no socket to put them on */
	KPI_LOSS_HOPS_UNLINKED,         /* outbound exchanges no rule could give a parent */
	KPI_LOSS_UNSHIPPED_ROWS,        /* rows retention removed before kpi-ship shipped them */
	KPI_LOSS_H2_HEADERS_UNDECODABLE, /* HTTP/2 header blocks not decoded: their connection's
					  * header table was unknown (open before the attach) */
	KPI_LOSS__COUNT
};

/* The cause's name in the trace (losses.cause, meta loss_<name>_total) and in
 * /metrics (kpi_agent_losses_total{cause="<name>"}). */
static inline const char *kpi_loss_name(int cause)
{
	static const char *const names[KPI_LOSS__COUNT] = {
		"ringbuf_drops", "conn_untracked", "orphans", "clamped", "map_evictions",
		"before_attach", "shed_rows", "retention_rows", "http_unsynced", "tls_unreadable",
		"hops_unlinked", "unshipped_rows", "h2_headers_undecodable",
	};
	return cause >= 0 && cause < KPI_LOSS__COUNT ? names[cause] : "unknown";
}

/* The running totals of every cause since the agent started, at t. */
struct kpi_loss_record {
	uint64_t t;
	uint64_t total[KPI_LOSS__COUNT];
};

/* A consumer of records.  Callbacks run on the agent's main thread, must not
 * block, and copy what they keep. */
struct kpi_sink {
	void *ctx;
	void (*request)(void *ctx, const struct kpi_request_record *r);
	/* an outbound exchange of a target (direction "out"): not a request it
	 * served, so apart from request() and the samples' counts; optional */
	void (*exchange_out)(void *ctx, const struct kpi_request_record *r);
	void (*integration)(void *ctx, const struct kpi_integration_record *r);     /* optional */
	void (*task)(void *ctx, const struct kpi_task_record *k);                   /* optional */
	void (*step)(void *ctx, const struct kpi_step_record *s);
	void (*sample)(void *ctx, const struct kpi_sample_record *s);
	void (*losses)(void *ctx, const struct kpi_loss_record *l);
};

#endif
