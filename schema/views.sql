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
       NULL AS server_wait_ns, NULL AS step_ns
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
-- unknown, the server wait that holds them together.
DROP VIEW IF EXISTS phase_share;
CREATE VIEW phase_share AS
SELECT COUNT(*) AS requests, SUM(e2e_ns) / 1e6 AS e2e_ms_total,
       1.0 * TOTAL(net_in_ns) / SUM(e2e_ns) AS net_in_share,
       1.0 * TOTAL(s.queue_measured_ns) / SUM(e2e_ns) AS queue_share,
       1.0 * TOTAL(s.prefill_measured_ns) / SUM(e2e_ns) AS prefill_share,
       1.0 * TOTAL(s.queue_inferred_ns) / SUM(e2e_ns) AS queue_inferred_share,
       1.0 * TOTAL(s.prefill_inferred_ns) / SUM(e2e_ns) AS prefill_inferred_share,
       1.0 * TOTAL(s.server_wait_ns) / SUM(e2e_ns) AS server_wait_share,
       1.0 * TOTAL(decode_ns) / SUM(e2e_ns) AS decode_share,
       1.0 * TOTAL(net_out_ns) / SUM(e2e_ns) AS net_out_share
FROM requests r JOIN request_split s ON s.rid = r.rowid WHERE e2e_ns > 0;

-- The same per wall-clock minute.
DROP VIEW IF EXISTS phase_share_minute;
CREATE VIEW phase_share_minute AS
SELECT strftime('%Y-%m-%d %H:%M', wall_ns / 60000000000 * 60, 'unixepoch') AS minute_utc,
       COUNT(*) AS requests, SUM(e2e_ns) / 1e6 AS e2e_ms_total,
       1.0 * TOTAL(net_in_ns) / SUM(e2e_ns) AS net_in_share,
       1.0 * TOTAL(s.queue_measured_ns) / SUM(e2e_ns) AS queue_share,
       1.0 * TOTAL(s.prefill_measured_ns) / SUM(e2e_ns) AS prefill_share,
       1.0 * TOTAL(s.queue_inferred_ns) / SUM(e2e_ns) AS queue_inferred_share,
       1.0 * TOTAL(s.prefill_inferred_ns) / SUM(e2e_ns) AS prefill_inferred_share,
       1.0 * TOTAL(s.server_wait_ns) / SUM(e2e_ns) AS server_wait_share,
       1.0 * TOTAL(decode_ns) / SUM(e2e_ns) AS decode_share,
       1.0 * TOTAL(net_out_ns) / SUM(e2e_ns) AS net_out_share
FROM requests r JOIN request_split s ON s.rid = r.rowid WHERE e2e_ns > 0
GROUP BY wall_ns / 60000000000
ORDER BY 1;

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
