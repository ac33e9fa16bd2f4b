-- views_split.sql - request_split (schema/views.sql) for traces of schema
-- version 12 on, whose rows may carry a split inferred from stream timing.
-- kpi-agent applies it after views.sql at every start; `.read` it after
-- views.sql on a copy of such a trace (an older one lacks its columns).
-- split: 'measured' (the engine's probes: source usdt or http+libllama),
-- 'inferred' (split_rule names the rule: docs/agent.md "The inferred split"),
-- 'unknown' (an http row of a server whose split could not be inferred:
-- server_wait_ns holds queue and prefill together), NULL (neither: a request
-- that never reached the engine, a response without content).
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
       server_wait_ns, step_ns
FROM requests;

-- phase_share and phase_share_minute of views.sql, with the disaggregated
-- requests' router, KV-transfer and decode-queue shares, each such request
-- counted once by the row its client saw (schema/010_disagg.sql).
DROP VIEW IF EXISTS phase_share;
CREATE VIEW phase_share AS
SELECT COUNT(*) AS requests, SUM(e2e_ns) / 1e6 AS e2e_ms_total,
       1.0 * TOTAL(net_in_ns) / SUM(e2e_ns) AS net_in_share,
       1.0 * TOTAL(router_ns) / SUM(e2e_ns) AS router_share,
       1.0 * TOTAL(s.queue_measured_ns) / SUM(e2e_ns) AS queue_share,
       1.0 * TOTAL(s.prefill_measured_ns) / SUM(e2e_ns) AS prefill_share,
       1.0 * TOTAL(s.queue_inferred_ns) / SUM(e2e_ns) AS queue_inferred_share,
       1.0 * TOTAL(s.prefill_inferred_ns) / SUM(e2e_ns) AS prefill_inferred_share,
       1.0 * TOTAL(s.server_wait_ns) / SUM(e2e_ns) AS server_wait_share,
       1.0 * TOTAL(kv_transfer_ns) / SUM(e2e_ns) AS kv_transfer_share,
       1.0 * TOTAL(decode_queue_ns) / SUM(e2e_ns) AS decode_queue_share,
       1.0 * TOTAL(decode_ns) / SUM(e2e_ns) AS decode_share,
       1.0 * TOTAL(net_out_ns) / SUM(e2e_ns) AS net_out_share
FROM requests r JOIN request_split s ON s.rid = r.rowid
WHERE e2e_ns > 0 AND (pd_role IS NULL OR parent_hop_id IS NULL);

-- The same per wall-clock minute.
DROP VIEW IF EXISTS phase_share_minute;
CREATE VIEW phase_share_minute AS
SELECT strftime('%Y-%m-%d %H:%M', wall_ns / 60000000000 * 60, 'unixepoch') AS minute_utc,
       COUNT(*) AS requests, SUM(e2e_ns) / 1e6 AS e2e_ms_total,
       1.0 * TOTAL(net_in_ns) / SUM(e2e_ns) AS net_in_share,
       1.0 * TOTAL(router_ns) / SUM(e2e_ns) AS router_share,
       1.0 * TOTAL(s.queue_measured_ns) / SUM(e2e_ns) AS queue_share,
       1.0 * TOTAL(s.prefill_measured_ns) / SUM(e2e_ns) AS prefill_share,
       1.0 * TOTAL(s.queue_inferred_ns) / SUM(e2e_ns) AS queue_inferred_share,
       1.0 * TOTAL(s.prefill_inferred_ns) / SUM(e2e_ns) AS prefill_inferred_share,
       1.0 * TOTAL(s.server_wait_ns) / SUM(e2e_ns) AS server_wait_share,
       1.0 * TOTAL(kv_transfer_ns) / SUM(e2e_ns) AS kv_transfer_share,
       1.0 * TOTAL(decode_queue_ns) / SUM(e2e_ns) AS decode_queue_share,
       1.0 * TOTAL(decode_ns) / SUM(e2e_ns) AS decode_share,
       1.0 * TOTAL(net_out_ns) / SUM(e2e_ns) AS net_out_share
FROM requests r JOIN request_split s ON s.rid = r.rowid
WHERE e2e_ns > 0 AND (pd_role IS NULL OR parent_hop_id IS NULL)
GROUP BY wall_ns / 60000000000
ORDER BY 1;
