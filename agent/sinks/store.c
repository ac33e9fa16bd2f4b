/* store.c - SQLite writer for kpi-agent: WAL, prepared statements, one
 * transaction per flush, versioned migrations embedded at build time. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "export_ident.h"
#include "retain.h"
#include "store.h"
#include "kpi_schema.h"

#define N_SCHEMA_FILES (sizeof(kpi_schema_files) / sizeof(kpi_schema_files[0]))

struct pending_req {
	struct kpi_request_record r;
	uint64_t *tokens;
	bool out;                       /* an outbound exchange: exchanges_out, no tokens */
	char weight_type[32];           /* the serving process's (export_ident); "" unknown */
	bool in_container;              /* ct holds the process's container (host/container.h) */
	struct container_info ct;
};

struct vec {
	void *p;
	size_t n, cap, size;
};

/* One losses row: n losses of one cause in the second that ended at t. */
struct pending_loss {
	uint64_t t;
	int cause;      /* enum kpi_loss */
	uint64_t n;
};

struct trace_store {
	sqlite3 *db;
	sqlite3_stmt *ins_req, *ins_out, *ins_step, *ins_sample, *ins_runq_by, *ins_token, *ins_inflight,
		*del_inflight, *set_meta, *ins_loss, *ins_task;
	bool token_detail;
	int64_t run_id, mono_to_wall;
	struct vec reqs, steps, samples, losses, tasks;
	struct kpi_loss_record loss_seen;       /* totals last queued as rows */
	struct retainer ret;
	uint64_t last_retain_err;
	size_t max_backlog;             /* per queue; more is shed while writes fail */
	uint64_t shed_reqs, shed_rows;  /* requests, and steps + samples, shed so far */
};

static void *vec_push(struct vec *v)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 64;
		void *p = realloc(v->p, cap * v->size);
		if (!p)
			abort();
		v->p = p;
		v->cap = cap;
	}
	return (char *)v->p + v->size * v->n++;
}

static void fail(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

static int64_t mono_to_wall_offset(void)
{
	struct timespec m, w;
	clock_gettime(CLOCK_MONOTONIC, &m);
	clock_gettime(CLOCK_REALTIME, &w);
	return ((int64_t)w.tv_sec - m.tv_sec) * 1000000000LL + (w.tv_nsec - m.tv_nsec);
}

/* One row of requests or of exchanges_out (schema/008_hops.sql): the same columns. */
static const char *insert_request_sql(const char *table)
{
	static char sql[2][2048];
	char *out = sql[strcmp(table, "requests") != 0];

	snprintf(out, sizeof(sql[0]),
		 "INSERT INTO %s(request_id, pid, seq_id, run_id, wall_ns, t_arrive_ns, t_admit_ns, "
		 "t_sched_ns, t_first_ns, t_last_ns, t_first_write_ns, t_done_ns, net_in_ns, queue_ns, "
		 "prefill_ns, decode_ns, net_out_ns, ttft_ns, tpot_ns, e2e_ns, itl_p50_ns, itl_p99_ns, "
		 "itl_max_ns, prompt_tokens, output_tokens, http_status, finish_reason, reject_reason, "
		 "preemptions, srtt_us, runq_ns, source, server_wait_ns, t_req_read_ns, t_resp_start_ns, "
		 "content_events, stream, max_tokens, end_reason, method, path, model, cached_prompt_tokens, "
		 "engine_prompt_tokens, prefill_steps, engine_join, direction, hop_id, parent_hop_id, "
		 "link_rule, tid, comm, sock_local, sock_peer, weight_type, pd_role, router_ns, kv_transfer_ns, "
		 "decode_queue_ns, t_pd_admit_ns, t_kv_start_ns, t_kv_end_ns, t_pd_sched_ns, kv_bytes, kv_blocks, "
		 "kv_stream_ns, kv_status, kv_peer, route_policy, decode_worker, prefill_worker, slot_wait, "
		 "slot_waiting_ahead, ttfo_ns, reasoning_ns, "
		 "reasoning_events, answer_events, ttftc_ns, reasoning_tokens, reasoning_shape, conversation_id, "
		 "task_id, call_kind, rpc_method, tool_name, retry, call_error, escalated_from, split_rule, "
		 "step_ns, container_id, container_name, pod_name, pod_namespace, pod_uid, cgroup_id, protocol, "
		 "h2_stream, grpc_status%s) VALUES "
		 "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,"
		 "?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?%s)", table,
		 strcmp(table, "requests") ? ", t_answered_ns" : "", strcmp(table, "requests") ? ",?" : "");
	return out;
}

int trace_store_schema_version(void)
{
	int v = 0;
	for (size_t i = 0; i < N_SCHEMA_FILES; i++) {
		int n = atoi(kpi_schema_files[i].name);
		if (n > v)
			v = n;
	}
	return v;
}

/* mkdir -p, new directories 0750. */
static int make_dirs(const char *path, char *err, size_t errlen)
{
	char buf[PATH_MAX];
	char *slash;

	if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf)) {
		fail(err, errlen, "database path too long: %s", path);
		return -1;
	}
	slash = strrchr(buf, '/');
	if (!slash || slash == buf)
		return 0;
	*slash = 0;
	for (char *p = buf + 1;; p++) {
		if (*p == '/' || !*p) {
			char c = *p;
			*p = 0;
			if (mkdir(buf, 0750) && errno != EEXIST) {
				fail(err, errlen, "cannot create directory %s for the database: %s", buf, strerror(errno));
				return -1;
			}
			if (!c)
				break;
			*p = c;
		}
	}
	return 0;
}

static int exec(sqlite3 *db, const char *sql, char *err, size_t errlen, const char *what)
{
	char *msg = NULL;
	if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
		fail(err, errlen, "%s: %s", what, msg ? msg : sqlite3_errmsg(db));
		sqlite3_free(msg);
		return -1;
	}
	return 0;
}

static int user_version(sqlite3 *db)
{
	sqlite3_stmt *s;
	int v = -1;
	if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &s, NULL) != SQLITE_OK)
		return -1;
	if (sqlite3_step(s) == SQLITE_ROW)
		v = sqlite3_column_int(s, 0);
	sqlite3_finalize(s);
	return v;
}

/* Applies every NNN_*.sql newer than the DB's user_version, each in its own
 * transaction that also sets user_version = NNN; then (re)creates the views. */
static int migrate(sqlite3 *db, char *err, size_t errlen)
{
	int have = user_version(db), want = trace_store_schema_version();
	char what[128], setv[64];

	if (have < 0) {
		fail(err, errlen, "cannot read the schema version: %s", sqlite3_errmsg(db));
		return -1;
	}
	if (have > want) {
		fail(err, errlen, "the database has schema version %d but this kpi-agent knows only up to %d: "
		     "use a newer kpi-agent or another --db", have, want);
		return -1;
	}
	for (size_t i = 0; i < N_SCHEMA_FILES; i++) {
		const char *name = kpi_schema_files[i].name;
		int v = atoi(name);
		if (v <= have)
			continue;
		snprintf(what, sizeof(what), "schema migration %s failed", name);
		snprintf(setv, sizeof(setv), "PRAGMA user_version = %d;", v);
		if (exec(db, "BEGIN IMMEDIATE", err, errlen, what) ||
		    exec(db, kpi_schema_files[i].sql, err, errlen, what) ||
		    exec(db, setv, err, errlen, what) || exec(db, "COMMIT", err, errlen, what)) {
			sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
			return -1;
		}
	}
	for (size_t i = 0; i < N_SCHEMA_FILES; i++) {
		const char *name = kpi_schema_files[i].name;
		if (name[0] >= '0' && name[0] <= '9')
			continue;
		snprintf(what, sizeof(what), "applying schema/%s failed", name);
		if (exec(db, kpi_schema_files[i].sql, err, errlen, what))
			return -1;
	}
	return 0;
}

static int prepare(struct trace_store *st, sqlite3_stmt **s, const char *sql, char *err, size_t errlen)
{
	if (sqlite3_prepare_v3(st->db, sql, -1, SQLITE_PREPARE_PERSISTENT, s, NULL) != SQLITE_OK) {
		fail(err, errlen, "cannot prepare statement (%s): %s", sqlite3_errmsg(st->db), sql);
		return -1;
	}
	return 0;
}

struct trace_store *trace_store_open(const char *path, bool token_detail, char *err, size_t errlen)
{
	struct trace_store *st = calloc(1, sizeof(*st));
	char host[256] = "";
	sqlite3_stmt *s;
	int fd;

	if (!st)
		abort();
	st->token_detail = token_detail;
	st->max_backlog = TRACE_STORE_DEFAULT_BACKLOG;
	st->reqs.size = sizeof(struct pending_req);
	st->steps.size = sizeof(struct kpi_step_record);
	st->samples.size = sizeof(struct kpi_sample_record);
	st->losses.size = sizeof(struct pending_loss);
	st->tasks.size = sizeof(struct kpi_task_record);
	if (make_dirs(path, err, errlen))
		goto fail;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
	if (fd < 0) {
		fail(err, errlen, "cannot open database %s: %s", path, strerror(errno));
		goto fail;
	}
	close(fd);
	if (sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
		fail(err, errlen, "cannot open database %s: %s", path,
		     st->db ? sqlite3_errmsg(st->db) : "out of memory");
		goto fail;
	}
	sqlite3_busy_timeout(st->db, 2000);
	/* auto_vacuum takes only on a new file (before its first table): a
	 * trace made by an older agent keeps reusing its free pages instead */
	if (exec(st->db, "PRAGMA auto_vacuum=INCREMENTAL; PRAGMA journal_mode=WAL; "
		 "PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;",
		 err, errlen, "cannot switch the database to WAL mode"))
		goto fail;
	if (migrate(st->db, err, errlen))
		goto fail;

	st->mono_to_wall = mono_to_wall_offset();
	gethostname(host, sizeof(host) - 1);
	if (prepare(st, &s, "INSERT INTO agent_runs(started_wall_ns, mono_to_wall_ns, hostname, agent_version) "
		    "VALUES (?, ?, ?, ?)", err, errlen))
		goto fail;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	sqlite3_bind_int64(s, 1, (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec);
	sqlite3_bind_int64(s, 2, st->mono_to_wall);
	sqlite3_bind_text(s, 3, host, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(s, 4, KPI_AGENT_VERSION, -1, SQLITE_STATIC);
	if (sqlite3_step(s) != SQLITE_DONE) {
		fail(err, errlen, "cannot record this run in agent_runs: %s", sqlite3_errmsg(st->db));
		sqlite3_finalize(s);
		goto fail;
	}
	sqlite3_finalize(s);
	st->run_id = sqlite3_last_insert_rowid(st->db);

	if (prepare(st, &st->ins_req, insert_request_sql("requests"), err, errlen) ||
	    prepare(st, &st->ins_out, insert_request_sql("exchanges_out"), err, errlen) ||
	    prepare(st, &st->ins_step,
		    "INSERT INTO steps(pid, step_id, run_id, wall_ns, t_start_ns, t_end_ns, prefill_tokens, "
		    "decode_seqs, kv_used, kv_free, source) VALUES (?,?,?,?,?,?,?,?,?,?,?)", err, errlen) ||
	    prepare(st, &st->ins_sample,
		    "INSERT INTO samples(pid, run_id, wall_ns, t_ns, queue_depth, running, kv_used, kv_free, "
		    "kv_usage, requests_per_s, output_tokens_per_s, preemptions, rejections, errors, drops, "
		    "runq_ns, runq_self_ns) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", err, errlen) ||
	    prepare(st, &st->ins_runq_by,
		    "INSERT INTO runq_by(pid, run_id, wall_ns, t_ns, other_pid, other_comm, runq_ns) "
		    "VALUES (?,?,?,?,?,?,?)", err, errlen) ||
	    prepare(st, &st->ins_token,
		    "INSERT INTO tokens(request_id, pid, idx, t_write_ns) VALUES (?,?,?,?)", err, errlen) ||
	    prepare(st, &st->ins_inflight,
		    "INSERT INTO inflight(request_id, pid, state, t_arrive_ns, t_admit_ns, t_sched_ns, "
		    "t_first_ns, prompt_tokens, output_writes, updated_ns) VALUES (?,?,?,?,?,?,?,?,?,?)",
		    err, errlen) ||
	    prepare(st, &st->del_inflight, "DELETE FROM inflight", err, errlen) ||
	    prepare(st, &st->set_meta, "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", err, errlen) ||
	    prepare(st, &st->ins_loss, "INSERT INTO losses(run_id, wall_ns, t_ns, cause, n) VALUES (?,?,?,?,?)",
		    err, errlen) ||
	    prepare(st, &st->ins_task,
		    "INSERT INTO tasks(task_id, pid, comm, run_id, wall_ns, rule, hop_id, request_id, t_start_ns, "
		    "t_end_ns, duration_ns, model_calls, tool_calls, mcp_calls, retries, errors, model_ns, "
		    "tool_ns, agent_ns, success, http_status) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
		    err, errlen))
		goto fail;
	st->ret = (struct retainer){ .db = st->db, .keep_ns = RETAIN_DEFAULT_KEEP_NS,
				     .max_bytes = (int64_t)RETAIN_DEFAULT_MAX_MB << 20 };
	/* a previous agent's in-flight view is stale */
	sqlite3_step(st->del_inflight);
	sqlite3_reset(st->del_inflight);
	return st;
fail:
	trace_store_close(st);
	return NULL;
}

int64_t trace_store_run_id(const struct trace_store *st)
{
	return st->run_id;
}

void trace_store_set_max_backlog(struct trace_store *st, size_t rows)
{
	st->max_backlog = rows;
}

void trace_store_shed(const struct trace_store *st, uint64_t *requests, uint64_t *rows)
{
	*requests = st->shed_reqs;
	*rows = st->shed_rows;
}

/* ---- sink: copy records into the pending queues ------------------------------ */

static void sink_request_or_out(struct trace_store *st, const struct kpi_request_record *r,
				bool out)
{
	struct pending_req *p;

	if (st->reqs.n >= st->max_backlog) {
		st->shed_reqs++;
		return;
	}
	p = vec_push(&st->reqs);

	p->r = *r;
	p->out = out;
	p->tokens = NULL;
	/* the model that served it (/proc and the GGUF header, once a process) */
	const struct export_ident *id = export_ident_get(r->pid);
	snprintf(p->weight_type, sizeof(p->weight_type), "%s", out ? "" : id->weight_type);
	/* its container and pod (cgroup and runtime state, once a process) */
	p->in_container = id->in_container;
	if (id->in_container)
		p->ct = id->container;
	p->r.token_writes = NULL;
	if (st->token_detail && r->n_token_writes && !out) {
		p->tokens = malloc(r->n_token_writes * sizeof(uint64_t));
		if (!p->tokens)
			abort();
		memcpy(p->tokens, r->token_writes, r->n_token_writes * sizeof(uint64_t));
	} else {
		p->r.n_token_writes = 0;
	}
}

static void sink_request(void *ctx, const struct kpi_request_record *r)
{
	sink_request_or_out(ctx, r, false);
}

static void sink_exchange_out(void *ctx, const struct kpi_request_record *r)
{
	sink_request_or_out(ctx, r, true);
}

static void sink_task(void *ctx, const struct kpi_task_record *k)
{
	struct trace_store *st = ctx;
	if (st->tasks.n >= st->max_backlog) {
		st->shed_rows++;
		return;
	}
	*(struct kpi_task_record *)vec_push(&st->tasks) = *k;
}

static void sink_step(void *ctx, const struct kpi_step_record *s)
{
	struct trace_store *st = ctx;
	if (st->steps.n >= st->max_backlog) {
		st->shed_rows++;
		return;
	}
	*(struct kpi_step_record *)vec_push(&st->steps) = *s;
}

/* Each cause that grew since the last record becomes a row; the totals go to
 * meta at the next flush. A loss row shed for a full backlog is itself a
 * shed row, counted as such. */
static void sink_losses(void *ctx, const struct kpi_loss_record *l)
{
	struct trace_store *st = ctx;

	for (int c = 0; c < KPI_LOSS__COUNT; c++) {
		uint64_t d = l->total[c] > st->loss_seen.total[c] ? l->total[c] - st->loss_seen.total[c] : 0;
		if (!d)
			continue;
		if (st->losses.n >= st->max_backlog) {
			st->shed_rows++;
			continue;
		}
		*(struct pending_loss *)vec_push(&st->losses) = (struct pending_loss){ l->t, c, d };
	}
	st->loss_seen = *l;
}

static void sink_sample(void *ctx, const struct kpi_sample_record *s)
{
	struct trace_store *st = ctx;
	if (st->samples.n >= st->max_backlog) {
		st->shed_rows++;
		return;
	}
	*(struct kpi_sample_record *)vec_push(&st->samples) = *s;
}

struct kpi_sink trace_store_sink(struct trace_store *st)
{
	return (struct kpi_sink){ .ctx = st, .request = sink_request,
				  .exchange_out = sink_exchange_out, .task = sink_task, .step = sink_step,
				  .sample = sink_sample, .losses = sink_losses };
}

size_t trace_store_pending(const struct trace_store *st)
{
	return st->reqs.n + st->steps.n + st->samples.n + st->losses.n + st->tasks.n;
}

/* ---- flush --------------------------------------------------------------------------- */

static void bind_opt(sqlite3_stmt *s, int i, int64_t v)
{
	if (v == KPI_NULL)
		sqlite3_bind_null(s, i);
	else
		sqlite3_bind_int64(s, i, v);
}

/* Static strings, or the pending record's own arrays: both outlive the step. */
static void bind_text_opt(sqlite3_stmt *s, int i, const char *v)
{
	if (v)
		sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(s, i);
}

static int step_done(struct trace_store *st, sqlite3_stmt *s)
{
	int rc = sqlite3_step(s);
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
	return rc == SQLITE_DONE ? 0 : -1;
}

static int write_request(struct trace_store *st, const struct pending_req *p)
{
	const struct kpi_request_record *r = &p->r;
	sqlite3_stmt *s = p->out ? st->ins_out : st->ins_req;
	int i = 1;
	int64_t ts[] = { r->t_arrive, r->t_admit, r->t_sched, r->t_first, r->t_last, r->t_first_write,
			 r->t_done, r->net_in, r->queue, r->prefill, r->decode, r->net_out, r->ttft,
			 r->tpot, r->e2e, r->itl_p50, r->itl_p99, r->itl_max, r->prompt_tokens,
			 r->output_tokens, r->http_status };

	sqlite3_bind_text(s, i++, r->request_id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, i++, r->pid);
	bind_opt(s, i++, r->seq_id);
	sqlite3_bind_int64(s, i++, st->run_id);
	sqlite3_bind_int64(s, i++, r->t_arrive + st->mono_to_wall);
	for (size_t k = 0; k < sizeof(ts) / sizeof(ts[0]); k++)
		bind_opt(s, i++, ts[k]);
	if (r->finish_reason)
		sqlite3_bind_text(s, i++, r->finish_reason, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(s, i++);
	if (r->reject_reason)
		sqlite3_bind_text(s, i++, r->reject_reason, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(s, i++);
	sqlite3_bind_int64(s, i++, r->preemptions);
	bind_opt(s, i++, r->srtt_us);
	bind_opt(s, i++, r->runq_ns);
	bind_text_opt(s, i++, r->source);
	bind_opt(s, i++, r->server_wait);
	bind_opt(s, i++, r->t_req_read);
	bind_opt(s, i++, r->t_resp_start);
	bind_opt(s, i++, r->content_events);
	bind_opt(s, i++, r->stream);
	bind_opt(s, i++, r->max_tokens);
	bind_text_opt(s, i++, r->end_reason);
	bind_text_opt(s, i++, r->method[0] ? r->method : NULL);
	bind_text_opt(s, i++, r->path[0] ? r->path : NULL);
	bind_text_opt(s, i++, r->model[0] ? r->model : NULL);
	/* the engine's columns belong to joined rows only: other producers leave
	 * them 0; kpi-infer's own prefix cache says how much it held */
	bind_opt(s, i++, r->engine_join || r->prefix_cache ? r->cached_prompt_tokens : KPI_NULL);
	bind_opt(s, i++, r->engine_join ? r->engine_prompt_tokens : KPI_NULL);
	bind_opt(s, i++, r->engine_join ? r->prefill_steps : KPI_NULL);
	bind_text_opt(s, i++, r->engine_join);
	bind_text_opt(s, i++, r->direction);
	bind_text_opt(s, i++, r->hop_id[0] ? r->hop_id : NULL);
	bind_text_opt(s, i++, r->parent_hop_id[0] ? r->parent_hop_id : NULL);
	bind_text_opt(s, i++, r->link_rule);
	bind_opt(s, i++, r->tid ? (int64_t)r->tid : KPI_NULL);
	bind_text_opt(s, i++, r->comm[0] ? r->comm : NULL);
	bind_text_opt(s, i++, r->sock_local[0] ? r->sock_local : NULL);
	bind_text_opt(s, i++, r->sock_peer[0] ? r->sock_peer : NULL);
	bind_text_opt(s, i++, p->weight_type[0] ? p->weight_type : NULL);
	/* disaggregated prefill and decode (schema/010_disagg.sql): NULL unless
	 * pd_role is set (other producers leave the numbers 0) */
	bool pd = r->pd_role != NULL;
	int64_t pdv[] = { r->router_ns, r->kv_transfer_ns, r->decode_queue_ns, r->t_pd_admit, r->t_kv_start, r->t_kv_end,
			  r->t_pd_sched, r->kv_bytes, r->kv_blocks, r->kv_stream_ns };
	bind_text_opt(s, i++, r->pd_role);
	for (size_t k = 0; k < sizeof(pdv) / sizeof(pdv[0]); k++)
		bind_opt(s, i++, pd ? pdv[k] : KPI_NULL);
	bind_text_opt(s, i++, pd ? r->kv_status : NULL);
	bind_text_opt(s, i++, pd && r->kv_peer[0] ? r->kv_peer : NULL);
	bind_text_opt(s, i++, pd ? r->route_policy : NULL);
	bind_text_opt(s, i++, pd && r->decode_worker[0] ? r->decode_worker : NULL);
	bind_text_opt(s, i++, pd && r->prefill_worker[0] ? r->prefill_worker : NULL);
	bind_text_opt(s, i++, pd ? r->slot_wait : NULL);
	bind_opt(s, i++, pd ? r->slot_waiting_ahead : KPI_NULL);
	/* reasoning, tasks: the HTTP path's rows only (other producers leave them 0) */
	bool http = r->source && !strncmp(r->source, "http", 4);
	const int64_t reasoning[] = { r->ttfo, r->reasoning_ns, r->reasoning_events, r->answer_events, r->ttftc,
				      r->reasoning_tokens };
	for (size_t k = 0; k < sizeof(reasoning) / sizeof(reasoning[0]); k++)
		bind_opt(s, i++, http ? reasoning[k] : KPI_NULL);
	bind_text_opt(s, i++, http ? r->reasoning_shape : NULL);
	bind_text_opt(s, i++, r->conversation_id[0] ? r->conversation_id : NULL);
	bind_text_opt(s, i++, r->task_id[0] ? r->task_id : NULL);
	bind_text_opt(s, i++, p->out ? r->call_kind : NULL);
	bind_text_opt(s, i++, r->rpc_method[0] ? r->rpc_method : NULL);
	bind_text_opt(s, i++, r->tool_name[0] ? r->tool_name : NULL);
	bind_opt(s, i++, p->out ? r->retry : KPI_NULL);
	bind_opt(s, i++, p->out ? r->call_error : KPI_NULL);
	bind_text_opt(s, i++, r->escalated_from[0] ? r->escalated_from : NULL);
	/* the inferred split's step belongs to rows with a rule only */
	bind_text_opt(s, i++, r->split_rule);
	bind_opt(s, i++, r->split_rule ? r->step_ns : KPI_NULL);
	/* who the row belongs to (schema/013_containers.sql): NULL on the host */
	const struct container_info *ct = p->in_container ? &p->ct : NULL;
	bind_text_opt(s, i++, ct && ct->id[0] ? ct->id : NULL);
	bind_text_opt(s, i++, ct && ct->name[0] ? ct->name : NULL);
	bind_text_opt(s, i++, ct && ct->pod_name[0] ? ct->pod_name : NULL);
	bind_text_opt(s, i++, ct && ct->pod_namespace[0] ? ct->pod_namespace : NULL);
	bind_text_opt(s, i++, ct && ct->pod_uid[0] ? ct->pod_uid : NULL);
	bind_opt(s, i++, ct ? (int64_t)ct->cgroup_id : KPI_NULL);
	/* what carried an http row (schema/014_http2.sql) */
	bind_text_opt(s, i++, http ? r->protocol : NULL);
	bind_opt(s, i++, http && r->protocol ? r->h2_stream : KPI_NULL);
	bind_opt(s, i++, http && r->protocol ? r->grpc_status : KPI_NULL);
	if (p->out)
		bind_opt(s, i++, r->t_answered > 0 ? r->t_answered : KPI_NULL);
	if (step_done(st, s))
		return -1;
	for (size_t k = 0; k < r->n_token_writes; k++) {
		sqlite3_bind_text(st->ins_token, 1, r->request_id, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st->ins_token, 2, r->pid);
		sqlite3_bind_int64(st->ins_token, 3, (int64_t)k);
		sqlite3_bind_int64(st->ins_token, 4, (int64_t)p->tokens[k]);
		if (step_done(st, st->ins_token))
			return -1;
	}
	return 0;
}

static int write_task(struct trace_store *st, const struct kpi_task_record *k)
{
	sqlite3_stmt *s = st->ins_task;
	int i = 1;
	const int64_t v[] = { k->t_start, k->t_end, k->duration, k->model_calls, k->tool_calls, k->mcp_calls,
			      k->retries, k->errors, k->model_ns, k->tool_ns, k->agent_ns, k->success };

	sqlite3_bind_text(s, i++, k->task_id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, i++, k->pid);
	bind_text_opt(s, i++, k->comm[0] ? k->comm : NULL);
	sqlite3_bind_int64(s, i++, st->run_id);
	sqlite3_bind_int64(s, i++, k->t_start + st->mono_to_wall);
	bind_text_opt(s, i++, k->rule);
	bind_text_opt(s, i++, k->hop_id[0] ? k->hop_id : NULL);
	bind_text_opt(s, i++, k->request_id[0] ? k->request_id : NULL);
	for (size_t n = 0; n < sizeof(v) / sizeof(v[0]); n++)
		sqlite3_bind_int64(s, i++, v[n]);
	bind_opt(s, i++, k->http_status);
	return step_done(st, s);
}

static int write_step(struct trace_store *st, const struct kpi_step_record *x)
{
	sqlite3_stmt *s = st->ins_step;
	sqlite3_bind_int64(s, 1, x->pid);
	sqlite3_bind_int64(s, 2, (int64_t)x->step_id);
	sqlite3_bind_int64(s, 3, st->run_id);
	sqlite3_bind_int64(s, 4, (int64_t)x->t_start + st->mono_to_wall);
	sqlite3_bind_int64(s, 5, (int64_t)x->t_start);
	sqlite3_bind_int64(s, 6, (int64_t)x->t_end);
	sqlite3_bind_int(s, 7, x->prefill_tokens);
	sqlite3_bind_int(s, 8, x->decode_seqs);
	sqlite3_bind_int(s, 9, x->kv_used);
	sqlite3_bind_int(s, 10, x->kv_free);
	bind_text_opt(s, 11, x->source);
	return step_done(st, s);
}

static int write_sample(struct trace_store *st, const struct kpi_sample_record *x)
{
	sqlite3_stmt *s = st->ins_sample;
	sqlite3_bind_int64(s, 1, x->pid);
	sqlite3_bind_int64(s, 2, st->run_id);
	sqlite3_bind_int64(s, 3, (int64_t)x->t + st->mono_to_wall);
	sqlite3_bind_int64(s, 4, (int64_t)x->t);
	sqlite3_bind_int(s, 5, x->queue_depth);
	sqlite3_bind_int(s, 6, x->running);
	bind_opt(s, 7, x->kv_used);
	bind_opt(s, 8, x->kv_free);
	if (x->kv_usage >= 0)
		sqlite3_bind_double(s, 9, x->kv_usage);
	else
		sqlite3_bind_null(s, 9);
	sqlite3_bind_double(s, 10, x->requests_per_s);
	sqlite3_bind_double(s, 11, x->output_tokens_per_s);
	sqlite3_bind_int(s, 12, x->preemptions);
	sqlite3_bind_int(s, 13, x->rejections);
	sqlite3_bind_int(s, 14, x->errors);
	sqlite3_bind_int64(s, 15, (int64_t)x->drops);
	sqlite3_bind_int64(s, 16, (int64_t)x->runq_ns);
	sqlite3_bind_int64(s, 17, (int64_t)x->runq_self_ns);
	if (step_done(st, s))
		return -1;
	s = st->ins_runq_by;
	for (int i = 0; i < x->n_runq_by; i++) {
		const struct kpi_runq_by *b = &x->runq_by[i];
		sqlite3_bind_int64(s, 1, x->pid);
		sqlite3_bind_int64(s, 2, st->run_id);
		sqlite3_bind_int64(s, 3, (int64_t)x->t + st->mono_to_wall);
		sqlite3_bind_int64(s, 4, (int64_t)x->t);
		if (b->pid != KPI_RUNQ_BY_REST) {
			sqlite3_bind_int64(s, 5, b->pid);
			sqlite3_bind_text(s, 6, b->comm, -1, SQLITE_STATIC);
		}
		sqlite3_bind_int64(s, 7, (int64_t)b->ns);
		if (step_done(st, s))
			return -1;
	}
	return 0;
}

struct inflight_ctx {
	struct trace_store *st;
	uint64_t now;
	int rc;
};

static void write_inflight(void *ctx, const struct kpi_inflight_record *r)
{
	struct inflight_ctx *c = ctx;
	sqlite3_stmt *s = c->st->ins_inflight;

	if (c->rc)
		return;
	sqlite3_bind_text(s, 1, r->request_id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, r->pid);
	sqlite3_bind_text(s, 3, r->state, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 4, r->t_arrive);
	bind_opt(s, 5, r->t_admit);
	bind_opt(s, 6, r->t_sched);
	bind_opt(s, 7, r->t_first);
	bind_opt(s, 8, r->prompt_tokens);
	sqlite3_bind_int(s, 9, r->output_writes);
	sqlite3_bind_int64(s, 10, (int64_t)c->now);
	c->rc = step_done(c->st, s);
}

static int set_meta(struct trace_store *st, const char *key, int64_t v)
{
	sqlite3_bind_text(st->set_meta, 1, key, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st->set_meta, 2, v);
	return step_done(st, st->set_meta);
}

/* meta loss_<cause>_total for every cause, zeros included: a trace that says
 * 0 was watched for that loss. */
static int set_loss_meta(struct trace_store *st)
{
	char key[64];

	for (int c = 0; c < KPI_LOSS__COUNT; c++) {
		snprintf(key, sizeof(key), "loss_%s_total", kpi_loss_name(c));
		if (set_meta(st, key, (int64_t)st->loss_seen.total[c]))
			return -1;
	}
	return 0;
}

static int write_loss(struct trace_store *st, const struct pending_loss *l)
{
	sqlite3_stmt *s = st->ins_loss;

	sqlite3_bind_int64(s, 1, st->run_id);
	sqlite3_bind_int64(s, 2, (int64_t)l->t + st->mono_to_wall);
	sqlite3_bind_int64(s, 3, (int64_t)l->t);
	sqlite3_bind_text(s, 4, kpi_loss_name(l->cause), -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 5, (int64_t)l->n);
	return step_done(st, s);
}

static void drop_pending(struct trace_store *st)
{
	struct pending_req *p = st->reqs.p;
	for (size_t i = 0; i < st->reqs.n; i++)
		free(p[i].tokens);
	st->reqs.n = st->steps.n = st->samples.n = st->losses.n = st->tasks.n = 0;
}

/* A retention round after a flush; its failure is said once a minute and
 * leaves the trace as it was (the writer goes on). */
static void retain(struct trace_store *st, uint64_t now_mono)
{
	char err[256];

	if (!retain_round(&st->ret, (int64_t)now_mono + st->mono_to_wall, err, sizeof(err)))
		return;
	if (!st->last_retain_err || now_mono - st->last_retain_err >= 60000000000ull) {
		fprintf(stderr, "kpi-agent: %s\n", err);
		st->last_retain_err = now_mono;
	}
}

void trace_store_set_retention(struct trace_store *st, int64_t keep_ns, int64_t max_bytes)
{
	st->ret.keep_ns = keep_ns;
	st->ret.max_bytes = max_bytes;
}

uint64_t trace_store_retained(const struct trace_store *st)
{
	return st->ret.removed;
}

uint64_t trace_store_unshipped(const struct trace_store *st)
{
	return st->ret.unshipped;
}

int trace_store_flush(struct trace_store *st, const struct kpi_inflight_view *live,
		      uint64_t now_mono, uint64_t drops, char *err, size_t errlen)
{
	struct inflight_ctx ic = { st, now_mono, 0 };
	const char *what = "BEGIN";

	if (sqlite3_exec(st->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
		goto fail;
	what = "insert into requests";
	for (size_t i = 0; i < st->reqs.n; i++)
		if (write_request(st, (struct pending_req *)st->reqs.p + i))
			goto fail;
	what = "insert into tasks";
	for (size_t i = 0; i < st->tasks.n; i++)
		if (write_task(st, (struct kpi_task_record *)st->tasks.p + i))
			goto fail;
	what = "insert into steps";
	for (size_t i = 0; i < st->steps.n; i++)
		if (write_step(st, (struct kpi_step_record *)st->steps.p + i))
			goto fail;
	what = "insert into samples";
	for (size_t i = 0; i < st->samples.n; i++)
		if (write_sample(st, (struct kpi_sample_record *)st->samples.p + i))
			goto fail;
	what = "insert into losses";
	for (size_t i = 0; i < st->losses.n; i++)
		if (write_loss(st, (struct pending_loss *)st->losses.p + i))
			goto fail;
	what = "rewrite inflight";
	if (step_done(st, st->del_inflight))
		goto fail;
	if (live)
		live->each(live->ctx, write_inflight, &ic);
	if (ic.rc)
		goto fail;
	what = "update meta";
	if (live && set_meta(st, "before_attach_arrivals", (int64_t)live->before_attach))
		goto fail;
	if (set_meta(st, "last_flush_ns", (int64_t)now_mono) ||
	    set_meta(st, "last_flush_wall_ns", (int64_t)now_mono + st->mono_to_wall) ||
	    set_meta(st, "drops_total", (int64_t)drops) || set_meta(st, "run_id", st->run_id) ||
	    set_meta(st, "shed_requests_total", (int64_t)st->shed_reqs) ||
	    set_meta(st, "shed_rows_total", (int64_t)st->shed_rows) || set_loss_meta(st))
		goto fail;
	what = "COMMIT";
	if (sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
		goto fail;
	drop_pending(st);
	retain(st, now_mono);
	return 0;
fail:
	fail(err, errlen, "writing the trace failed (%s: %s); %zu rows kept in memory for the next "
	     "flush (at most %zu requests; %llu shed so far)%s", what, sqlite3_errmsg(st->db),
	     st->reqs.n + st->steps.n + st->samples.n, st->max_backlog,
	     (unsigned long long)st->shed_reqs,
	     sqlite3_errcode(st->db) == SQLITE_FULL ? ": the disk is full, free space there" :
	     sqlite3_errcode(st->db) == SQLITE_READONLY || sqlite3_errcode(st->db) == SQLITE_CANTOPEN ||
	     sqlite3_errcode(st->db) == SQLITE_PERM ? ": make the database writable" : "");
	sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
	return -1;
}

void trace_store_close(struct trace_store *st)
{
	sqlite3_stmt **stmts[] = { &st->ins_req, &st->ins_out, &st->ins_step, &st->ins_sample, &st->ins_runq_by,
				   &st->ins_token, &st->ins_inflight, &st->del_inflight, &st->set_meta,
				   &st->ins_loss, &st->ins_task };

	if (!st)
		return;
	if (st->db && st->run_id) {
		struct timespec now;
		char sql[160];
		clock_gettime(CLOCK_REALTIME, &now);
		snprintf(sql, sizeof(sql), "DELETE FROM inflight; UPDATE agent_runs SET ended_wall_ns = %lld "
			 "WHERE run_id = %lld", (long long)now.tv_sec * 1000000000LL + now.tv_nsec,
			 (long long)st->run_id);
		sqlite3_exec(st->db, sql, NULL, NULL, NULL);
	}
	for (size_t i = 0; i < sizeof(stmts) / sizeof(stmts[0]); i++)
		sqlite3_finalize(*stmts[i]);
	if (st->db)
		sqlite3_close(st->db);
	drop_pending(st);
	free(st->reqs.p);
	free(st->steps.p);
	free(st->samples.p);
	free(st->losses.p);
	free(st->tasks.p);
	free(st);
}
