/* report.c - kpi-bench's summaries: percentiles of every metric, throughput,
 * SLO goodput and errors, as text for people, JSON for machines and a CSV
 * row per request for joining with the agent's trace (by x-request-id). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema/pct.h"
#include "tools/kpi-bench/bench.h"

/* ---- statistics ---------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

const double report_ci_pct[N_CI] = { 50, 90, 99 };

/* Sorts v once and reads four percentiles off it, by the project's one
 * definition (schema/pct.h), the max, and the 95% intervals of three. */
static struct report_stat stat_of(double *v, size_t n)
{
	struct report_stat s = { .n = n };
	for (int i = 0; i < N_CI; i++)
		s.ci_lo[i] = s.ci_hi[i] = NAN;
	if (!n)
		return s;
	qsort(v, n, sizeof(*v), cmp_double);
	double sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += v[i];
	s.mean = sum / (double)n;
	s.p50 = pct_sorted_f64(v, n, 50);
	s.p90 = pct_sorted_f64(v, n, 90);
	s.p95 = pct_sorted_f64(v, n, 95);
	s.p99 = pct_sorted_f64(v, n, 99);
	s.max = v[n - 1];
	for (int i = 0; i < N_CI; i++) {
		size_t lo, hi;
		if (!pct_ci_ranks(n, report_ci_pct[i], REPORT_CI_LEVEL, &lo, &hi)) {
			s.ci_lo[i] = v[lo];
			s.ci_hi[i] = v[hi];
		}
	}
	return s;
}

static const char *const metric_names[N_METRICS] = { "ttft", "tpot", "itl", "e2e" };

void report_summarize(const struct run *run, struct report_summary *s)
{
	memset(s, 0, sizeof(*s));
	size_t n = run->n_res;
	double *v = malloc((n ? n : 1) * sizeof(*v));
	if (!v)
		return;
	for (size_t i = 0; i < n; i++) {
		const struct result *r = &run->res[i];
		if (r->error) {
			s->failed++;
			continue;
		}
		s->ok++;
		s->slo_met += r->slo_met;
		s->in_flight_mean += r->e2e > 0 ? r->e2e / 1e3 : 0;
		if (r->prompt_tokens > 0)
			s->prompt_tokens += r->prompt_tokens;
		if (r->completion_tokens > 0)
			s->completion_tokens += r->completion_tokens;
	}
	s->sent = (long)n + run->in_flight_dropped;
	for (int m = 0; m < N_METRICS; m++) {
		size_t k = 0;
		if (m == M_ITL) {
			s->m[m] = stat_of(run->itl, run->n_itl);
			continue;
		}
		for (size_t i = 0; i < n; i++) {
			const struct result *r = &run->res[i];
			double x = m == M_TTFT ? r->ttft : m == M_TPOT ? r->tpot : r->e2e;
			if (!r->error && x >= 0)
				v[k++] = x;
		}
		s->m[m] = stat_of(v, k);
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (run->res[i].t_sent >= 0)
			v[k++] = run->res[i].t_sent - run->res[i].t_due;
	s->late = stat_of(v, k);
	free(v);
	if (run->wall_s > 0) {
		s->req_s = s->ok / run->wall_s;
		s->out_tok_s = s->completion_tokens / run->wall_s;
		s->total_tok_s = (s->completion_tokens + s->prompt_tokens) / run->wall_s;
		s->goodput = s->slo_met / run->wall_s;
		s->in_flight_mean /= run->wall_s;   /* Little's law */
	} else {
		s->in_flight_mean = 0;
	}
}

/* ---- errors and SLOs ----------------------------------------------------- */

void report_count_error(struct run *run, const char *key, const char *detail)
{
	int i;
	for (i = 0; i < run->n_err_keys; i++)
		if (!strcmp(run->err_key[i], key))
			break;
	if (i == run->n_err_keys) {
		if (run->n_err_keys == 32)
			i = 31;   /* more than 32 kinds of error: lump the rest together */
		else
			run->n_err_keys++;
		snprintf(run->err_key[i], sizeof(run->err_key[i]), "%s", i == 31 ? "other" : key);
		/* one line, printable: bodies can hold anything */
		size_t j = 0;
		for (const char *p = detail; *p && j + 1 < sizeof(run->first_err[i]); p++)
			run->first_err[i][j++] = (*p == '\n' || *p == '\r' || *p == '\t') ? ' ' :
						 ((unsigned char)*p < 32 ? '?' : *p);
		while (j && run->first_err[i][j - 1] == ' ')
			j--;
		run->first_err[i][j] = '\0';
	}
	run->err_count[i]++;
}

bool report_have_slo(const struct config *cfg)
{
	return cfg->slo_ttft > 0 || cfg->slo_tpot > 0 || cfg->slo_e2e > 0;
}

/* A request meets the SLO when it succeeded and every bound given holds.
 * TPOT is undefined for one-token answers; such a request meets the TPOT
 * bound trivially (there is no second token to be late). */
bool report_meets_slo(const struct config *cfg, const struct result *r)
{
	return !r->error && (!(cfg->slo_ttft > 0) || (r->ttft >= 0 && r->ttft <= cfg->slo_ttft)) &&
	       (!(cfg->slo_tpot > 0) || r->tpot < 0 || r->tpot <= cfg->slo_tpot) &&
	       (!(cfg->slo_e2e > 0) || (r->e2e >= 0 && r->e2e <= cfg->slo_e2e));
}

void report_apply_slo(const struct config *cfg, struct run *run)
{
	for (size_t i = 0; i < run->n_res; i++)
		run->res[i].slo_met = report_meets_slo(cfg, &run->res[i]);
}

void report_slo_text(const struct config *cfg, char *out, size_t len)
{
	size_t o = 0;
	out[0] = '\0';
	if (cfg->slo_ttft > 0)
		o += (size_t)snprintf(out + o, len - o, "ttft<=%gms", cfg->slo_ttft);
	if (cfg->slo_tpot > 0 && o < len)
		o += (size_t)snprintf(out + o, len - o, "%stpot<=%gms", o ? ", " : "", cfg->slo_tpot);
	if (cfg->slo_e2e > 0 && o < len)
		snprintf(out + o, len - o, "%se2e<=%gms", o ? ", " : "", cfg->slo_e2e);
}

static void mode_text(const struct config *cfg, char *out, size_t len)
{
	if (cfg->mode == MODE_RATE && cfg->burstiness != 1)
		snprintf(out, len, "gamma %g req/s, burstiness %g", cfg->rate, cfg->burstiness);
	else if (cfg->mode == MODE_RATE)
		snprintf(out, len, "Poisson %g req/s", cfg->rate);
	else if (cfg->mode == MODE_REPLAY)
		snprintf(out, len, "replay of %zu requests at speed %g", cfg->replay.n, cfg->replay_speed);
	else if (cfg->mode == MODE_BURST)
		snprintf(out, len, "burst of %ld", cfg->requests);
	else
		snprintf(out, len, "concurrency %ld", cfg->concurrency);
}

/* ---- text ---------------------------------------------------------------- */

void report_text(FILE *f, const struct config *cfg, struct run *run)
{
	struct report_summary s;
	report_summarize(run, &s);
	char mode[64], slo[128];
	mode_text(cfg, mode, sizeof(mode));
	fprintf(f, "kpi-bench: %s %s, %s, prompt-len %s, max-tokens %s%s%s, seed %llu\n",
		cfg->url, cfg->endpoint == EP_CHAT ? "chat" : "completions", mode,
		cfg->prompt_len.spec, cfg->max_tokens.spec, cfg->ignore_eos ? ", ignore-eos" : "",
		cfg->stream ? "" : ", no-stream", cfg->seed);
	if (run->interrupted)
		fprintf(f, "interrupted: the numbers below cover the %zu requests that finished; "
			"%ld in flight were abandoned\n", run->n_res, run->in_flight_dropped);
	fprintf(f, "requests: %ld ok, %ld failed, in %.3f s\n", s.ok, s.failed, run->wall_s);
	fprintf(f, "%-9s %7s %9s %9s %9s %9s %9s %9s\n", "ms", "n", "mean", "p50", "p90", "p95", "p99", "max");
	for (int m = 0; m < N_METRICS; m++) {
		const struct report_stat *st = &s.m[m];
		if (!st->n) {
			fprintf(f, "%-9s %7zu %9s %9s %9s %9s %9s %9s\n", metric_names[m], st->n,
				"-", "-", "-", "-", "-", "-");
			continue;
		}
		fprintf(f, "%-9s %7zu %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f\n", metric_names[m], st->n,
			st->mean, st->p50, st->p90, st->p95, st->p99, st->max);
	}
	fprintf(f, "throughput: %.2f req/s, %.1f output tok/s, %.1f total tok/s (%ld prompt + %ld output tokens)\n",
		s.req_s, s.out_tok_s, s.total_tok_s, s.prompt_tokens, s.completion_tokens);
	if (s.late.n && (cfg->mode == MODE_RATE || cfg->mode == MODE_REPLAY)) {
		fprintf(f, "sent late: p50 %.3f ms, p99 %.3f ms, max %.3f ms behind the schedule\n",
			s.late.p50, s.late.p99, s.late.max);
		if (s.late.p99 > LATE_WARN_MS)
			fprintf(f, "warning: kpi-bench fell behind its own schedule (p99 %.1f ms late): the load "
				"offered was lower and smoother than asked; give kpi-bench a CPU of its own "
				"(taskset, chrt -f 10) or lower --rate\n", s.late.p99);
	}
	if (report_have_slo(cfg)) {
		report_slo_text(cfg, slo, sizeof(slo));
		fprintf(f, "goodput: %.2f req/s (%ld of %zu requests met %s)\n", s.goodput, s.slo_met,
			run->n_res, slo);
	}
	if (run->n_err_keys) {
		fprintf(f, "errors:");
		for (int i = 0; i < run->n_err_keys; i++)
			fprintf(f, "%s %s x%ld", i ? "," : "", run->err_key[i], run->err_count[i]);
		fprintf(f, "\n");
		for (int i = 0; i < run->n_err_keys; i++)
			fprintf(f, "  first %s: %.150s\n", run->err_key[i], run->first_err[i]);
	}
}

/* ---- JSON ---------------------------------------------------------------- */

static json_t *stat_json(const struct report_stat *st)
{
	if (!st->n)
		return json_pack("{s:i, s:n, s:n, s:n, s:n, s:n, s:n}", "n", 0, "mean", "p50", "p90",
				 "p95", "p99", "max");
	json_t *o = json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:f}", "n", (json_int_t)st->n,
			      "mean", st->mean, "p50", st->p50, "p90", st->p90, "p95", st->p95,
			      "p99", st->p99, "max", st->max);
	/* "p99_ci": [lo, hi], the 95% interval (null: too few values to bound it) */
	for (int i = 0; i < N_CI; i++) {
		char key[16];
		snprintf(key, sizeof(key), "p%.0f_ci", report_ci_pct[i]);
		json_object_set_new(o, key, isnan(st->ci_lo[i]) ? json_null() :
				    json_pack("[f, f]", st->ci_lo[i], st->ci_hi[i]));
	}
	return o;
}

static json_t *opt_real(double v)
{
	return v > 0 ? json_real(v) : json_null();
}

int report_dump_json(json_t *root, const char *path)
{
	int rc;
	if (!strcmp(path, "-")) {
		rc = json_dumpf(root, stdout, JSON_INDENT(2));
		fputc('\n', stdout);
	} else {
		rc = json_dump_file(root, path, JSON_INDENT(2));
	}
	json_decref(root);
	if (rc)
		fprintf(stderr, "kpi-bench: cannot write --json %s: check the directory exists and is writable\n", path);
	return rc ? -1 : 0;
}

int report_json(const char *path, const struct config *cfg, struct run *run)
{
	struct report_summary s;
	report_summarize(run, &s);
	json_t *root = json_object();
	json_object_set_new(root, "url", json_string(cfg->url));
	json_object_set_new(root, "endpoint", json_string(cfg->endpoint == EP_CHAT ? "chat" : "completions"));
	json_object_set_new(root, "mode", json_string(cfg->mode == MODE_RATE ? "rate" :
						      cfg->mode == MODE_BURST ? "burst" :
						      cfg->mode == MODE_REPLAY ? "replay" : "concurrency"));
	json_object_set_new(root, "concurrency", cfg->mode == MODE_CONCURRENCY ?
			    json_integer(cfg->concurrency) : json_null());
	json_object_set_new(root, "rate", cfg->mode == MODE_RATE ? json_real(cfg->rate) : json_null());
	json_object_set_new(root, "burstiness", cfg->mode == MODE_RATE ? json_real(cfg->burstiness) : json_null());
	json_object_set_new(root, "replay_speed", cfg->mode == MODE_REPLAY ? json_real(cfg->replay_speed) : json_null());
	json_object_set_new(root, "prompt_len", json_string(cfg->prompt_len.spec));
	json_object_set_new(root, "max_tokens", json_string(cfg->max_tokens.spec));
	json_object_set_new(root, "ignore_eos", json_boolean(cfg->ignore_eos));
	json_object_set_new(root, "stream", json_boolean(cfg->stream));
	json_object_set_new(root, "seed", json_integer((json_int_t)cfg->seed));
	json_object_set_new(root, "interrupted", json_boolean(run->interrupted));
	json_object_set_new(root, "duration_s", json_real(run->wall_s));
	json_object_set_new(root, "requests", json_pack("{s:I, s:I, s:I, s:I}",
		"completed", (json_int_t)run->n_res, "ok", (json_int_t)s.ok,
		"failed", (json_int_t)s.failed, "abandoned", (json_int_t)run->in_flight_dropped));
	json_object_set_new(root, "tokens", json_pack("{s:I, s:I}", "prompt", (json_int_t)s.prompt_tokens,
		"completion", (json_int_t)s.completion_tokens));
	json_object_set_new(root, "throughput", json_pack("{s:f, s:f, s:f}", "requests_per_s", s.req_s,
		"output_tokens_per_s", s.out_tok_s, "total_tokens_per_s", s.total_tok_s));
	for (int m = 0; m < N_METRICS; m++) {
		char key[16];
		snprintf(key, sizeof(key), "%s_ms", metric_names[m]);
		json_object_set_new(root, key, stat_json(&s.m[m]));
	}
	json_object_set_new(root, "send_late_ms", stat_json(&s.late));
	if (report_have_slo(cfg)) {
		json_object_set_new(root, "slo", json_pack("{s:o, s:o, s:o}", "ttft_ms", opt_real(cfg->slo_ttft),
			"tpot_ms", opt_real(cfg->slo_tpot), "e2e_ms", opt_real(cfg->slo_e2e)));
		json_object_set_new(root, "slo_met", json_integer(s.slo_met));
		json_object_set_new(root, "goodput_rps", json_real(s.goodput));
	} else {
		json_object_set_new(root, "slo", json_null());
		json_object_set_new(root, "slo_met", json_null());
		json_object_set_new(root, "goodput_rps", json_null());
	}
	json_t *errs = json_object();
	for (int i = 0; i < run->n_err_keys; i++)
		json_object_set_new(errs, run->err_key[i], json_pack("{s:I, s:s}", "count",
			(json_int_t)run->err_count[i], "first", run->first_err[i]));
	json_object_set_new(root, "errors", errs);

	return report_dump_json(root, path);
}

/* ---- CSV ----------------------------------------------------------------- */

static int cmp_idx(const void *a, const void *b)
{
	long x = ((const struct result *)a)->idx, y = ((const struct result *)b)->idx;
	return (x > y) - (x < y);
}

static void csv_num(FILE *f, double v)
{
	if (v >= 0)
		fprintf(f, ",%.3f", v);
	else
		fputs(",", f);
}

static void csv_count(FILE *f, long v)
{
	if (v >= 0)
		fprintf(f, ",%ld", v);
	else
		fputs(",", f);
}

int report_csv(const char *path, const struct run *run)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "w") : stdout;
	if (!f) {
		fprintf(stderr, "kpi-bench: cannot write --csv %s: check the directory exists and is writable\n", path);
		return -1;
	}
	struct result *rs = malloc((run->n_res ? run->n_res : 1) * sizeof(*rs));
	if (!rs) {
		if (f != stdout)
			fclose(f);
		return -1;
	}
	memcpy(rs, run->res, run->n_res * sizeof(*rs));
	qsort(rs, run->n_res, sizeof(*rs), cmp_idx);
	fputs("index,request_id,status,error,prompt_len,max_tokens,prompt_tokens,completion_tokens,"
	      "chunks,t_sent_ms,connect_ms,ttft_ms,tpot_ms,itl_max_ms,e2e_ms,slo_met,t_due_ms\n", f);
	for (size_t i = 0; i < run->n_res; i++) {
		const struct result *r = &rs[i];
		/* ids are sanitised by the server; quote anyway should one hold a comma */
		bool quote = strpbrk(r->request_id, ",\"") != NULL;
		fprintf(f, "%ld,%s", r->idx, quote ? "\"" : "");
		for (const char *p = r->request_id; *p; p++) {
			if (*p == '"')
				fputc('"', f);
			fputc(*p, f);
		}
		fprintf(f, "%s", quote ? "\"" : "");
		if (r->status)
			fprintf(f, ",%d", r->status);
		else
			fputs(",", f);
		fprintf(f, ",%s", r->error ? r->error : "");
		csv_count(f, r->prompt_len);
		csv_count(f, r->max_tokens);
		csv_count(f, r->prompt_tokens);
		csv_count(f, r->completion_tokens);
		csv_count(f, r->error ? -1 : r->chunks);
		csv_num(f, r->t_sent);
		csv_num(f, r->connect);
		csv_num(f, r->ttft);
		csv_num(f, r->tpot);
		csv_num(f, r->itl_max);
		csv_num(f, r->e2e);
		fprintf(f, ",%d", r->slo_met ? 1 : 0);
		csv_num(f, r->t_due);
		fputc('\n', f);
	}
	free(rs);
	int rc = ferror(f);
	if (f != stdout)
		rc |= fclose(f);
	else
		fflush(f);
	if (rc)
		fprintf(stderr, "kpi-bench: writing --csv %s failed\n", path);
	return rc ? -1 : 0;
}
