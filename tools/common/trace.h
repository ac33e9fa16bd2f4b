/* trace.h - the one reader layer over kpi-agent's SQLite trace store, shared
 * by kpitop and kpi-report: read-only open, schema check, window queries
 * (their durations and instants are read and printed by timefmt.h). */
#ifndef KPI_TRACE_H
#define KPI_TRACE_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "schema/trace_path.h"
#include "tools/common/timefmt.h"

/* Schema versions this reader accepts: 2 (schema/002_gpu.sql) only adds GPU
 * tables and columns that the readers do not need; 3 (003_runq_by.sql) adds
 * what the daemon's threads waited behind, read where the trace has it; 5
 * (005_cost.sql) cost and energy, read where the trace has them; 6
 * (006_http.sql) each request's source and, for requests traced from the
 * HTTP exchange, the server's wait (queue and prefill together); 7
 * (007_llama.sql) a llama.cpp engine's split of such requests, read as the
 * usdt rows' (the source is not 'http'), and its prefix-cache reuse
 * (trace_reuse.h); 8 (008_hops.sql) the hops of a request across processes,
 * which the readers read where the trace has them; 9 (009_weight_type.sql)
 * the weight type of the model that served each request (trace_weights);
 * 10 (010_disagg.sql) disaggregated requests (below); 11 (011_tasks.sql)
 * reasoning per request (TTFO), agent tasks and cascades (trace_agents.h);
 * 12 (012_split.sql) the split of http rows inferred from stream timing
 * (split_rule), read as a source of its own (TRACE_SRC_INFERRED); 13
 * (013_containers.sql) the container and pod of each row, not read yet; 14
 * (014_http2.sql) the protocol of http rows (HTTP/2, gRPC), not read yet. */
#define TRACE_SCHEMA_VERSION_MIN 1
#define TRACE_SCHEMA_VERSION 14
/* Version 10 (010_disagg.sql): a disaggregated request's router row has its
 * phases across the router, decode and prefill workers; the workers' own
 * rows hang under it (parent_hop_id).  The window statistics, timelines and
 * request lists count the request once, by its router's row: this is the
 * condition they add. */
#define TRACE_TOP_EXPR "(pd_role IS NULL OR parent_hop_id IS NULL)"
#define TRACE_TOP_SQL " AND " TRACE_TOP_EXPR
/* Where kpi-agent writes unless told otherwise (its --db flag). */
#define TRACE_DEFAULT_DB KPI_TRACE_DEFAULT_DB

#define TRACE_RUNQ_BY_MAX 3
/* Loss causes a window lists by name (the agent has 12, agent/record.h's
 * enum kpi_loss; tests/unit/test_tools_trace.c fails when it has more than
 * this). Every loss counts in a window's total whatever the list holds. */
#define TRACE_LOSS_MAX 24

struct trace;

/* The same condition for the readers of other modules: TRACE_TOP_SQL where
 * the store has disaggregated rows (requests.pd_role), "" where it has none. */
const char *trace_top_sql(const struct trace *t);

/* ---- phases and metrics -------------------------------------------------- */
enum trace_phase { PH_NET_IN, PH_QUEUE, PH_PREFILL, PH_DECODE, PH_NET_OUT, PH_N };
extern const char *const trace_phase_name[PH_N];   /* "net-in", "queue", ... */

enum trace_metric {
	TM_TTFT, TM_TPOT, TM_ITL, TM_E2E,
	TM_NET_IN, TM_QUEUE, TM_PREFILL, TM_DECODE, TM_NET_OUT, TM_RUNQ,
	TM_SERVER_WAIT,             /* http rows: queue and prefill together */
	TM_TTFO,                    /* http rows: time to the first answer event, reasoning
				     * not counted (schema version 11) */
	/* a disaggregated request's own phases (schema version 10: router_ns,
	 * kv_transfer_ns, decode_queue_ns): the routing decision to the decode
	 * worker's admission, the KV transfer the client waited for, the wait
	 * for a decode slot once the KV was in */
	TM_ROUTER, TM_KV_TRANSFER, TM_DECODE_QUEUE,
	TM_N
};
extern const char *const trace_metric_name[TM_N];  /* "TTFT", "TPOT", ... */

/* Which path of the agent made a request's row (requests.source, schema
 * version 6; older rows and traces: usdt), and where its split came from. An
 * http row knows no engine split: its queue and prefill are unknown, its
 * server wait is known; unless (schema version 12) the agent inferred them
 * from the server's stream timing (requests.split_rule): TRACE_SRC_INFERRED,
 * queue and prefill known as the engine-probed rows' are, marked inferred. */
enum trace_source { TRACE_SRC_USDT, TRACE_SRC_HTTP, TRACE_SRC_LIBLLAMA, TRACE_SRC_INFERRED,
		    TRACE_SRC_N };
/* "usdt", "http", "http+libllama", "http (split inferred)" */
extern const char *const trace_source_name[TRACE_SRC_N];
/* The source column's code in the statements: 0 usdt, 1 http, 2
 * http+libllama, 3 http with an inferred split (_SPLIT: a store that has
 * requests.split_rule). */
#define TRACE_SRC_SQL "CASE source WHEN 'http' THEN 1 WHEN 'http+libllama' THEN 2 ELSE 0 END"
#define TRACE_SRC_SQL_SPLIT "CASE source WHEN 'http' THEN 1 + 2 * (split_rule IS NOT NULL) " \
	"WHEN 'http+libllama' THEN 2 ELSE 0 END"
static inline enum trace_source trace_source_of(int code)
{
	return code == 1 ? TRACE_SRC_HTTP : code == 2 ? TRACE_SRC_LIBLLAMA :
	       code == 3 ? TRACE_SRC_INFERRED : TRACE_SRC_USDT;
}
/* Rows whose queue and prefill are known: measured (usdt, http+libllama)
 * or inferred. */
static inline bool trace_source_split(enum trace_source s)
{
	return s != TRACE_SRC_HTTP;
}

/* Percentiles (ns) over the requests of a window that have the value.
 * ITL: p50 over each request's median gap, p95/p99 over each request's p99
 * gap, max over each request's largest gap. */
struct trace_dist {
	int n;
	double p50, p95, p99, max, mean;
};

/* Everything a window [from_ns, to_ns) of the monotonic clock holds. Requests
 * belong to the window they arrived in. Samples and rates: see
 * trace_window_stats. */
struct trace_window {
	int64_t from_ns, to_ns;
	int requests;               /* rows that arrived in the window */
	int done;                   /* ... that finished with an e2e time */
	int rejected;               /* HTTP 429 */
	int errors;                 /* other 4xx/5xx, or finish_reason error */
	int cancelled;
	int preempted;              /* requests preempted at least once */
	int by_source[TRACE_SRC_N]; /* rows that arrived in the window, by source */
	int64_t prompt_tokens, output_tokens;
	double req_per_s, out_tok_per_s;
	struct trace_dist m[TM_N];
	struct trace_dist itl_max;  /* of each request's largest inter-token gap */
	/* mean over requests of run-queue delay / e2e: how many of the daemon's
	 * threads waited for a CPU, on average, while the request was in flight */
	double runq_share;
	/* phases of the median and of the p99 request by e2e (nearest row),
	 * -1 where the row does not know them, and their server wait (-1: a
	 * row with the engine's split) */
	int64_t phase_p50[PH_N], phase_p99[PH_N];
	int64_t wait_p50, wait_p99;
	int64_t e2e_p50_row, e2e_p99_row;
	bool inferred_p50, inferred_p99;    /* their queue and prefill were inferred (TSR_INFERRED) */
	int64_t served_to_ns;       /* when the last of those requests finished (0: none) */
	/* from samples in [from_ns, samples_to_ns) */
	int64_t samples_to_ns;
	int samples;
	int queue_depth, running;   /* latest, summed over targets */
	double kv_usage;            /* latest, max over targets; -1: unknown */
	int queue_depth_max, running_max;
	double kv_usage_max;
	int64_t preemptions, rejections, sample_errors, drops, runq_ns;
	/* of runq_ns: the part behind the daemon's own threads (-1: the trace
	 * does not say, written before schema version 3), and the processes
	 * behind which most of the rest was spent, largest first (pid 0: an
	 * idle CPU the thread moved to) */
	int64_t runq_self_ns;
	struct trace_runq_by {
		int pid;
		char comm[16];
		int64_t ns;
	} runq_by[TRACE_RUNQ_BY_MAX];
	int n_runq_by;
	/* what the agent lost in the window (samples' times), all causes, and
	 * by cause, largest first (schema version 4; lost -1 before: the trace
	 * does not say); causes past the list (none while the agent has no
	 * more than TRACE_LOSS_MAX) are in lost and n_loss_more; outbound calls
	 * no link rule could tie to the request they served (hops_unlinked) are
	 * missing evidence, not lost data: counted apart, in unlinked, and in
	 * neither of the others */
	int64_t lost, unlinked;
	struct trace_loss {
		char cause[24];
		int64_t n;
	} loss[TRACE_LOSS_MAX];
	int n_loss, n_loss_more;
};

/* One bucket of a timeline. */
struct trace_point {
	int64_t t_ns;               /* bucket start */
	int n;                      /* requests that arrived in it */
	double ttft_p99, e2e_p99;   /* ns, 0 when n == 0 */
	int samples;
	int queue_depth_max, running_max;
	double kv_usage_max;        /* -1: unknown */
	int64_t preemptions, rejections, drops, runq_ns;
};

enum trace_req_state {
	TRS_ARRIVING, TRS_QUEUED, TRS_PREFILL, TRS_DECODE, TRS_WRITING,
	TRS_DONE, TRS_REJECTED, TRS_ERROR, TRS_CANCELLED, TRS_N
};
extern const char *const trace_state_name[TRS_N];

/* One request as a panel or a waterfall shows it; times in ns, -1 unknown. */
struct trace_req {
	char id[64];
	int pid;
	enum trace_req_state state;
	int64_t t_arrive_ns, age_ns;
	int prompt_tokens, output_tokens, http_status, preemptions;
	int64_t ttft_ns, tpot_ns, e2e_ns, runq_ns, itl_max_ns;
	int64_t phase[PH_N];
	enum trace_source source;
	int64_t server_wait_ns;     /* http rows: between net-in and decode */
	int64_t ttfo_ns;            /* http rows: time to the first answer event (version 11) */
};

/* What the window statistics and timelines read of one request (a row of
 * `requests`), for readers that keep a window's rows between frames. */
#define TRACE_NULL INT64_MIN        /* the row has no value */
enum {
	TSR_ERROR = 1,              /* finish_reason error */
	TSR_CANCELLED = 2,
	TSR_PREEMPTED = 4,          /* preempted at least once */
	TSR_HTTP = 8,               /* source http: no engine split */
	TSR_LIBLLAMA = 16,          /* source http+libllama: the engine's split from libllama */
	TSR_INFERRED = 32,          /* source http, queue and prefill inferred (split_rule) */
};
struct trace_stat_row {
	int64_t t_arrive_ns, t_done_ns;
	int64_t m[TM_N];            /* by enum trace_metric; ITL: the request's median gap */
	int64_t itl_p99_ns, itl_max_ns;
	int64_t prompt_tokens, output_tokens;   /* 0: unknown */
	int http_status;            /* 0: none */
	int flags;                  /* TSR_* */
};
/* A growable array of them, owned by the caller. */
struct trace_stat_rows {
	struct trace_stat_row *v;
	size_t n, cap;
};
void trace_stat_rows_free(struct trace_stat_rows *r);

/* ---- opening ------------------------------------------------------------- */
/* Opens path read-only (WAL readers never block the agent) and checks the
 * schema version. On failure returns NULL and writes a message that says
 * what to do into err. */
struct trace *trace_open(const char *path, char *err, size_t errlen);
void trace_close(struct trace *t);

/* The monotonic span that holds data (requests, samples, in-flight), and
 * refreshes it (the agent keeps writing). Returns 0 when the store is empty. */
int trace_span(struct trace *t, int64_t *first_ns, int64_t *last_ns);

/* Wall clock <-> trace monotonic clock, by the latest agent run's offset. */
int64_t trace_mono_to_wall(const struct trace *t, int64_t mono_ns);
int64_t trace_wall_to_mono(const struct trace *t, int64_t wall_ns);

/* Runs the queries up to trace_read_end on one snapshot of the store, as
 * the agent keeps writing: what a frame reads from several tables agrees. */
int trace_read_begin(struct trace *t);
int trace_read_end(struct trace *t);

/* ---- queries ------------------------------------------------------------- */
/* The requests that arrived in [from_ns, to_ns) and the agent's samples.
 * Live views (while_served false) take the samples inside the window and
 * their rates (completions per second), falling back to the requests' when
 * there are none.  A report on what those requests went through (while_served
 * true) takes the samples on until the last of them finished (and the one
 * after, which covers the second before it: a burst that arrived in a short
 * window queues after it), and rates from the requests themselves. */
int trace_window_stats(struct trace *t, int64_t from_ns, int64_t to_ns, bool while_served,
		       struct trace_window *w);

/* The same from request rows the caller holds (any order; rows arriving
 * outside [from_ns, to_ns) are skipped); samples are read from the store. */
int trace_window_from_rows(struct trace *t, const struct trace_stat_row *rows, size_t n, int64_t from_ns,
			   int64_t to_ns, bool while_served, struct trace_window *w);

/* The other process behind which w's threads waited longest, when it held
 * them longer than the daemon's own threads did; NULL otherwise, and when
 * the trace does not say (before schema version 3). */
const struct trace_runq_by *trace_runq_culprit(const struct trace_window *w);

/* nb buckets over [from_ns, to_ns). Returns 0 or -1. */
int trace_series(struct trace *t, int64_t from_ns, int64_t to_ns, int nb, struct trace_point *out);
/* The same from request rows the caller holds, as trace_window_from_rows. */
int trace_series_from_rows(struct trace *t, const struct trace_stat_row *rows, size_t n, int64_t from_ns,
			   int64_t to_ns, int nb, struct trace_point *out);

/* Requests in flight at now_ns: from the agent's inflight table when live,
 * else rebuilt from finished rows (replay). Returns the count. */
int trace_inflight(struct trace *t, int64_t now_ns, int live, struct trace_req *out, int max);
/* Finished (or rejected) requests that arrived before to_ns, newest first. */
int trace_recent(struct trace *t, int64_t to_ns, struct trace_req *out, int max);
/* The slowest requests of a window by e2e (or TTFT when e2e is unknown). */
int trace_slowest(struct trace *t, int64_t from_ns, int64_t to_ns, struct trace_req *out, int max);

/* Appends to out the rows arriving in [from_ns, to_ns); _since only those
 * the agent wrote after row after_rowid (rows are only ever added: a new
 * row's rowid is larger than every earlier one's). Returns 0 or -1. */
int trace_stat_rows_fetch(struct trace *t, int64_t from_ns, int64_t to_ns, struct trace_stat_rows *out);
int trace_stat_rows_since(struct trace *t, int64_t after_rowid, int64_t from_ns, int64_t to_ns,
			  struct trace_stat_rows *out);
/* The rowid of the newest row of `requests` (0: none). */
int64_t trace_last_rowid(struct trace *t);

/* Rows of one column for requests arriving in [from, to) that have it,
 * with their arrival times; the arrays are owned by t and valid until the
 * next call. Used by analyses that need raw rows (baseline search). */
/* The requests served by one weight type of model (requests.weight_type,
 * schema version 9: "F16", "Q4_K", ...): the first arrival and last
 * completion among them, and the window statistics of those requests alone
 * (rates over that span). Runs of one model at several quantizations, traced
 * into one store, set side by side. */
#define TRACE_WEIGHTS_MAX 6
struct trace_weight {
	char type[32];
	int64_t from_ns, to_ns;
	struct trace_window w;
};
/* Up to max weight types in order of their first request; 0 when the trace
 * predates version 9 or names none, -1 when the store fails. */
int trace_weights(struct trace *t, struct trace_weight *out, int max);

int trace_column(struct trace *t, const char *column, int64_t from_ns, int64_t to_ns,
		 const int64_t **t_arrive, const int64_t **values);

/* Finished requests of [from, to) with their phases (for attribution); the
 * array is owned by t and valid until the next call. Returns the count or -1. */
struct trace_row {
	int64_t t_arrive_ns, ttft_ns, e2e_ns;
	int64_t phase[PH_N];        /* unknown phases are 0 */
	enum trace_source source;
	int64_t server_wait_ns;     /* http rows (0 on others): queue and prefill together */
};
int trace_rows(struct trace *t, int64_t from_ns, int64_t to_ns, const struct trace_row **rows);

/* Steps in [from, to): count, those with prefill tokens >= min_prefill and
 * their summed duration, and the longest step. */
struct trace_steps {
	int64_t steps, prefill_steps, long_prefill_steps;
	int64_t long_prefill_ns, max_step_ns, max_prefill_tokens;
	double busy_frac;           /* summed step time / window */
};
int trace_step_stats(struct trace *t, int64_t from_ns, int64_t to_ns, int min_prefill, struct trace_steps *s);

/* The last error message of the store (sqlite's), for a failed query. */
const char *trace_errmsg(const struct trace *t);
/* The store has the requests' engine prompt counts (schema version 7). */
bool trace_has_prompt_reuse(const struct trace *t);
/* The store says which path made each request's row (requests.source,
 * schema version 6). */
bool trace_has_source(const struct trace *t);
const char *trace_path(const struct trace *t);

/* ---- time ---------------------------------------------------------------- */
/* A point in the trace, as monotonic ns: any form timefmt_parse_point takes,
 * "-90s" before the end of the trace, "+30s" after its start, "10:31:00" on
 * the day the trace ends. Returns 0 or -1 with a message. */
int trace_parse_time(struct trace *t, const char *s, int64_t *mono_ns, char *err, size_t errlen);

/* Local "HH:MM:SS" (with_date: "YYYY-MM-DD HH:MM:SS") of a trace instant. */
char *trace_fmt_time(const struct trace *t, char *buf, size_t n, int64_t mono_ns, int with_date);

#endif
