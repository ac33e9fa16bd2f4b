-- 008_hops.sql - kpiscope trace store, schema version 8: every hop of a
-- request on the host, linked into one trace (docs/agent.md "Hops").
-- Applied on top of the previous version in one transaction; the agent sets
-- user_version.
-- A hop is one HTTP exchange seen from one process: a request it served
-- ('in', a requests row) or a call it made as a client ('out', an
-- exchanges_out row: an HTTP-mode target's own connections, kpi-agent follows
-- them with the same parser the other way round).  Two links make a trace:
--   out -> its parent in, on the same process, chosen by the agent when the
--          call's request was written (link_rule: 'header' its propagated
--          x-request-id / traceparent trace-id, 'thread' the thread that read
--          the inbound request while it was open, 'loop' the only inbound
--          request open on the process); none of them: parent NULL, never
--          guessed, and counted: new loss cause (losses.cause, meta
--          loss_hops_unlinked_total) hops_unlinked;
--   in  -> the out on the other end of the same TCP connection (link_rule
--          'socket': both ends' addresses agree, and the request arrived
--          while the call was open), made by the views below.
-- The clock is one (CLOCK_MONOTONIC), so a trace's times compare directly.

-- Columns of both tables: 'in' | 'out'; the hop's id ("<pid>.<ns>", NULL for
-- a kpi-infer (usdt) row: the views use pid.t_arrive_ns); the out's parent
-- hop and rule; the thread that read the request (in) or wrote it (out); the
-- process name; both ends of the connection as "addr:port" (NULL unknown).
ALTER TABLE requests ADD COLUMN direction TEXT;
ALTER TABLE requests ADD COLUMN hop_id TEXT;
ALTER TABLE requests ADD COLUMN parent_hop_id TEXT;
ALTER TABLE requests ADD COLUMN link_rule TEXT;
ALTER TABLE requests ADD COLUMN tid INTEGER;
ALTER TABLE requests ADD COLUMN comm TEXT;
ALTER TABLE requests ADD COLUMN sock_local TEXT;
ALTER TABLE requests ADD COLUMN sock_peer TEXT;
CREATE INDEX IF NOT EXISTS requests_sock ON requests(sock_local, sock_peer);

-- The calls HTTP-mode targets made: the columns of requests (007's engine
-- columns stay NULL here), from the client's side.  t_arrive_ns: the write of the request's first byte (entry);
-- t_req_read_ns: the write that completed it; t_resp_start_ns: the read of
-- the status line (exit); t_first_write_ns: the read that completed the first
-- content event; t_done_ns: the read that completed the response.  Phases:
-- net_in_ns the request's sending, server_wait_ns the wait for the answer,
-- decode_ns its streamed content, net_out_ns the rest; they sum to e2e_ns.
CREATE TABLE IF NOT EXISTS exchanges_out (
	request_id TEXT NOT NULL, pid INTEGER NOT NULL, seq_id INTEGER, run_id INTEGER,
	wall_ns INTEGER NOT NULL, t_arrive_ns INTEGER NOT NULL, t_admit_ns INTEGER,
	t_sched_ns INTEGER, t_first_ns INTEGER, t_last_ns INTEGER, t_first_write_ns INTEGER,
	t_done_ns INTEGER, net_in_ns INTEGER, queue_ns INTEGER, prefill_ns INTEGER,
	decode_ns INTEGER, net_out_ns INTEGER, ttft_ns INTEGER, tpot_ns INTEGER, e2e_ns INTEGER,
	itl_p50_ns INTEGER, itl_p99_ns INTEGER, itl_max_ns INTEGER, prompt_tokens INTEGER,
	output_tokens INTEGER, http_status INTEGER, finish_reason TEXT, reject_reason TEXT,
	preemptions INTEGER NOT NULL DEFAULT 0, srtt_us INTEGER, runq_ns INTEGER, source TEXT,
	server_wait_ns INTEGER, t_req_read_ns INTEGER, t_resp_start_ns INTEGER,
	content_events INTEGER, stream INTEGER, max_tokens INTEGER, end_reason TEXT, method TEXT,
	path TEXT, model TEXT, cached_prompt_tokens INTEGER, engine_prompt_tokens INTEGER,
	prefill_steps INTEGER, engine_join TEXT, direction TEXT, hop_id TEXT, parent_hop_id TEXT,
	link_rule TEXT, tid INTEGER, comm TEXT, sock_local TEXT, sock_peer TEXT
);
CREATE INDEX IF NOT EXISTS exchanges_out_sock ON exchanges_out(sock_peer, sock_local);
CREATE INDEX IF NOT EXISTS exchanges_out_wall ON exchanges_out(wall_ns);

-- Every hop, in and out, with its parent and its trace: trace_id is the hop
-- id of the trace's top-level request (the hop no link leads to), depth 0
-- there.  request_id is the row's own (the x-request-id where there was one,
-- so a propagated id repeats along the trace: hop_id / parent_hop_id are the
-- unique keys, parent_request_id the parent's request_id).
DROP VIEW IF EXISTS hops;
CREATE VIEW hops AS
WITH RECURSIVE
h AS (
	SELECT COALESCE(hop_id, pid || '.' || t_arrive_ns) AS hop_id, request_id, pid, comm, tid,
	       'in' AS direction, sock_local, sock_peer, COALESCE(source, 'usdt') AS source,
	       method, path, http_status, end_reason, t_arrive_ns, t_done_ns, e2e_ns, net_in_ns,
	       queue_ns, prefill_ns, server_wait_ns, decode_ns, net_out_ns, ttft_ns,
	       NULL AS parent_hop_id, NULL AS link_rule
	FROM requests
	UNION ALL
	SELECT hop_id, request_id, pid, comm, tid, 'out', sock_local, sock_peer, source, method,
	       path, http_status, end_reason, t_arrive_ns, t_done_ns, e2e_ns, net_in_ns, queue_ns,
	       prefill_ns, server_wait_ns, decode_ns, net_out_ns, ttft_ns, parent_hop_id, link_rule
	FROM exchanges_out
),
edge(child, parent, rule) AS (
	SELECT hop_id, parent_hop_id, link_rule FROM h
	WHERE direction = 'out' AND parent_hop_id IS NOT NULL
	UNION ALL
	SELECT i.hop_id, o.hop_id, 'socket'
	FROM h AS i JOIN exchanges_out AS o
	  ON o.sock_peer = i.sock_local AND o.sock_local = i.sock_peer
	 AND i.t_arrive_ns BETWEEN o.t_arrive_ns AND o.t_done_ns
	WHERE i.direction = 'in'
),
tree(hop_id, trace_id, depth) AS (
	SELECT hop_id, hop_id, 0 FROM h WHERE hop_id NOT IN (SELECT child FROM edge)
	UNION ALL
	SELECT e.child, t.trace_id, t.depth + 1 FROM edge AS e JOIN tree AS t ON e.parent = t.hop_id
)
SELECT t.trace_id, h.hop_id, e.parent AS parent_hop_id, h.request_id,
       p.request_id AS parent_request_id, t.depth, h.pid, h.comm, h.tid, h.direction,
       e.rule AS link_rule, h.sock_local, h.sock_peer AS peer, h.source, h.method, h.path,
       h.http_status, h.end_reason, h.t_arrive_ns, h.t_done_ns, h.e2e_ns, h.net_in_ns,
       h.queue_ns, h.prefill_ns, h.server_wait_ns, h.decode_ns, h.net_out_ns, h.ttft_ns
FROM h JOIN tree AS t ON t.hop_id = h.hop_id
LEFT JOIN edge AS e ON e.child = h.hop_id
LEFT JOIN h AS p ON p.hop_id = e.parent;

-- One row per top-level request that is an inbound one (a trace's depth-0
-- hop): its e2e, its model hop (the trace's inbound hop traced through an
-- engine's probes, else the deepest one on a .../completions path; itself
-- when nothing else is), what came before the model hop started (the
-- guardrail and retrieval tax), after it ended, and the integration overhead:
-- what the client waited beyond the model hop's server-side e2e
-- (= before_model_ns + after_model_ns).  Model columns NULL: no model hop.
DROP VIEW IF EXISTS integration;
CREATE VIEW integration AS
WITH hh AS (SELECT * FROM hops),
m AS (
	SELECT trace_id, hop_id, request_id, pid, comm, e2e_ns, t_arrive_ns, t_done_ns, queue_ns,
	       prefill_ns, server_wait_ns, decode_ns,
	       ROW_NUMBER() OVER (PARTITION BY trace_id
				  ORDER BY source <> 'http' DESC, depth DESC, t_arrive_ns DESC) AS rn
	FROM hh
	WHERE direction = 'in' AND (source <> 'http' OR path LIKE '%/completions')
)
SELECT t.trace_id, t.request_id, t.hop_id, t.pid, t.comm, t.t_arrive_ns, t.e2e_ns,
       m.request_id AS model_request_id, m.hop_id AS model_hop_id, m.comm AS model_comm,
       m.e2e_ns AS model_e2e_ns, m.queue_ns AS model_queue_ns, m.prefill_ns AS model_prefill_ns,
       m.server_wait_ns AS model_server_wait_ns, m.decode_ns AS model_decode_ns,
       m.t_arrive_ns - t.t_arrive_ns AS before_model_ns,
       t.t_done_ns - m.t_done_ns AS after_model_ns,
       t.e2e_ns - m.e2e_ns AS integration_overhead_ns,
       (SELECT COUNT(*) FROM hh AS c WHERE c.trace_id = t.trace_id) AS hops
FROM hh AS t LEFT JOIN m ON m.trace_id = t.trace_id AND m.rn = 1
WHERE t.depth = 0 AND t.direction = 'in';
