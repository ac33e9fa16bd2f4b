-- 012_split.sql - kpiscope trace store, schema version 12: the engine's split
-- of requests to servers without engine probes, inferred from the times the
-- server wrote its streams' tokens (docs/agent.md "The inferred split").
-- Applied on top of the previous version in one transaction; the agent sets
-- user_version.
-- An 'http' row whose split_rule is set has queue_ns (t_sched - t_req_read),
-- prefill_ns (t_first - t_sched), t_sched_ns and t_first_ns inferred by that
-- rule ('idle': nothing else was in flight, queue 0; 'step': the step that
-- gave the request its first token, found from the other streams' writes;
-- 'chunked': several lengthened steps before it), server_wait_ns NULL and
-- decode_ns from t_first to the last content write, so that net_in, queue,
-- prefill, decode and net_out still sum to e2e. split_rule NULL on an 'http'
-- row: no rule's preconditions held (docs/agent.md says which are checked),
-- and queue and prefill stay unknown (server_wait_ns holds them together).
-- 'usdt' and 'http+libllama' rows have their split measured: split_rule NULL.

ALTER TABLE requests ADD COLUMN split_rule TEXT;      -- idle | step | chunked; NULL: measured, or unknown
ALTER TABLE requests ADD COLUMN step_ns INTEGER;      -- inferred rows: a decode step of the server around the request
ALTER TABLE exchanges_out ADD COLUMN split_rule TEXT; -- always NULL (the columns of requests)
ALTER TABLE exchanges_out ADD COLUMN step_ns INTEGER;
CREATE INDEX IF NOT EXISTS requests_split ON requests(split_rule) WHERE split_rule IS NOT NULL;
