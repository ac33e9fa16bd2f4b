/* bench.h - what kpi-bench's parts share: the run configuration, one
 * result record per measured request, and each part's entry points: the
 * arrival schedule (sched.c), recorded traffic (replay.c), the client
 * (client.c), the reports (report.c), the steady-state rule (steady.c), the
 * sweep (sweep.c) and its page (html.c). */
#ifndef KPI_BENCH_BENCH_H
#define KPI_BENCH_BENCH_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>

#include "tools/kpi-bench/dist.h"

enum mode { MODE_CONCURRENCY, MODE_RATE, MODE_BURST, MODE_REPLAY };
enum sweep_kind { SWEEP_NONE, SWEEP_RATE, SWEEP_CONCURRENCY };

#define SWEEP_MAX_STEPS 64
/* A sweep point's length unless --requests or --duration says otherwise, and
 * the requests it sends at least (docs/bench.md, "How long a point runs"). */
#define SWEEP_POINT_S 10.0
#define SWEEP_MIN_REQUESTS 100
/* Confirmations of the answer that may each send the search lower. */
#define SWEEP_MAX_CONFIRMS 8

/* Recorded traffic (--replay): one row per request, sorted by offset. */
struct replay {
	double *offset_s;       /* since the recording's first request */
	long *prompt_len, *output_len;
	size_t n;
	long skipped;           /* rows without an offset or lengths */
	const char *offset_col; /* the column the offsets came from */
};
enum endpoint { EP_COMPLETIONS, EP_CHAT };

struct config {
	char url[512];
	char host[256], port[16], path[256];
	enum endpoint endpoint;
	char model[128];
	long requests;          /* 0 = until --duration */
	double duration;        /* s; 0 = until --requests */
	long min_requests;      /* a --duration run keeps sending until this many (sweep points) */
	enum mode mode;
	long concurrency;
	double rate;            /* requests/s, Poisson (or gamma) arrivals */
	double burstiness;      /* gamma shape of the gaps; 1 = Poisson */
	struct replay replay;   /* MODE_REPLAY: its rows set each request */
	double replay_speed;    /* offsets are divided by this */
	struct dist prompt_len, max_tokens;
	bool ignore_eos, stream, token_ids;
	double temperature;     /* -1 = the server's default */
	long id_lo, id_hi;      /* --token-ids range */
	double slo_ttft, slo_tpot, slo_e2e;   /* ms; 0 = no SLO */
	unsigned long long seed;
	long warmup;
	double timeout;         /* s per request */
	/* --baseline OLD.json, once per run of the old build (baseline.c) */
#define BASELINE_MAX 16
	const char *baseline_path[BASELINE_MAX];
	int n_baselines;
	double max_regress_pct;         /* --max-regress */
	const char *json_path, *csv_path;
	bool quiet;
	/* --sweep: a series of runs, one per load */
	enum sweep_kind sweep;
	double sweep_steps[SWEEP_MAX_STEPS];   /* given loads; none: doubling */
	int n_sweep_steps;
	double sweep_start, sweep_max;         /* the doubling ladder's ends */
	double sweep_precision;                /* bisection stops at bad/good - 1 <= this */
	long knee_repeats;
	double confirm_s;                      /* --confirm-duration: a confirmation's least length */
	double slo_share;                      /* of requests that must meet the SLO */
	const char *html_path, *trace_db;
	/* a sweep's confirmation: stop once more requests missed the SLO than
	 * --slo-share allows of all the run can send (client.c, miss_limit) */
	bool stop_when_missed;
};

/* One measured request. Times are milliseconds; -1 means not defined
 * (no response, or TPOT of a single-token answer). */
struct result {
	long idx;
	int status;             /* HTTP status; 0 = none received */
	const char *error;      /* NULL when the request succeeded */
	char request_id[80];
	long prompt_len, max_tokens;      /* what was asked */
	long prompt_tokens, completion_tokens;   /* from usage; -1 unknown */
	long chunks;            /* SSE chunks with non-empty choices */
	double t_sent;          /* ms since the measured run started */
	double t_due;           /* ms since the measured run started: when the schedule
	                         * wanted it sent (t_sent - t_due: the client's lateness) */
	double connect;         /* ms from start to sent: connecting, when not kept alive */
	double ttft, tpot, e2e, itl_max;
	bool slo_met;
};

struct run {
	struct result *res;
	size_t n_res, cap_res;
	double *itl;            /* every inter-token gap of every request, ms */
	size_t n_itl, cap_itl;
	double wall_s;          /* first request sent .. last one finished */
	double t0, t_end;       /* the same instants, bench_mono() seconds */
	long in_flight_dropped; /* requests abandoned by Ctrl-C or a stop on misses */
	bool interrupted;
	/* stop_when_missed: the most requests the run can send (its --requests,
	 * or the arrivals its seeded schedule has due within --duration, at
	 * least --min-requests), the misses it allows of those, and the misses
	 * so far; stopped once missed > miss_limit: it cannot meet the SLO */
	long most_sent, miss_limit, missed;
	bool stopped_missed;
	char first_err[32][160];  /* first error body per distinct error key */
	char err_key[32][24];
	long err_count[32];
	int n_err_keys;
};

/* Seconds on the monotonic clock: every instant kpi-bench measures. */
static inline double bench_mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- arrivals (sched.c) -------------------------------------------------- */

/* Where the run stands. The scheduler counts the requests it lets start;
 * the client tells it when one finishes (sched_finished). */
struct sched {
	const struct config *cfg;
	long in_flight;         /* started, not finished; warm-up included */
	long issued, done;      /* measured requests */
	long warm_issued, warm_done;
	bool measuring;         /* the warm-up is over */
	double t0, t_end;       /* measured run start; last measured request finished */
	double next_arrival;    /* --rate: when the next request is due */
	struct rng arrivals;
};

struct buf;

void sched_init(struct sched *S, const struct config *cfg);
/* Whether a request may start at *now; if so it is counted as started,
 * *idx is its index (negative for warm-up), *warm says which, *now is its
 * start time and *due when the schedule wanted it (an open-loop arrival's
 * instant; *now for the closed loop and bursts). Call until false, then
 * sched_wait with the same *now. */
bool sched_next(struct sched *S, double *now, double *due, long *idx, bool *warm);
/* Seconds until the next arrival is due, or -1 when only a finishing
 * request can let another start. */
double sched_wait(struct sched *S, double now);
void sched_finished(struct sched *S, bool warm, double now);
/* The measured run is over: nothing in flight and nothing more may start. */
bool sched_over(struct sched *S);
/* The most measured requests the run can send: --requests, or for --rate
 * with --duration the arrivals its seeded schedule has due before the
 * duration ends (at least --min-requests); -1 when nothing bounds it. */
long sched_most_sent(const struct sched *S);
double sched_wall_s(const struct sched *S);
/* Request idx's plan: its lengths and the whole HTTP request, into out. */
int sched_build_request(const struct config *cfg, long idx, long *prompt_len, long *max_tokens,
			struct buf *out);
void sched_progress(const struct sched *S, const struct run *run, double now, bool tty, bool final);

/* ---- recorded traffic (replay.c) ------------------------------------------ */

/* Reads a CSV with a header: kpi-bench's --csv, a `requests` export of a
 * trace, or offset_ms,prompt_len,output_len. On error returns -1 with a
 * message that names the file and what to fix in err. */
int replay_load(struct replay *rp, const char *path, char *err, size_t errlen);
void replay_free(struct replay *rp);

/* ---- the client (client.c) ----------------------------------------------- */

struct client;

/* Resolves --url and sets up the epoll loop; NULL (after saying why) when
 * that fails. */
struct client *client_open(const struct config *cfg, struct run *run);
/* Runs the whole workload into run; returns early, with run->interrupted,
 * once *stop is set. -1 when the event loop itself fails. */
int client_run(struct client *C, volatile sig_atomic_t *stop);
void client_close(struct client *C);
/* open, run, close: one measured run of cfg into run. -1 (said why) when
 * the server cannot be resolved or the event loop fails. */
int client_measure(const struct config *cfg, struct run *run, volatile sig_atomic_t *stop);

/* ---- reports (report.c) -------------------------------------------------- */

/* The percentiles the gate compares carry a 95% interval from the run's own
 * values (schema/pct.h pct_ci_ranks; NAN where n cannot bound one). */
enum { CI_P50, CI_P90, CI_P99, N_CI };
extern const double report_ci_pct[N_CI];    /* 50, 90, 99 */
#define REPORT_CI_LEVEL 0.95
struct report_stat {
	size_t n;
	double mean, p50, p90, p95, p99, max;
	double ci_lo[N_CI], ci_hi[N_CI];
};

enum { M_TTFT, M_TPOT, M_ITL, M_E2E, N_METRICS };

/* A p99 send lateness above this is said: the run did not offer the load asked. */
#define LATE_WARN_MS 1.0

struct report_summary {
	long sent, ok, failed, slo_met;
	long prompt_tokens, completion_tokens;
	struct report_stat m[N_METRICS];
	struct report_stat late; /* t_sent - t_due, ms: how far the client fell behind its schedule */
	double req_s, out_tok_s, total_tok_s, goodput;
	double in_flight_mean;  /* mean requests in flight: summed e2e / run time */
};

void report_summarize(const struct run *run, struct report_summary *s);
bool report_have_slo(const struct config *cfg);
void report_slo_text(const struct config *cfg, char *out, size_t len);
void report_count_error(struct run *run, const char *key, const char *detail);
void report_apply_slo(const struct config *cfg, struct run *run);
bool report_meets_slo(const struct config *cfg, const struct result *r);
void report_text(FILE *f, const struct config *cfg, struct run *run);
int report_json(const char *path, const struct config *cfg, struct run *run);
/* Writes root (and drops it) to path, "-" for stdout; -1 after saying why. */
struct json_t;
int report_dump_json(struct json_t *root, const char *path);
int report_csv(const char *path, const struct run *run);

/* ---- the regression gate (baseline.c) ------------------------------------ */
/* This run against cfg->baseline_path (kpi-bench --json files): the table of what
 * moved to out; 1 when a figure is worse past the thresholds, 0 when none
 * is, -1 (said why) when the baseline cannot be read. */
int baseline_compare(const struct config *cfg, struct run *run, FILE *out);
#define EXIT_REGRESSION 3

/* ---- steady state (steady.c) ---------------------------------------------- */

/* A run sustained its load when the server answered at the rate the
 * requests were sent (within STEADY_KEEP_UP) and TTFT did not climb across
 * it: the median TTFT of the requests sent in its last third exceeds the
 * first third's by no more than STEADY_TREND_SHARE of it or
 * STEADY_TREND_SLO_SHARE of the TTFT bound (e2e when none), whichever is
 * larger (at least STEADY_TREND_MIN_MS), or by no more than
 * STEADY_TREND_SIGMAS standard errors (from the thirds' spreads). */
#define STEADY_KEEP_UP 0.95
#define STEADY_TREND_SHARE 0.5
#define STEADY_TREND_SLO_SHARE 0.1
#define STEADY_TREND_MIN_MS 1.0
#define STEADY_TREND_SIGMAS 3.0
#define STEADY_MIN_THIRD 10     /* fewer answers in a third: no trend is judged */

struct steady {
	double sent_rps;        /* (sent - 1) / the span of the sends */
	double achieved_rps;    /* the rate answers came back at */
	double ttft_first, ttft_last;   /* median TTFT of the first and last third, ms; -1 */
	double e2e_first, e2e_last;     /* the same for e2e */
	bool sustained;
	char why[120];          /* what gave an unsustained load away; empty otherwise */
};

void steady_judge(const struct config *cfg, const struct run *run, struct steady *st);

/* ---- sweeps (sweep.c, html.c) --------------------------------------------- */

/* One load of a sweep, as measured. Times in ms; -1: not defined. */
struct sweep_point {
	double load;            /* offered rate (req/s) or concurrency */
	int order;              /* 0, 1, ... in the order run */
	long requests, ok, failed, slo_met;
	double share;           /* slo_met / requests */
	bool meets;             /* share >= --slo-share and the load was sustained */
	double wall_s, throughput_rps, goodput_rps, output_tok_s, in_flight_mean;
	double sent_rps;        /* the arrivals' own rate: (n - 1) / their span */
	double span_s;          /* first request sent .. last one sent */
	struct steady steady;   /* whether the load was sustained */
	/* a confirmation stopped once its misses ruled the SLO out (after
	 * wall_s): missed of the at most most_sent it could send */
	bool stopped_missed;
	long missed, most_sent;
	double ttft_p50, ttft_p99, tpot_p50, tpot_p99, e2e_p50, e2e_p99;
	double t0, t_end;       /* bench_mono() seconds: the trace window */
	long phase_n;           /* trace rows found; 0: no phases */
	double phase_ms[5];     /* mean net-in, queue, prefill, decode, net-out */
	char errors[96];        /* "429 x12, timeout x1"; empty: none */
};

struct sweep {
	enum sweep_kind kind;
	struct sweep_point *pts;        /* sorted by load */
	size_t n, cap;
	int best;                       /* highest load that met the SLO; -1 none */
	int knee;                       /* -1 none */
	bool top_held;                  /* the SLO held at the highest load tried */
	struct sweep_point repeats[2];  /* the knee again, for the noise */
	int n_repeats;
	/* the answer run again as long as the longest point; each miss sends the
	 * search lower (cap: the lowest load whose confirmation missed) */
	struct sweep_point confirms[SWEEP_MAX_CONFIRMS];
	int n_confirms;
	bool confirmed;                 /* the last confirmation met the SLO */
	double cap_load;                /* 0: none */
	bool interrupted;
	const char *trace_note;         /* why the phases are missing; NULL */
};

/* The whole sweep: runs, prints its table, writes --json and --html. Returns
 * the exit status. */
int sweep_main(const struct config *cfg, volatile sig_atomic_t *stop);
/* What a sweep's load is counted in (sweep.c and html.c name it). */
static inline const char *sweep_load_unit(const struct sweep *sw)
{
	return sw->kind == SWEEP_RATE ? "req/s" : "concurrency";
}
int html_write(const char *path, const struct config *cfg, const struct sweep *sw);

#endif
