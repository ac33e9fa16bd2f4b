-- 002_views.sql - views over the Distributed tables of 001_tables.sql, for
-- people with clickhouse-client and dashboards (kpi-report and kpitop ask
-- their own questions).  Each reads FINAL: a batch kpi-ship sent twice counts
-- once even before its parts merge.

-- One row per request, phases and KPIs in milliseconds (schema/views.sql's
-- request_phases_ms, with the host).
CREATE VIEW IF NOT EXISTS {db}.request_phases_ms AS
SELECT host, request_id, pid, run_id, model,
       toDateTime(intDiv(wall_ns, 1000000000)) AS time,
       http_status, finish_reason, reject_reason, source,
       net_in_ns / 1e6 AS net_in_ms, queue_ns / 1e6 AS queue_ms,
       prefill_ns / 1e6 AS prefill_ms, server_wait_ns / 1e6 AS server_wait_ms,
       decode_ns / 1e6 AS decode_ms, net_out_ns / 1e6 AS net_out_ms,
       ttft_ns / 1e6 AS ttft_ms, tpot_ns / 1e6 AS tpot_ms, e2e_ns / 1e6 AS e2e_ms,
       prompt_tokens, output_tokens, preemptions
FROM {db}.requests FINAL;

-- Per host and minute: requests, TTFT and TPOT percentiles (exact), errors.
CREATE VIEW IF NOT EXISTS {db}.host_minute AS
SELECT host, toStartOfMinute(toDateTime(intDiv(wall_ns, 1000000000))) AS minute,
       count() AS requests,
       countIf(http_status >= 400 OR finish_reason = 'error') AS errors,
       quantileExactIf(0.5)(ttft_ns, isNotNull(ttft_ns)) / 1e6 AS ttft_p50_ms,
       quantileExactIf(0.99)(ttft_ns, isNotNull(ttft_ns)) / 1e6 AS ttft_p99_ms,
       quantileExactIf(0.5)(tpot_ns, isNotNull(tpot_ns)) / 1e6 AS tpot_p50_ms,
       quantileExactIf(0.99)(tpot_ns, isNotNull(tpot_ns)) / 1e6 AS tpot_p99_ms
FROM {db}.requests FINAL
GROUP BY host, minute;

-- Per host and minute: what each agent lost, by cause.
CREATE VIEW IF NOT EXISTS {db}.host_losses_minute AS
SELECT host, toStartOfMinute(toDateTime(intDiv(wall_ns, 1000000000))) AS minute, cause, sum(n) AS n
FROM {db}.losses FINAL
GROUP BY host, minute, cause;
