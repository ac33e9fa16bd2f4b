-- views.sql - read-only views over the trace store, pure SQL (the sqlite3
-- CLI runs them as they are). kpi-agent re-creates them at every start, so
-- they are not versioned; `.read schema/views.sql` adds them to any trace.
-- Percentiles interpolate linearly between closest ranks (the definition
-- kpitop and kpi-report use): p of n sorted values is at rank (n-1)*p.

-- How each request's queue and prefill are known, one row per request (rid:
-- its rowid in requests), for the views below. This definition reads any
-- trace: queue and prefill as the row has them, which before version 12 only
-- the engine's probes measured. schema/views_split.sql, which kpi-agent
-- applies after this file (its traces are of the latest version), redefines it
-- for version 12 on: splits kpi-agent inferred from stream timing (split_rule)
-- in columns of their own, and the server wait of rows whose split is unknown,
-- so that measured and inferred never mix in one column.
DROP VIEW IF EXISTS request_split;
CREATE VIEW request_split AS
SELECT rowid AS rid, request_id,
       CASE WHEN queue_ns IS NOT NULL OR prefill_ns IS NOT NULL THEN 'measured' END AS split,
       NULL AS split_rule,
       queue_ns AS queue_measured_ns, prefill_ns AS prefill_measured_ns,
       NULL AS queue_inferred_ns, NULL AS prefill_inferred_ns,
       NULL AS server_wait_ns, NULL AS step_ns,
       NULL AS router_ns, NULL AS kv_transfer_ns, NULL AS decode_queue_ns, 1 AS top
FROM requests;

-- One row per request, phases and KPIs in milliseconds, time in UTC. split:
-- 'measured', 'inferred' (split_rule says by which rule), 'unknown' (queue
-- and prefill together in server_wait_ms) or NULL (neither: a request that
-- never reached the engine); queue_ms and prefill_ms are measured ones only.
DROP VIEW IF EXISTS request_phases_ms;
CREATE VIEW request_phases_ms AS
SELECT r.request_id, pid, run_id,
       strftime('%Y-%m-%d %H:%M:%f', wall_ns / 1e9, 'unixepoch') AS time_utc,
       http_status, finish_reason, reject_reason, s.split, s.split_rule,
       net_in_ns / 1e6 AS net_in_ms, s.queue_measured_ns / 1e6 AS queue_ms,
       s.prefill_measured_ns / 1e6 AS prefill_ms,
       s.queue_inferred_ns / 1e6 AS queue_inferred_ms,
       s.prefill_inferred_ns / 1e6 AS prefill_inferred_ms,
       s.server_wait_ns / 1e6 AS server_wait_ms, s.step_ns / 1e6 AS step_ms,
       decode_ns / 1e6 AS decode_ms, net_out_ns / 1e6 AS net_out_ms,
       ttft_ns / 1e6 AS ttft_ms, tpot_ns / 1e6 AS tpot_ms, e2e_ns / 1e6 AS e2e_ms,
       itl_p50_ns / 1e6 AS itl_p50_ms, itl_p99_ns / 1e6 AS itl_p99_ms,
       prompt_tokens, output_tokens, preemptions,
       srtt_us / 1e3 AS srtt_ms, runq_ns / 1e6 AS runq_ms
FROM requests r JOIN request_split s ON s.rid = r.rowid;

-- The latencies the percentile view ranks, one row per (request, metric),
-- bucketed by the wall-clock minute of arrival: 'queue' the measured queue
-- waits, 'queue_inferred' the inferred ones (request_split).
DROP VIEW IF EXISTS request_latency_long;
CREATE VIEW request_latency_long AS
SELECT wall_ns / 60000000000 * 60 AS minute_s, 'ttft' AS metric, ttft_ns AS v
  FROM requests WHERE ttft_ns IS NOT NULL
UNION ALL
SELECT wall_ns / 60000000000 * 60, 'tpot', tpot_ns FROM requests WHERE tpot_ns IS NOT NULL
UNION ALL
SELECT wall_ns / 60000000000 * 60, 'e2e', e2e_ns FROM requests WHERE e2e_ns IS NOT NULL
UNION ALL
SELECT wall_ns / 60000000000 * 60, 'queue', s.queue_measured_ns
  FROM requests r JOIN request_split s ON s.rid = r.rowid WHERE s.queue_measured_ns IS NOT NULL
UNION ALL
SELECT wall_ns / 60000000000 * 60, 'queue_inferred', s.queue_inferred_ns
  FROM requests r JOIN request_split s ON s.rid = r.rowid WHERE s.queue_inferred_ns IS NOT NULL;

-- Per minute and metric (ttft, tpot, e2e, queue, queue_inferred): n, p50,
-- p95, p99 in ms.
DROP VIEW IF EXISTS latency_percentiles_minute;
CREATE VIEW latency_percentiles_minute AS
WITH ranked AS (
	SELECT minute_s, metric, v,
	       ROW_NUMBER() OVER w - 1 AS rn,
	       COUNT(*) OVER (PARTITION BY minute_s, metric) AS cnt,
	       LEAD(v) OVER w AS v_next
	FROM request_latency_long
	WINDOW w AS (PARTITION BY minute_s, metric ORDER BY v)
), wanted(p) AS (
	VALUES (0.50), (0.95), (0.99)
), interpolated AS (
	SELECT minute_s, metric, cnt, p,
	       v + (COALESCE(v_next, v) - v) * ((cnt - 1) * p - rn) AS val
	FROM ranked JOIN wanted ON rn = CAST((cnt - 1) * p AS INTEGER)
)
SELECT strftime('%Y-%m-%d %H:%M', minute_s, 'unixepoch') AS minute_utc, minute_s, metric,
       cnt AS n,
       MAX(CASE WHEN p = 0.50 THEN val END) / 1e6 AS p50_ms,
       MAX(CASE WHEN p = 0.95 THEN val END) / 1e6 AS p95_ms,
       MAX(CASE WHEN p = 0.99 THEN val END) / 1e6 AS p99_ms
FROM interpolated
GROUP BY minute_s, metric
ORDER BY minute_s, metric;

-- Each phase's share of the summed end-to-end time (0..1; the shares add
-- up to 1 because a request's non-null phases add up to its e2e): queue and
-- prefill measured, inferred (request_split) and, where the split is
-- unknown, the server wait that holds them together.  A disaggregated
-- request counts once, by its router's row (its workers' rows hang under it:
-- schema/010_disagg.sql), with its three phases of its own.
DROP VIEW IF EXISTS phase_share;
CREATE VIEW phase_share AS
SELECT COUNT(*) AS requests, SUM(e2e_ns) / 1e6 AS e2e_ms_total,
       1.0 * TOTAL(net_in_ns) / SUM(e2e_ns) AS net_in_share,
       1.0 * TOTAL(s.router_ns) / SUM(e2e_ns) AS router_share,
       1.0 * TOTAL(s.queue_measured_ns) / SUM(e2e_ns) AS queue_share,
       1.0 * TOTAL(s.prefill_measured_ns) / SUM(e2e_ns) AS prefill_share,
       1.0 * TOTAL(s.queue_inferred_ns) / SUM(e2e_ns) AS queue_inferred_share,
       1.0 * TOTAL(s.prefill_inferred_ns) / SUM(e2e_ns) AS prefill_inferred_share,
       1.0 * TOTAL(s.server_wait_ns) / SUM(e2e_ns) AS server_wait_share,
       1.0 * TOTAL(s.kv_transfer_ns) / SUM(e2e_ns) AS kv_transfer_share,
       1.0 * TOTAL(s.decode_queue_ns) / SUM(e2e_ns) AS decode_queue_share,
       1.0 * TOTAL(decode_ns) / SUM(e2e_ns) AS decode_share,
       1.0 * TOTAL(net_out_ns) / SUM(e2e_ns) AS net_out_share
FROM requests r JOIN request_split s ON s.rid = r.rowid
WHERE e2e_ns > 0 AND s.top;

-- The same per wall-clock minute.
DROP VIEW IF EXISTS phase_share_minute;
CREATE VIEW phase_share_minute AS
SELECT strftime('%Y-%m-%d %H:%M', wall_ns / 60000000000 * 60, 'unixepoch') AS minute_utc,
       COUNT(*) AS requests, SUM(e2e_ns) / 1e6 AS e2e_ms_total,
       1.0 * TOTAL(net_in_ns) / SUM(e2e_ns) AS net_in_share,
       1.0 * TOTAL(s.router_ns) / SUM(e2e_ns) AS router_share,
       1.0 * TOTAL(s.queue_measured_ns) / SUM(e2e_ns) AS queue_share,
       1.0 * TOTAL(s.prefill_measured_ns) / SUM(e2e_ns) AS prefill_share,
       1.0 * TOTAL(s.queue_inferred_ns) / SUM(e2e_ns) AS queue_inferred_share,
       1.0 * TOTAL(s.prefill_inferred_ns) / SUM(e2e_ns) AS prefill_inferred_share,
       1.0 * TOTAL(s.server_wait_ns) / SUM(e2e_ns) AS server_wait_share,
       1.0 * TOTAL(s.kv_transfer_ns) / SUM(e2e_ns) AS kv_transfer_share,
       1.0 * TOTAL(s.decode_queue_ns) / SUM(e2e_ns) AS decode_queue_share,
       1.0 * TOTAL(decode_ns) / SUM(e2e_ns) AS decode_share,
       1.0 * TOTAL(net_out_ns) / SUM(e2e_ns) AS net_out_share
FROM requests r JOIN request_split s ON s.rid = r.rowid
WHERE e2e_ns > 0 AND s.top
GROUP BY wall_ns / 60000000000
ORDER BY 1;

-- Disaggregated requests (schema/010_disagg.sql), one row each: the one its
-- client saw (the router's; a decode worker's where no router was traced),
-- its eight phases in ms in their order (they sum to e2e_ms), the KV moved
-- and the whole transfer's rate (a floor of the link's: the layers sent
-- during the prefill are paced by it), why it waited for a decode slot, and
-- the workers.
DROP VIEW IF EXISTS disagg_requests_ms;
CREATE VIEW disagg_requests_ms AS
SELECT request_id, pid, pd_role,
       strftime('%Y-%m-%d %H:%M:%f', wall_ns / 1e9, 'unixepoch') AS time_utc, http_status,
       net_in_ns / 1e6 AS net_in_ms, router_ns / 1e6 AS router_ms,
       queue_ns / 1e6 AS prefill_queue_ms, prefill_ns / 1e6 AS prefill_ms,
       kv_transfer_ns / 1e6 AS kv_transfer_ms, decode_queue_ns / 1e6 AS decode_queue_ms,
       decode_ns / 1e6 AS decode_ms, net_out_ns / 1e6 AS net_out_ms,
       ttft_ns / 1e6 AS ttft_ms, e2e_ns / 1e6 AS e2e_ms, prompt_tokens, output_tokens,
       kv_bytes, kv_stream_ns / 1e6 AS kv_stream_ms,
       1e3 * kv_bytes / NULLIF(kv_stream_ns, 0) AS kv_mb_per_s, kv_status, slot_wait,
       slot_waiting_ahead, cached_prompt_tokens, route_policy, decode_worker, prefill_worker
FROM requests
WHERE pd_role IN ('router', 'decode') AND parent_hop_id IS NULL;

-- Cost and energy per wall-clock minute (docs/cost.md): the requests that
-- arrived in the minute (their cost_usd and energy_j, attributed by token
-- share of the batch steps they were in) and the idle line of the minute's
-- sample intervals (time outside any step, plus steps the agent could not
-- split). cost_usd + idle_cost_usd is what the minute cost; NULL: no price
-- (cost) or no energy counter (energy).
DROP VIEW IF EXISTS cost_per_minute;
CREATE VIEW cost_per_minute AS
WITH r AS (
	SELECT wall_ns / 60000000000 AS m, COUNT(*) AS requests,
	       TOTAL(output_tokens) AS output_tokens, SUM(cost_usd) AS cost_usd,
	       SUM(energy_j) AS energy_j
	FROM requests GROUP BY m
), i AS (
	SELECT wall_ns / 60000000000 AS m,
	       SUM(idle_cost_usd + unattributed_ns * price_per_hour / 3.6e12) AS idle_cost_usd,
	       SUM(idle_energy_uj + unattributed_energy_uj) / 1e6 AS idle_energy_j
	FROM cost_samples GROUP BY m
), m AS (SELECT m FROM r UNION SELECT m FROM i)
SELECT strftime('%Y-%m-%d %H:%M', m.m * 60, 'unixepoch') AS minute,
       COALESCE(r.requests, 0) AS requests, CAST(COALESCE(r.output_tokens, 0) AS INTEGER) AS output_tokens,
       r.cost_usd, i.idle_cost_usd, r.energy_j, i.idle_energy_j
FROM m LEFT JOIN r ON r.m = m.m LEFT JOIN i ON i.m = m.m
ORDER BY m.m;

-- Each model call of a traced process (exchanges_out, call_kind 'model')
-- with the model server's row on the other end of its connection, when that
-- server is traced: its tokens (the call's own usage first) and cost_usd
-- (NULL unless the agent ran with --price-per-hour).
DROP VIEW IF EXISTS model_call_costs;
CREATE VIEW model_call_costs AS
SELECT o.hop_id, o.task_id, o.pid, o.comm, o.model, o.t_arrive_ns, o.t_done_ns, o.e2e_ns,
       COALESCE(o.prompt_tokens, r.prompt_tokens) AS prompt_tokens,
       COALESCE(o.output_tokens, r.output_tokens) AS output_tokens, r.cost_usd
FROM exchanges_out AS o
LEFT JOIN requests AS r
  ON r.sock_local = o.sock_peer AND r.sock_peer = o.sock_local
 AND r.t_arrive_ns BETWEEN o.t_arrive_ns AND o.t_done_ns
WHERE o.call_kind = 'model';

-- Agent trajectories, one row per task (tasks, schema/011_tasks.sql): its
-- calls by kind, the MCP tools it called (their names, in order), retries
-- and errors, where its time went on its critical path (model_ns + tool_ns
-- + agent_ns = duration_ns), the tokens and cost of its model calls
-- (model_call_costs), and whether it succeeded.
DROP VIEW IF EXISTS trajectories;
CREATE VIEW trajectories AS
WITH m AS (
	SELECT task_id, SUM(prompt_tokens) AS prompt_tokens, SUM(output_tokens) AS output_tokens,
	       SUM(cost_usd) AS cost_usd
	FROM model_call_costs WHERE task_id IS NOT NULL GROUP BY task_id
), t AS (
	SELECT task_id, GROUP_CONCAT(tool_name, ',') AS mcp_tools
	FROM (SELECT task_id, tool_name FROM exchanges_out
	      WHERE task_id IS NOT NULL AND rpc_method = 'tools/call' ORDER BY t_arrive_ns)
	GROUP BY task_id
)
SELECT k.task_id, k.pid, k.comm AS process, k.rule, k.request_id, k.run_id, k.wall_ns,
       k.t_start_ns, k.t_end_ns, k.duration_ns, k.model_calls, k.tool_calls, k.mcp_calls,
       t.mcp_tools, k.retries, k.errors, k.model_ns, k.tool_ns, k.agent_ns,
       m.prompt_tokens, m.output_tokens, m.cost_usd, k.success, k.http_status
FROM tasks AS k LEFT JOIN m ON m.task_id = k.task_id LEFT JOIN t ON t.task_id = k.task_id;

-- Model cascades: one row per escalation, a model call that asked a second,
-- different model the same request (the request body the same but for its
-- "model"; compared in the agent's memory, never stored) after a first model
-- call of the same task or request had answered (status below 400).  The
-- latency it added: when its answer arrived minus when the first one had
-- (t_answered_ns); each call's cost from model_call_costs.
DROP VIEW IF EXISTS escalations;
CREATE VIEW escalations AS
SELECT b.task_id, b.pid, b.comm, b.run_id, b.wall_ns, a.model AS from_model, b.model AS to_model,
       a.hop_id AS from_hop_id, b.hop_id, a.e2e_ns AS from_e2e_ns, b.e2e_ns AS to_e2e_ns,
       COALESCE(b.t_answered_ns, b.t_done_ns) - COALESCE(a.t_answered_ns, a.t_done_ns) AS added_ns,
       ca.cost_usd AS from_cost_usd,
       cb.cost_usd AS to_cost_usd
FROM exchanges_out AS b JOIN exchanges_out AS a ON a.hop_id = b.escalated_from
LEFT JOIN model_call_costs AS ca ON ca.hop_id = a.hop_id
LEFT JOIN model_call_costs AS cb ON cb.hop_id = b.hop_id
WHERE b.escalated_from IS NOT NULL;

-- Every task or request that made a model call, once: its first model call's
-- model and whether it escalated (0/1), what the escalation added and the
-- cost of each path (the first model alone; the first and the second).
-- Escalation rate per process and first model:
--   SELECT comm, first_model, AVG(escalated) FROM cascade_requests GROUP BY 1, 2;
DROP VIEW IF EXISTS cascade_requests;
CREATE VIEW cascade_requests AS
WITH first AS (
	SELECT *, ROW_NUMBER() OVER (PARTITION BY task_id ORDER BY t_arrive_ns) AS rn
	FROM model_call_costs WHERE task_id IS NOT NULL
)
SELECT f.task_id, f.pid, f.comm, f.t_arrive_ns, f.model AS first_model, e.to_model,
       e.hop_id IS NOT NULL AS escalated, e.added_ns, f.cost_usd AS first_cost_usd,
       f.cost_usd + e.to_cost_usd AS escalated_path_cost_usd
FROM first AS f LEFT JOIN escalations AS e ON e.from_hop_id = f.hop_id
WHERE f.rn = 1;
