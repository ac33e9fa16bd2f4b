-- 001_init.sql - kpiscope trace store, schema version 1.
-- Written by kpi-agent; read by kpitop, kpi-report and people with sqlite3.
-- Every *_ns timestamp is CLOCK_MONOTONIC nanoseconds (taken in BPF); every
-- wall_ns is the same instant as Unix-epoch nanoseconds (monotonic + the
-- run's offset in agent_runs), so rows can be queried by date and time.

CREATE TABLE IF NOT EXISTS agent_runs (
	run_id        INTEGER PRIMARY KEY,
	started_wall_ns INTEGER NOT NULL,
	mono_to_wall_ns INTEGER NOT NULL,   -- add to a monotonic ns to get wall ns
	hostname      TEXT,
	agent_version TEXT,
	ended_wall_ns INTEGER
);

-- One row per request, rejected ones included (they carry http_status and
-- the phases they reached; later phases are NULL).
CREATE TABLE IF NOT EXISTS requests (
	request_id    TEXT NOT NULL,        -- x-request-id: the join key
	pid           INTEGER NOT NULL,
	seq_id        INTEGER,              -- the daemon's numeric id (probe argument)
	run_id        INTEGER,
	wall_ns       INTEGER NOT NULL,     -- t_arrive as wall-clock ns
	t_arrive_ns   INTEGER NOT NULL,
	t_admit_ns    INTEGER,
	t_sched_ns    INTEGER,
	t_first_ns    INTEGER,
	t_last_ns     INTEGER,
	t_first_write_ns INTEGER,
	t_done_ns     INTEGER,
	net_in_ns     INTEGER,
	queue_ns      INTEGER,
	prefill_ns    INTEGER,
	decode_ns     INTEGER,
	net_out_ns    INTEGER,
	ttft_ns       INTEGER,
	tpot_ns       INTEGER,
	e2e_ns        INTEGER,
	itl_p50_ns    INTEGER,
	itl_p99_ns    INTEGER,
	itl_max_ns    INTEGER,
	prompt_tokens INTEGER,
	output_tokens INTEGER,
	http_status   INTEGER,
	finish_reason TEXT,                 -- stop | length | cancelled | error | NULL (rejected)
	reject_reason TEXT,                 -- queue_full | too_long | bad_request | ... (rejected only)
	preemptions   INTEGER NOT NULL DEFAULT 0,
	srtt_us       INTEGER,
	runq_ns       INTEGER               -- engine run-queue delay while in flight
);
CREATE INDEX IF NOT EXISTS requests_wall ON requests(wall_ns);
CREATE INDEX IF NOT EXISTS requests_arrive ON requests(t_arrive_ns);
CREATE INDEX IF NOT EXISTS requests_id ON requests(request_id);

-- One row per engine batch step.
CREATE TABLE IF NOT EXISTS steps (
	pid           INTEGER NOT NULL,
	step_id       INTEGER NOT NULL,
	run_id        INTEGER,
	wall_ns       INTEGER NOT NULL,
	t_start_ns    INTEGER NOT NULL,
	t_end_ns      INTEGER,
	prefill_tokens INTEGER NOT NULL,
	decode_seqs   INTEGER NOT NULL,
	kv_used       INTEGER NOT NULL,
	kv_free       INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS steps_start ON steps(t_start_ns);

-- Once a second per target (pid 0: host-wide totals are not kept).
CREATE TABLE IF NOT EXISTS samples (
	pid           INTEGER NOT NULL,
	run_id        INTEGER,
	wall_ns       INTEGER NOT NULL,
	t_ns          INTEGER NOT NULL,
	queue_depth   INTEGER NOT NULL,     -- admitted, not yet scheduled
	running       INTEGER NOT NULL,
	kv_used       INTEGER,
	kv_free       INTEGER,
	kv_usage      REAL,                 -- used / (used + free), 0..1
	requests_per_s REAL NOT NULL,       -- completed in the last second
	output_tokens_per_s REAL NOT NULL,
	preemptions   INTEGER NOT NULL,     -- in the last second
	rejections    INTEGER NOT NULL,     -- 429s in the last second
	errors        INTEGER NOT NULL,     -- other 4xx/5xx in the last second
	drops         INTEGER NOT NULL,     -- ring-buffer drops in the last second
	runq_ns       INTEGER               -- engine threads' run-queue delay in the last second
);
CREATE INDEX IF NOT EXISTS samples_t ON samples(t_ns);

-- Per-token write times, only with kpi-agent --token-detail.
CREATE TABLE IF NOT EXISTS tokens (
	request_id    TEXT NOT NULL,
	pid           INTEGER NOT NULL,
	idx           INTEGER NOT NULL,     -- 0 = the write that carried the first token
	t_write_ns    INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS tokens_req ON tokens(request_id);

-- The agent's view of requests still in flight, rewritten at every flush
-- (one transaction: DELETE + INSERT), so kpitop can show them live.
CREATE TABLE IF NOT EXISTS inflight (
	request_id    TEXT NOT NULL,
	pid           INTEGER NOT NULL,
	state         TEXT NOT NULL,        -- arriving | queued | prefill | decode | writing
	t_arrive_ns   INTEGER NOT NULL,
	t_admit_ns    INTEGER,
	t_sched_ns    INTEGER,
	t_first_ns    INTEGER,
	prompt_tokens INTEGER,
	output_writes INTEGER NOT NULL DEFAULT 0,
	updated_ns    INTEGER NOT NULL      -- monotonic time of the flush that wrote it
);

-- Key/value facts about the store (e.g. last flush time, total drops).
CREATE TABLE IF NOT EXISTS meta (
	key   TEXT PRIMARY KEY,
	value
);

PRAGMA user_version = 1;
