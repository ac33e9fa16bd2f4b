-- views_split.sql - request_split (schema/views.sql) for traces of schema
-- version 12 on, whose rows may carry a split inferred from stream timing.
-- kpi-agent applies it after views.sql at every start; `.read` it after
-- views.sql on a copy of such a trace (an older one lacks its columns).
-- split: 'measured' (the engine's probes: source usdt or http+libllama),
-- 'inferred' (split_rule names the rule: docs/agent.md "The inferred split"),
-- 'unknown' (an http row of a server whose split could not be inferred:
-- server_wait_ns holds queue and prefill together), NULL (neither: a request
-- that never reached the engine, a response without content).
-- router_ns, kv_transfer_ns, decode_queue_ns: a disaggregated request's own
-- phases (schema/010_disagg.sql); top: the row stands for its request (its
-- workers' rows hang under the router's), as phase_share counts them.
DROP VIEW IF EXISTS request_split;
CREATE VIEW request_split AS
SELECT rowid AS rid, request_id,
       CASE WHEN split_rule IS NOT NULL THEN 'inferred'
            WHEN queue_ns IS NOT NULL OR prefill_ns IS NOT NULL THEN 'measured'
            WHEN server_wait_ns IS NOT NULL THEN 'unknown' END AS split,
       split_rule,
       CASE WHEN split_rule IS NULL THEN queue_ns END AS queue_measured_ns,
       CASE WHEN split_rule IS NULL THEN prefill_ns END AS prefill_measured_ns,
       CASE WHEN split_rule IS NOT NULL THEN queue_ns END AS queue_inferred_ns,
       CASE WHEN split_rule IS NOT NULL THEN prefill_ns END AS prefill_inferred_ns,
       server_wait_ns, step_ns,
       router_ns, kv_transfer_ns, decode_queue_ns,
       pd_role IS NULL OR parent_hop_id IS NULL AS top
FROM requests;

