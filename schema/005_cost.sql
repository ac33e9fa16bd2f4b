-- 005_cost.sql - kpiscope trace store, schema version 5: energy and cost per
-- request, and the idle line, by the method of docs/cost.md.
-- Applied on top of version 4 in one transaction; the agent sets user_version.
-- NULL is "not measured" (no energy counter, no price), never 0.

-- The machine time, energy and cost attributed to the request: its token
-- share of every batch step it was in (docs/cost.md). Written a sample or two
-- after the row, once the energy counters have been read past its end.
--   machine_ns  ns of machine time (sum over the steps it was in)
--   energy_j    joules of the host's counters (RAPL package + dram, NVML GPUs)
--   cost_usd    machine_ns at the agent's --price-per-hour
ALTER TABLE requests ADD COLUMN machine_ns INTEGER;
ALTER TABLE requests ADD COLUMN energy_j REAL;
ALTER TABLE requests ADD COLUMN cost_usd REAL;

-- One row per sample interval (t_ns - interval_ns, t_ns], agent-wide: how its
-- time and energy were split. interval_ns = busy_ns + idle_ns; busy_ns is the
-- union of the batch steps in the interval, of which unattributed_ns went to
-- steps whose sequence list the agent did not see (before its attach, or
-- dropped); the rest went to requests. The same for energy, in µJ, exact:
-- energy_uj = requests' + idle_energy_uj + unattributed_energy_uj.
CREATE TABLE IF NOT EXISTS cost_samples (
	run_id                 INTEGER,
	wall_ns                INTEGER NOT NULL,
	t_ns                   INTEGER NOT NULL,
	interval_ns            INTEGER NOT NULL,
	busy_ns                INTEGER NOT NULL,
	idle_ns                INTEGER NOT NULL,
	unattributed_ns        INTEGER NOT NULL,
	steps                  INTEGER NOT NULL,   -- batch steps that overlap the interval
	step_tokens            INTEGER NOT NULL,   -- tokens those steps computed (their share in it)
	energy_uj              INTEGER,            -- the counters' delta, all domains
	idle_energy_uj         INTEGER,
	unattributed_energy_uj INTEGER,
	price_per_hour         REAL,               -- the agent's --price-per-hour
	cost_usd               REAL,               -- interval_ns at that price
	idle_cost_usd          REAL                -- idle_ns at that price
);
CREATE INDEX IF NOT EXISTS cost_samples_t ON cost_samples(t_ns);

-- Every energy counter's reading at each sample: domain is the RAPL zone
-- (package-0, dram-0, ...) or gpuN (NVML); reading_uj the counter as read,
-- delta_uj what it advanced since the previous reading, wrap-arounds
-- (max_energy_range_uj) included; NULL for the first reading.
CREATE TABLE IF NOT EXISTS energy_readings (
	run_id        INTEGER,
	wall_ns       INTEGER NOT NULL,
	t_ns          INTEGER NOT NULL,
	domain        TEXT NOT NULL,
	reading_uj    INTEGER NOT NULL,
	delta_uj      INTEGER
);
CREATE INDEX IF NOT EXISTS energy_readings_t ON energy_readings(t_ns);

PRAGMA user_version = 5;
