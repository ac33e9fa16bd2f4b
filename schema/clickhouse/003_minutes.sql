-- 003_minutes.sql - per-minute aggregates of the requests rows, which kpi-ship
-- computes from each host's trace and ships beside the rows (docs/fleet.md,
-- "Per-minute aggregates"): what the fleet's questions read, so that their
-- cost grows with hosts x minutes, not with requests.  The raw rows stay for
-- drilling down.
--
-- One row per host, minute (of wall_ns, UTC, Unix seconds of its start),
-- model, endpoint (the request's path; '' where the row names none, as
-- kpi-infer's USDT rows), source ('usdt' | 'http') and pod ('namespace/name'
-- where the row names one, else '').  Counts as kpitop's fleet view counts
-- (tools/common/fleet_window.h): requests (every row), rejected (the 429s),
-- errors (the other rows with a status >= 400 or finish_reason 'error'),
-- cancelled (finish_reason 'cancelled'), done (not 429, with an e2e);
-- tokens and phase sums (ns) over the rows that are not 429s.
--
-- Histograms: arrays of counts on schema/lhist.h's buckets (1 % relative
-- error, 1 us .. 1000 s), over the rows that are not 429s and have the value;
-- itl is each request's own itl_p99_ns (the trace ships no per-token gaps).
-- Arrays end at their last non-zero bucket; sumForEach adds them.
--
-- Exactly once: kpi-ship recomputes a whole minute from the trace whenever
-- rows of it arrive after it was shipped, and ships it with a higher version:
-- ReplacingMergeTree(version) keeps the newest, and a reader's FINAL over these
-- rows (thousands, not millions) counts each minute once before parts merge.
CREATE TABLE IF NOT EXISTS {db}.request_minutes_local (
	host String,
	minute Int64,
	model String,
	endpoint String,
	source String,
	pod String,
	version Int64,
	requests Int64,
	done Int64,
	rejected Int64,
	errors Int64,
	cancelled Int64,
	prompt_tokens Int64,
	output_tokens Int64,
	net_in_ns Int64,
	queue_ns Int64,
	prefill_ns Int64,
	server_wait_ns Int64,
	decode_ns Int64,
	net_out_ns Int64,
	router_ns Int64,
	kv_transfer_ns Int64,
	decode_queue_ns Int64,
	last_wall_ns Int64,
	ttft Array(UInt64),
	tpot Array(UInt64),
	itl Array(UInt64),
	e2e Array(UInt64),
	queue Array(UInt64),
	prefill Array(UInt64),
	decode Array(UInt64),
	kv_transfer Array(UInt64),
	ttfo Array(UInt64)
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toDate(toDateTime(minute))
ORDER BY (host, minute, model, endpoint, source, pod);

CREATE TABLE IF NOT EXISTS {db}.request_minutes AS {db}.request_minutes_local
ENGINE = Distributed({cluster}, {db}, request_minutes_local, cityHash64(host));
