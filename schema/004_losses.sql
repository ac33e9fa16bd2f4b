-- 004_losses.sql - kpiscope trace store, schema version 4: everything the
-- agent lost or could not see, by cause, once a second (docs/schema.md).
-- Applied on top of version 3 in one transaction; the agent sets user_version.
-- The run's totals are in meta as loss_<cause>_total; a trace whose losses
-- table has no row in a window lost nothing there.

-- One row per sample second and cause with a non-zero count: how many of that
-- cause happened in (the previous sample, t_ns]. Agent-wide (a ring buffer
-- and the BPF tables serve every target), so no pid. Causes:
--   ringbuf_drops     events the ring buffer had no room for
--   conn_untracked    connections not tracked: the BPF connection table was full
--   orphans           requests seen only after their admission (attached
--                     mid-request, or the admission's event dropped): no row
--   clamped           requests with a mark out of order, clamped to the one before
--   map_evictions     entries evicted from the socks / sys_args LRU tables
--                     (an arrival or a syscall's entry time lost)
--   before_attach     connections that reached a target's port before its attach
--                     completed: requests with no row
--   shed_rows         rows dropped while the trace could not be written (disk full)
--   retention_rows    rows removed by retention (--retain, --max-db-mb)
CREATE TABLE IF NOT EXISTS losses (
	run_id        INTEGER,
	wall_ns       INTEGER NOT NULL,
	t_ns          INTEGER NOT NULL,
	cause         TEXT NOT NULL,
	n             INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS losses_t ON losses(t_ns);

PRAGMA user_version = 4;
