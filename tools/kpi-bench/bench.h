/* bench.h - what kpi-bench's parts share: the run configuration, one
 * result record per measured request, and each part's entry points: the
 * arrival schedule (sched.c), the client (client.c), the reports (report.c). */
#ifndef KPI_BENCH_BENCH_H
#define KPI_BENCH_BENCH_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>

#include "tools/kpi-bench/dist.h"

enum mode { MODE_CONCURRENCY, MODE_RATE, MODE_BURST };
enum endpoint { EP_COMPLETIONS, EP_CHAT };

struct config {
	char url[512];
	char host[256], port[16], path[256];
	enum endpoint endpoint;
	char model[128];
	long requests;          /* 0 = until --duration */
	double duration;        /* s; 0 = until --requests */
	enum mode mode;
	long concurrency;
	double rate;            /* requests/s, Poisson arrivals */
	struct dist prompt_len, max_tokens;
	bool ignore_eos, stream, token_ids;
	double temperature;     /* -1 = the server's default */
	long id_lo, id_hi;      /* --token-ids range */
	double slo_ttft, slo_tpot, slo_e2e;   /* ms; 0 = no SLO */
	unsigned long long seed;
	long warmup;
	double timeout;         /* s per request */
	const char *json_path, *csv_path;
	bool quiet;
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
	long in_flight_dropped; /* requests abandoned by Ctrl-C */
	bool interrupted;
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
 * *idx is its index (negative for warm-up), *warm says which, and *now is
 * its start time. Call until false, then sched_wait with the same *now. */
bool sched_next(struct sched *S, double *now, long *idx, bool *warm);
/* Seconds until the next arrival is due, or -1 when only a finishing
 * request can let another start. */
double sched_wait(struct sched *S, double now);
void sched_finished(struct sched *S, bool warm, double now);
/* The measured run is over: nothing in flight and nothing more may start. */
bool sched_over(struct sched *S);
double sched_wall_s(const struct sched *S);
/* Request idx's plan: its lengths and the whole HTTP request, into out. */
int sched_build_request(const struct config *cfg, long idx, long *prompt_len, long *max_tokens,
			struct buf *out);
void sched_progress(const struct sched *S, const struct run *run, double now, bool tty, bool final);

/* ---- the client (client.c) ----------------------------------------------- */

struct client;

/* Resolves --url and sets up the epoll loop; NULL (after saying why) when
 * that fails. */
struct client *client_open(const struct config *cfg, struct run *run);
/* Runs the whole workload into run; returns early, with run->interrupted,
 * once *stop is set. -1 when the event loop itself fails. */
int client_run(struct client *C, volatile sig_atomic_t *stop);
void client_close(struct client *C);

/* ---- reports (report.c) -------------------------------------------------- */

void report_count_error(struct run *run, const char *key, const char *detail);
void report_apply_slo(const struct config *cfg, struct run *run);
void report_text(FILE *f, const struct config *cfg, struct run *run);
int report_json(const char *path, const struct config *cfg, struct run *run);
int report_csv(const char *path, const struct run *run);

#endif
