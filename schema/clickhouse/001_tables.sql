-- 001_tables.sql - kpiscope's trace rows in ClickHouse (kpi-ship writes them;
-- kpi-report --db clickhouse://... and kpitop --db clickhouse://... read them):
-- one local table per trace table on every shard, and a Distributed table over
-- the shards that everything reads and writes (docs/fleet.md, "ClickHouse").
--
-- Columns are the SQLite trace's (schema/00*.sql), same names and meaning,
-- times in the same units (the *_ns marks are each host's CLOCK_MONOTONIC,
-- wall_ns is Unix-epoch ns), plus two: host (the shipping host's name) and
-- row_id (the row's rowid in that host's trace).  run_id is the agent run
-- within the host's trace, as in SQLite.  A column the trace gains later is
-- skipped on insert (input_format_skip_unknown_fields) until it is added here:
-- tests/test_ship_columns.py fails while one is missing.
--
-- Written for ClickHouse 18.16 (Debian 12's clickhouse-server): no TTL, no
-- LowCardinality outside experimental settings, no CODECs, no
-- insert_deduplication_token.  {db} and {cluster} are replaced before the
-- statements run (docs/fleet.md shows the sed line).
--
-- Exactly-once in query results: kpi-ship sends every batch until ClickHouse
-- acknowledges it (at least once), and a resent row has the same sorting key
-- (host, wall_ns, row_id) as its first copy: ReplacingMergeTree collapses them
-- when parts merge, and SELECT ... FINAL before any merge.  Rows are sharded
-- by host, so a row's copies always land on the same shard (FINAL works per
-- shard).
--
-- Partitions are days of wall_ns (UTC).  Retention drops them, on each shard:
--   ALTER TABLE {db}.requests_local DROP PARTITION '2026-12-02'
-- The key starts with host, then time: a per-host time-range query reads only
-- that host's granules of that window.
--
-- What a current ClickHouse would simplify:
--   * TTL toDate(toDateTime(intDiv(wall_ns, 1000000000))) + INTERVAL 14 DAY
--     instead of dropping partitions by hand;
--   * host LowCardinality(String) (a dictionary of host names: smaller, faster
--     to filter), and the text columns the same;
--   * CODEC(Delta, ZSTD) on the monotonic marks;
--   * DateTime64(9) for wall_ns, so the partition key is toDate(wall) and the
--     tools need no intDiv;
--   * inserts with insert_deduplication_token (or a ReplicatedMergeTree's
--     block deduplication) so a resent batch never reaches a part at all, and
--     readers could leave FINAL out.

-- One row per request a host's targets served (requests, with its phases).
CREATE TABLE IF NOT EXISTS {db}.requests_local (
	host String,
	row_id Int64,
	request_id String,
	pid Int64,
	seq_id Nullable(Int64),
	run_id Nullable(Int64),
	wall_ns Int64,
	t_arrive_ns Int64,
	t_admit_ns Nullable(Int64),
	t_sched_ns Nullable(Int64),
	t_first_ns Nullable(Int64),
	t_last_ns Nullable(Int64),
	t_first_write_ns Nullable(Int64),
	t_done_ns Nullable(Int64),
	net_in_ns Nullable(Int64),
	queue_ns Nullable(Int64),
	prefill_ns Nullable(Int64),
	decode_ns Nullable(Int64),
	net_out_ns Nullable(Int64),
	ttft_ns Nullable(Int64),
	tpot_ns Nullable(Int64),
	e2e_ns Nullable(Int64),
	itl_p50_ns Nullable(Int64),
	itl_p99_ns Nullable(Int64),
	itl_max_ns Nullable(Int64),
	prompt_tokens Nullable(Int64),
	output_tokens Nullable(Int64),
	http_status Nullable(Int64),
	finish_reason Nullable(String),
	reject_reason Nullable(String),
	preemptions Int64,
	srtt_us Nullable(Int64),
	runq_ns Nullable(Int64),
	prefill_gpu_ns Nullable(Int64),
	decode_gpu_ns Nullable(Int64),
	machine_ns Nullable(Int64),
	energy_j Nullable(Float64),
	cost_usd Nullable(Float64),
	source Nullable(String),
	server_wait_ns Nullable(Int64),
	t_req_read_ns Nullable(Int64),
	t_resp_start_ns Nullable(Int64),
	content_events Nullable(Int64),
	method Nullable(String),
	path Nullable(String),
	model Nullable(String),
	stream Nullable(Int64),
	max_tokens Nullable(Int64),
	end_reason Nullable(String),
	cached_prompt_tokens Nullable(Int64),
	engine_prompt_tokens Nullable(Int64),
	prefill_steps Nullable(Int64),
	engine_join Nullable(String),
	direction Nullable(String),
	hop_id Nullable(String),
	parent_hop_id Nullable(String),
	link_rule Nullable(String),
	tid Nullable(Int64),
	comm Nullable(String),
	sock_local Nullable(String),
	sock_peer Nullable(String),
	split_rule Nullable(String),
	step_ns Nullable(Int64),
	container_id Nullable(String),
	container_name Nullable(String),
	pod_name Nullable(String),
	pod_namespace Nullable(String),
	pod_uid Nullable(String),
	cgroup_id Nullable(Int64),
	weight_type Nullable(String),
	pd_role Nullable(String),
	router_ns Nullable(Int64),
	kv_transfer_ns Nullable(Int64),
	decode_queue_ns Nullable(Int64),
	t_pd_admit_ns Nullable(Int64),
	t_kv_start_ns Nullable(Int64),
	t_kv_end_ns Nullable(Int64),
	t_pd_sched_ns Nullable(Int64),
	kv_bytes Nullable(Int64),
	kv_blocks Nullable(Int64),
	kv_stream_ns Nullable(Int64),
	kv_status Nullable(String),
	kv_peer Nullable(String),
	route_policy Nullable(String),
	decode_worker Nullable(String),
	prefill_worker Nullable(String),
	slot_wait Nullable(String),
	slot_waiting_ahead Nullable(Int64),
	ttfo_ns Nullable(Int64),
	reasoning_ns Nullable(Int64),
	reasoning_events Nullable(Int64),
	answer_events Nullable(Int64),
	ttftc_ns Nullable(Int64),
	reasoning_tokens Nullable(Int64),
	reasoning_shape Nullable(String),
	conversation_id Nullable(String),
	task_id Nullable(String),
	call_kind Nullable(String),
	rpc_method Nullable(String),
	tool_name Nullable(String),
	retry Nullable(Int64),
	call_error Nullable(Int64),
	escalated_from Nullable(String),
	protocol Nullable(String),
	h2_stream Nullable(Int64),
	grpc_status Nullable(Int64)
) ENGINE = ReplacingMergeTree
PARTITION BY toDate(toDateTime(intDiv(wall_ns, 1000000000)))
ORDER BY (host, wall_ns, row_id);

CREATE TABLE IF NOT EXISTS {db}.requests AS {db}.requests_local
ENGINE = Distributed({cluster}, {db}, requests_local, cityHash64(host));

-- The calls HTTP-mode targets made (008_hops.sql).
CREATE TABLE IF NOT EXISTS {db}.exchanges_out_local (
	host String,
	row_id Int64,
	request_id String,
	pid Int64,
	seq_id Nullable(Int64),
	run_id Nullable(Int64),
	wall_ns Int64,
	t_arrive_ns Int64,
	t_admit_ns Nullable(Int64),
	t_sched_ns Nullable(Int64),
	t_first_ns Nullable(Int64),
	t_last_ns Nullable(Int64),
	t_first_write_ns Nullable(Int64),
	t_done_ns Nullable(Int64),
	net_in_ns Nullable(Int64),
	queue_ns Nullable(Int64),
	prefill_ns Nullable(Int64),
	decode_ns Nullable(Int64),
	net_out_ns Nullable(Int64),
	ttft_ns Nullable(Int64),
	tpot_ns Nullable(Int64),
	e2e_ns Nullable(Int64),
	itl_p50_ns Nullable(Int64),
	itl_p99_ns Nullable(Int64),
	itl_max_ns Nullable(Int64),
	prompt_tokens Nullable(Int64),
	output_tokens Nullable(Int64),
	http_status Nullable(Int64),
	finish_reason Nullable(String),
	reject_reason Nullable(String),
	preemptions Int64,
	srtt_us Nullable(Int64),
	runq_ns Nullable(Int64),
	source Nullable(String),
	server_wait_ns Nullable(Int64),
	t_req_read_ns Nullable(Int64),
	t_resp_start_ns Nullable(Int64),
	content_events Nullable(Int64),
	stream Nullable(Int64),
	max_tokens Nullable(Int64),
	end_reason Nullable(String),
	method Nullable(String),
	path Nullable(String),
	model Nullable(String),
	cached_prompt_tokens Nullable(Int64),
	engine_prompt_tokens Nullable(Int64),
	prefill_steps Nullable(Int64),
	engine_join Nullable(String),
	direction Nullable(String),
	hop_id Nullable(String),
	parent_hop_id Nullable(String),
	link_rule Nullable(String),
	tid Nullable(Int64),
	comm Nullable(String),
	sock_local Nullable(String),
	sock_peer Nullable(String),
	split_rule Nullable(String),
	step_ns Nullable(Int64),
	container_id Nullable(String),
	container_name Nullable(String),
	pod_name Nullable(String),
	pod_namespace Nullable(String),
	pod_uid Nullable(String),
	cgroup_id Nullable(Int64),
	weight_type Nullable(String),
	pd_role Nullable(String),
	router_ns Nullable(Int64),
	kv_transfer_ns Nullable(Int64),
	decode_queue_ns Nullable(Int64),
	t_pd_admit_ns Nullable(Int64),
	t_kv_start_ns Nullable(Int64),
	t_kv_end_ns Nullable(Int64),
	t_pd_sched_ns Nullable(Int64),
	kv_bytes Nullable(Int64),
	kv_blocks Nullable(Int64),
	kv_stream_ns Nullable(Int64),
	kv_status Nullable(String),
	kv_peer Nullable(String),
	route_policy Nullable(String),
	decode_worker Nullable(String),
	prefill_worker Nullable(String),
	slot_wait Nullable(String),
	slot_waiting_ahead Nullable(Int64),
	ttfo_ns Nullable(Int64),
	reasoning_ns Nullable(Int64),
	reasoning_events Nullable(Int64),
	answer_events Nullable(Int64),
	ttftc_ns Nullable(Int64),
	reasoning_tokens Nullable(Int64),
	reasoning_shape Nullable(String),
	conversation_id Nullable(String),
	task_id Nullable(String),
	call_kind Nullable(String),
	rpc_method Nullable(String),
	tool_name Nullable(String),
	retry Nullable(Int64),
	call_error Nullable(Int64),
	escalated_from Nullable(String),
	t_answered_ns Nullable(Int64),
	protocol Nullable(String),
	h2_stream Nullable(Int64),
	grpc_status Nullable(Int64)
) ENGINE = ReplacingMergeTree
PARTITION BY toDate(toDateTime(intDiv(wall_ns, 1000000000)))
ORDER BY (host, wall_ns, row_id);

CREATE TABLE IF NOT EXISTS {db}.exchanges_out AS {db}.exchanges_out_local
ENGINE = Distributed({cluster}, {db}, exchanges_out_local, cityHash64(host));

-- One row per engine batch step (what the prefill finding reads).
CREATE TABLE IF NOT EXISTS {db}.steps_local (
	host String,
	row_id Int64,
	pid Int64,
	step_id Int64,
	run_id Nullable(Int64),
	wall_ns Int64,
	t_start_ns Int64,
	t_end_ns Nullable(Int64),
	prefill_tokens Int64,
	decode_seqs Int64,
	kv_used Int64,
	kv_free Int64,
	gpu_busy_ns Nullable(Int64),
	source Nullable(String)
) ENGINE = ReplacingMergeTree
PARTITION BY toDate(toDateTime(intDiv(wall_ns, 1000000000)))
ORDER BY (host, wall_ns, row_id);

CREATE TABLE IF NOT EXISTS {db}.steps AS {db}.steps_local
ENGINE = Distributed({cluster}, {db}, steps_local, cityHash64(host));

-- Once a second per target: queue depth, running, KV usage, rates.
CREATE TABLE IF NOT EXISTS {db}.samples_local (
	host String,
	row_id Int64,
	pid Int64,
	run_id Nullable(Int64),
	wall_ns Int64,
	t_ns Int64,
	queue_depth Int64,
	running Int64,
	kv_used Nullable(Int64),
	kv_free Nullable(Int64),
	kv_usage Nullable(Float64),
	requests_per_s Float64,
	output_tokens_per_s Float64,
	preemptions Int64,
	rejections Int64,
	errors Int64,
	drops Int64,
	runq_ns Nullable(Int64),
	runq_self_ns Nullable(Int64)
) ENGINE = ReplacingMergeTree
PARTITION BY toDate(toDateTime(intDiv(wall_ns, 1000000000)))
ORDER BY (host, wall_ns, row_id);

CREATE TABLE IF NOT EXISTS {db}.samples AS {db}.samples_local
ENGINE = Distributed({cluster}, {db}, samples_local, cityHash64(host));

-- What each host's agent lost, by cause, per sample second (004_losses.sql).
CREATE TABLE IF NOT EXISTS {db}.losses_local (
	host String,
	row_id Int64,
	run_id Nullable(Int64),
	wall_ns Int64,
	t_ns Int64,
	cause String,
	n Int64
) ENGINE = ReplacingMergeTree
PARTITION BY toDate(toDateTime(intDiv(wall_ns, 1000000000)))
ORDER BY (host, wall_ns, row_id);

CREATE TABLE IF NOT EXISTS {db}.losses AS {db}.losses_local
ENGINE = Distributed({cluster}, {db}, losses_local, cityHash64(host));

