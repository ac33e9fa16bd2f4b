-- 010_disagg.sql - kpiscope trace store, schema version 10: disaggregated
-- prefill and decode (docs/disaggregation.md "How to read the trace").
-- Applied on top of the previous version in one transaction; the agent sets
-- user_version.
-- A request kpi-infer --role router sends to a decode worker, which gets its
-- KV from a prefill worker, leaves a row in each of the three processes,
-- tied by the x-request-id the router and the decode worker pass on.  The
-- router's row (pd_role 'router') is the one the client sees: its phases
-- run across the three processes, in order, and sum exactly to e2e_ns:
--   net_in_ns        first segment at the router -> its routing decision
--   router_ns        the decision -> the decode worker admitted it
--   queue_ns         (the prefill queue) -> the prefill worker scheduled it
--   prefill_ns       -> the prefill worker's first token
--   kv_transfer_ns   -> the decode worker had the whole KV, checked
--                       (kv__recv_end): what of the transfer the client
--                       waited for; the layers sent during the prefill are
--                       hidden in it
--   decode_queue_ns  -> the decode worker scheduled it (a running slot, KV
--                       blocks: slot_wait says why it waited)
--   decode_ns        -> its last token
--   net_out_ns       -> the router's last write to the client
-- The decode worker's row (pd_role 'decode') has the same split from its own
-- arrival (router_ns NULL); a request it prefilled itself (no prefill worker
-- named) has kv_transfer_ns and decode_queue_ns NULL and queue_ns, prefill_ns
-- its own.  The prefill worker's row (pd_role 'prefill', operation
-- kv_prefill) keeps its own phases.  Unknown phases are NULL, never 0 (a
-- worker not traced: the next mark known closes the phase before it).
-- Marks: t_admit_ns is the routing decision on the router's row (the
-- worker's admission on a worker's), t_pd_admit_ns the decode worker's
-- admission (router's row only), t_sched_ns and t_first_ns the prefill
-- worker's, t_kv_end_ns the decode worker's kv__recv_end, t_pd_sched_ns its
-- request__scheduled, t_last_ns its last token.
-- Hops: the decode worker's row has parent_hop_id the router's row
-- (pid.t_arrive_ns) and link_rule 'header', the prefill worker's the decode
-- worker's: the views below follow them.
ALTER TABLE requests ADD COLUMN pd_role TEXT;
ALTER TABLE requests ADD COLUMN router_ns INTEGER;
ALTER TABLE requests ADD COLUMN kv_transfer_ns INTEGER;
ALTER TABLE requests ADD COLUMN decode_queue_ns INTEGER;
ALTER TABLE requests ADD COLUMN t_pd_admit_ns INTEGER;
ALTER TABLE requests ADD COLUMN t_kv_start_ns INTEGER;
ALTER TABLE requests ADD COLUMN t_kv_end_ns INTEGER;
ALTER TABLE requests ADD COLUMN t_pd_sched_ns INTEGER;
-- The KV transfer: kv_bytes the KV moved (received by the decode worker; on
-- the prefill worker's row, sent), = layers x prompt tokens x 2 x KV heads x
-- head size x dtype size for a whole one; kv_blocks the worker's KV blocks
-- for the prompt; t_kv_start_ns the transfer's first KV byte handed to the
-- prefill worker's socket (kv__send_start), t_kv_end_ns its last byte in and
-- checked on the decode worker (kv__recv_end), kv_stream_ns between them:
-- the whole transfer, the layers sent while the prefill ran included, so
-- kv_bytes / kv_stream_ns is a floor of the link's rate (where the prefill
-- worker's row is not in: the decode worker's kv__recv_start; on the prefill
-- worker's own row, its kv__send_start to kv__send_end); kv_status
-- 'ok' or why it failed (abi/kpi_kv_wire.h: model, truncated, checksum, ...);
-- kv_peer the other worker, "host:port".
ALTER TABLE requests ADD COLUMN kv_bytes INTEGER;
ALTER TABLE requests ADD COLUMN kv_blocks INTEGER;
ALTER TABLE requests ADD COLUMN kv_stream_ns INTEGER;
ALTER TABLE requests ADD COLUMN kv_status TEXT;
ALTER TABLE requests ADD COLUMN kv_peer TEXT;
-- The router's decision: its policy ('round-robin', 'least-loaded',
-- 'prefix') and the workers it chose ("host:port"; prefill_worker NULL when
-- it named none).
ALTER TABLE requests ADD COLUMN route_policy TEXT;
ALTER TABLE requests ADD COLUMN decode_worker TEXT;
ALTER TABLE requests ADD COLUMN prefill_worker TEXT;
-- Why the decode worker's request, its KV in hand, waited for a slot
-- (kv__slot_wait): 'slots' the running set was full (--max-seqs), 'blocks'
-- too few free KV blocks for its prompt, 'queue' others waited ahead of it,
-- 'none' nothing held it; slot_waiting_ahead how many waited ahead.
ALTER TABLE requests ADD COLUMN slot_wait TEXT;
ALTER TABLE requests ADD COLUMN slot_waiting_ahead INTEGER;
-- The same columns on exchanges_out (one insert serves both; NULL there).
ALTER TABLE exchanges_out ADD COLUMN pd_role TEXT;
ALTER TABLE exchanges_out ADD COLUMN router_ns INTEGER;
ALTER TABLE exchanges_out ADD COLUMN kv_transfer_ns INTEGER;
ALTER TABLE exchanges_out ADD COLUMN decode_queue_ns INTEGER;
ALTER TABLE exchanges_out ADD COLUMN t_pd_admit_ns INTEGER;
ALTER TABLE exchanges_out ADD COLUMN t_kv_start_ns INTEGER;
ALTER TABLE exchanges_out ADD COLUMN t_kv_end_ns INTEGER;
ALTER TABLE exchanges_out ADD COLUMN t_pd_sched_ns INTEGER;
ALTER TABLE exchanges_out ADD COLUMN kv_bytes INTEGER;
ALTER TABLE exchanges_out ADD COLUMN kv_blocks INTEGER;
ALTER TABLE exchanges_out ADD COLUMN kv_stream_ns INTEGER;
ALTER TABLE exchanges_out ADD COLUMN kv_status TEXT;
ALTER TABLE exchanges_out ADD COLUMN kv_peer TEXT;
ALTER TABLE exchanges_out ADD COLUMN route_policy TEXT;
ALTER TABLE exchanges_out ADD COLUMN decode_worker TEXT;
ALTER TABLE exchanges_out ADD COLUMN prefill_worker TEXT;
ALTER TABLE exchanges_out ADD COLUMN slot_wait TEXT;
ALTER TABLE exchanges_out ADD COLUMN slot_waiting_ahead INTEGER;
CREATE INDEX IF NOT EXISTS requests_pd ON requests(pd_role, t_arrive_ns) WHERE pd_role IS NOT NULL;

-- hops and integration (008_hops.sql) again, following the inbound rows'
-- own parent links too: a disaggregated request is the router's row (depth
-- 0), the decode worker's under it and the prefill worker's under that
-- (link_rule 'header'), and its model hop is the decode worker's (the
-- prefill worker's row is a part of the model's work, not the model hop).
-- Each hop's parent, link rule and parent's request_id travel down the tree
-- with it rather than being joined back on hop_id at the end: with the
-- inbound rows' own parent links in edge, SQLite 3.40 plans that last join
-- as a scan per row (the integration view over 47,000 requests: 212 s ->
-- 0.4 s).
DROP VIEW IF EXISTS integration;
DROP VIEW IF EXISTS hops;
CREATE VIEW hops AS
WITH RECURSIVE
h AS (
	SELECT COALESCE(hop_id, pid || '.' || t_arrive_ns) AS hop_id, request_id, pid, comm, tid,
	       'in' AS direction, sock_local, sock_peer, COALESCE(source, 'usdt') AS source,
	       method, path, http_status, end_reason, t_arrive_ns, t_done_ns, e2e_ns, net_in_ns,
	       queue_ns, prefill_ns, server_wait_ns, decode_ns, net_out_ns, ttft_ns,
	       parent_hop_id, link_rule, pd_role
	FROM requests
	UNION ALL
	SELECT hop_id, request_id, pid, comm, tid, 'out', sock_local, sock_peer, source, method,
	       path, http_status, end_reason, t_arrive_ns, t_done_ns, e2e_ns, net_in_ns, queue_ns,
	       prefill_ns, server_wait_ns, decode_ns, net_out_ns, ttft_ns, parent_hop_id, link_rule,
	       NULL
	FROM exchanges_out
),
edge(child, parent, rule, child_request_id) AS (
	SELECT hop_id, parent_hop_id, link_rule, request_id FROM h WHERE parent_hop_id IS NOT NULL
	UNION ALL
	SELECT i.hop_id, o.hop_id, 'socket', i.request_id
	FROM h AS i JOIN exchanges_out AS o
	  ON o.sock_peer = i.sock_local AND o.sock_local = i.sock_peer
	 AND i.t_arrive_ns BETWEEN o.t_arrive_ns AND o.t_done_ns
	WHERE i.direction = 'in' AND i.parent_hop_id IS NULL
),
tree(hop_id, trace_id, depth, parent, rule, request_id, parent_request_id) AS (
	SELECT hop_id, hop_id, 0, NULL, NULL, request_id, NULL FROM h WHERE hop_id NOT IN (SELECT child FROM edge)
	UNION ALL
	SELECT e.child, t.trace_id, t.depth + 1, e.parent, e.rule, e.child_request_id, t.request_id
	FROM edge AS e JOIN tree AS t ON e.parent = t.hop_id
)
SELECT t.trace_id, h.hop_id, t.parent AS parent_hop_id, h.request_id,
       t.parent_request_id, t.depth, h.pid, h.comm, h.tid, h.direction,
       t.rule AS link_rule, h.sock_local, h.sock_peer AS peer, h.source, h.method, h.path,
       h.http_status, h.end_reason, h.t_arrive_ns, h.t_done_ns, h.e2e_ns, h.net_in_ns,
       h.queue_ns, h.prefill_ns, h.server_wait_ns, h.decode_ns, h.net_out_ns, h.ttft_ns,
       h.pd_role
FROM h JOIN tree AS t ON t.hop_id = h.hop_id;

CREATE VIEW integration AS
WITH hh AS (SELECT * FROM hops),
m AS (
	SELECT trace_id, hop_id, request_id, pid, comm, e2e_ns, t_arrive_ns, t_done_ns, queue_ns,
	       prefill_ns, server_wait_ns, decode_ns,
	       ROW_NUMBER() OVER (PARTITION BY trace_id
				  ORDER BY source <> 'http' DESC, depth DESC, t_arrive_ns DESC) AS rn
	FROM hh
	WHERE direction = 'in' AND (source <> 'http' OR path LIKE '%/completions')
	  AND pd_role IS NOT 'prefill'
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
