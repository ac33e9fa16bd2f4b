-- 003_runq_by.sql - kpiscope trace store, schema version 3: what the daemon's
-- threads waited behind on the run queue (docs/schema.md).
-- Applied on top of version 2 in one transaction; the agent sets user_version.
-- A wait is put on the task that left the CPU when the waiting thread got it
-- (runqslower's "prev task"): whoever ran last, not everyone who ran meanwhile.

-- The part of runq_ns whose waits ended when another thread of the same
-- process left the CPU (the daemon's own threads competing for cores).
-- NULL: written by an agent before version 3.
ALTER TABLE samples ADD COLUMN runq_self_ns INTEGER;

-- The rest of each sample's runq_ns, by the process whose task left the CPU:
-- the KPI_RUNQ_BY_MAX (8) largest, then one row for the rest (other_pid NULL).
-- other_pid 0: the CPU was idle when the thread got it (it moved there from a
-- busy one), or the wait began before the agent attached.
-- Per sample: runq_self_ns + SUM(runq_by.runq_ns) = runq_ns, but for waits
-- whose event the ring buffer dropped.
CREATE TABLE IF NOT EXISTS runq_by (
	pid           INTEGER NOT NULL,
	run_id        INTEGER,
	wall_ns       INTEGER NOT NULL,
	t_ns          INTEGER NOT NULL,     -- the sample's t_ns
	other_pid     INTEGER,
	other_comm    TEXT,                 -- the name of its first thread seen
	runq_ns       INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS runq_by_t ON runq_by(t_ns);

PRAGMA user_version = 3;
