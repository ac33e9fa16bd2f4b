-- 002_gpu.sql - kpiscope trace store, schema version 2: GPU work per batch
-- step and per request, from libkpi_cupti.so (docs/cupti.md) through kpi-agent.
-- Applied on top of version 1 in one transaction; the agent sets user_version.

-- One row per GPU kernel, memcpy or memset of a traced process, as CUPTI
-- recorded it; times are CLOCK_MONOTONIC like every other *_ns.
CREATE TABLE IF NOT EXISTS gpu_kernels (
	pid           INTEGER NOT NULL,
	run_id        INTEGER,
	step_id       INTEGER NOT NULL,     -- batch step that launched it; 0: none (between steps)
	name          TEXT,                 -- kernel name (mangled, as CUDA has it); NULL for copies
	kind          TEXT NOT NULL,        -- kernel | memcpy | memset
	start_ns      INTEGER NOT NULL,
	end_ns        INTEGER NOT NULL,
	device        INTEGER NOT NULL,
	stream        INTEGER NOT NULL,
	grid_x        INTEGER, grid_y INTEGER, grid_z INTEGER,
	block_x       INTEGER, block_y INTEGER, block_z INTEGER,
	bytes         INTEGER,              -- memcpy / memset only
	copy_kind     INTEGER,              -- memcpy: CUPTI's kind (1 HtoD, 2 DtoH, 8 DtoD)
	flags         INTEGER NOT NULL DEFAULT 0  -- kpi_gpu_rec flags (abi/kpi_cupti_abi.h)
);
CREATE INDEX IF NOT EXISTS gpu_kernels_step ON gpu_kernels(pid, step_id);
CREATE INDEX IF NOT EXISTS gpu_kernels_start ON gpu_kernels(start_ns);

-- Per step: the length of the union of its GPU records' [start, end] (kernels
-- overlapping on two streams count once). NULL: no GPU record for the step.
ALTER TABLE steps ADD COLUMN gpu_busy_ns INTEGER;
CREATE INDEX IF NOT EXISTS steps_pid_step ON steps(pid, step_id);

-- Per request: the GPU busy time of each step it was in, split across the
-- step's sequences by token share, summed over the steps of its prefill phase
-- and of its decode phase. Host overhead of a phase = phase - GPU time.
-- NULL: no GPU record was attributed to the request (CPU backend, no library).
ALTER TABLE requests ADD COLUMN prefill_gpu_ns INTEGER;
ALTER TABLE requests ADD COLUMN decode_gpu_ns INTEGER;
CREATE INDEX IF NOT EXISTS requests_pid_seq ON requests(pid, seq_id);

PRAGMA user_version = 2;
