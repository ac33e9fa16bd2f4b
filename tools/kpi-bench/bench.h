/* bench.h - what kpi-bench's parts share: the run configuration, one
 * result record per measured request, and the report writers. */
#ifndef KPI_BENCH_BENCH_H
#define KPI_BENCH_BENCH_H

#include <stdbool.h>
#include <stdio.h>

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

void report_count_error(struct run *run, const char *key, const char *detail);
void report_apply_slo(const struct config *cfg, struct run *run);
void report_text(FILE *f, const struct config *cfg, struct run *run);
int report_json(const char *path, const struct config *cfg, struct run *run);
int report_csv(const char *path, const struct run *run);

#endif
