/* sched.c - kpi-bench's arrivals: when each request may start (closed loop,
 * Poisson or gamma, burst, recorded offsets; after the warm-up) and what it
 * asks for (its plan). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "tools/kpi-bench/bench.h"
#include "tools/kpi-bench/http.h"

/* ---- the per-request plan ------------------------------------------------ */

/* Common short English words: prompts look like text, and every request's
 * prompt differs, so a prefix cache cannot make the run look faster. */
static const char *const words[] = {
	"the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with",
	"be", "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which",
	"but", "have", "an", "had", "they", "you", "were", "their", "one", "all", "we",
	"can", "her", "has", "there", "been", "if", "more", "when", "will", "would",
	"who", "so", "no", "model", "token", "server", "latency", "cache", "batch",
	"queue", "request", "answer", "river", "stone", "light", "quiet", "market",
	"garden", "signal", "window", "number", "system", "yellow", "winter", "story",
};

/* Request idx's lengths and seed depend only on (--seed, idx), so a run is
 * reproducible whatever order responses come back in. Warm-up requests use
 * negative indexes and so never repeat a measured prompt. */
static void request_rng(const struct config *cfg, long idx, struct rng *r)
{
	rng_seed(r, cfg->seed * 0x9e3779b97f4a7c15ULL ^ (uint64_t)idx * 0xd1b54a32d192ed03ULL);
}

static json_t *prompt_json(const struct config *cfg, long prompt_len, struct rng *r)
{
	if (cfg->token_ids) {
		json_t *ids = json_array();
		for (long i = 0; i < prompt_len; i++)
			json_array_append_new(ids, json_integer(rng_range(r, cfg->id_lo, cfg->id_hi)));
		return ids;
	}
	struct buf text = { 0 };
	while ((long)text.len < prompt_len) {
		const char *w = words[rng_next(r) % (sizeof(words) / sizeof(words[0]))];
		if (text.len)
			buf_append(&text, " ", 1);
		buf_append(&text, w, strlen(w));
	}
	json_t *s = json_stringn(text.p, (size_t)prompt_len);
	buf_free(&text);
	return s;
}

/* The request body, compact JSON (free() it); NULL when out of memory. */
static char *body_json(const struct config *cfg, json_t *prompt, long max_tokens)
{
	json_t *body = json_object();
	json_object_set_new(body, "model", json_string(cfg->model));
	if (cfg->endpoint == EP_CHAT) {
		json_t *msg = json_pack("{s:s, s:o}", "role", "user", "content", prompt);
		json_object_set_new(body, "messages", json_pack("[o]", msg));
	} else {
		json_object_set_new(body, "prompt", prompt);
	}
	json_object_set_new(body, "max_tokens", json_integer(max_tokens));
	if (cfg->ignore_eos)
		json_object_set_new(body, "ignore_eos", json_true());
	if (cfg->temperature >= 0)
		json_object_set_new(body, "temperature", json_real(cfg->temperature));
	json_object_set_new(body, "stream", json_boolean(cfg->stream));
	if (cfg->stream)
		json_object_set_new(body, "stream_options", json_pack("{s:b}", "include_usage", 1));
	char *js = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	return js;
}

int sched_build_request(const struct config *cfg, long idx, long *prompt_len, long *max_tokens,
			struct buf *out)
{
	struct rng r;
	request_rng(cfg, idx, &r);
	*prompt_len = dist_sample(&cfg->prompt_len, &r);
	*max_tokens = dist_sample(&cfg->max_tokens, &r);
	if (cfg->mode == MODE_REPLAY && idx >= 0 && (size_t)idx < cfg->replay.n) {
		*prompt_len = cfg->replay.prompt_len[idx];   /* the recording's lengths, as they were */
		*max_tokens = cfg->replay.output_len[idx];
	}
	char *js = body_json(cfg, prompt_json(cfg, *prompt_len, &r), *max_tokens);
	if (!js)
		return -1;

	const char *path = cfg->path[0] ? cfg->path :
			   cfg->endpoint == EP_CHAT ? "/v1/chat/completions" : "/v1/completions";
	buf_reset(out);
	int rc = buf_printf(out, "POST %s HTTP/1.1\r\nHost: %s:%s\r\nUser-Agent: kpi-bench\r\n"
			    "Content-Type: application/json\r\nAccept: %s\r\n"
			    "Content-Length: %zu\r\n\r\n%s",
			    path, cfg->host, cfg->port, cfg->stream ? "text/event-stream" : "application/json",
			    strlen(js), js);
	free(js);
	return rc;
}

/* ---- arrivals -------------------------------------------------------------- */

void sched_init(struct sched *S, const struct config *cfg)
{
	memset(S, 0, sizeof(*S));
	S->cfg = cfg;
	rng_seed(&S->arrivals, cfg->seed ^ 0x5eed0a77a1ULL);
}

long sched_most_sent(const struct sched *S)
{
	const struct config *cfg = S->cfg;
	long most = cfg->requests;
	if (!most && cfg->mode == MODE_RATE && cfg->duration > 0) {
		/* request k is due sum(gap 0..k-1) after the start and sent no
		 * earlier; none starts once --duration has passed */
		struct rng r = S->arrivals;
		for (double t = 0; t < cfg->duration; t += rng_arrival_gap(&r, cfg->rate, cfg->burstiness))
			most++;
	}
	if (most && cfg->duration > 0 && most < cfg->min_requests)
		most = cfg->min_requests;
	return most ? most : -1;
}

/* Whether a measured request may start; *now is read afresh, so that one
 * started after a batch of events is not let through by the clock of the
 * loop turn, and becomes the request's start time. */
static bool may_issue(struct sched *S, double *now)
{
	const struct config *cfg = S->cfg;
	if (cfg->requests && S->issued >= cfg->requests)
		return false;
	*now = bench_mono();
	/* a sweep point past its duration still sends its floor of requests */
	if (cfg->duration && *now - S->t0 >= cfg->duration && S->issued >= cfg->min_requests)
		return false;
	return true;
}

/* The warm-up: up to --concurrency (64 for the open-loop modes) unmeasured
 * requests at a time; the measured run starts once all have finished. */
static bool warmup_next(struct sched *S, double *now, long *idx, bool *warm)
{
	const struct config *cfg = S->cfg;
	long wconc = cfg->mode == MODE_CONCURRENCY ? cfg->concurrency : 64;
	if (S->warm_issued < cfg->warmup && S->in_flight < wconc) {
		*idx = -1 - S->warm_issued++;
		*warm = true;
		*now = bench_mono();
		S->in_flight++;
		return true;
	}
	if (S->warm_done < cfg->warmup)
		return false;
	S->measuring = true;
	S->t0 = S->t_end = *now = bench_mono();
	S->next_arrival = *now;
	if (cfg->mode == MODE_REPLAY)
		S->next_arrival = S->t0 + cfg->replay.offset_s[0] / cfg->replay_speed;
	return false;
}

/* When the request after the one just issued is due. */
static void next_due(struct sched *S)
{
	const struct config *cfg = S->cfg;
	if (cfg->mode == MODE_RATE)
		S->next_arrival += rng_arrival_gap(&S->arrivals, cfg->rate, cfg->burstiness);
	else if (cfg->mode == MODE_REPLAY && (size_t)S->issued < cfg->replay.n)
		S->next_arrival = S->t0 + cfg->replay.offset_s[S->issued] / cfg->replay_speed;
}

bool sched_next(struct sched *S, double *now, double *due_at, long *idx, bool *warm)
{
	const struct config *cfg = S->cfg;
	if (!S->measuring) {
		if (warmup_next(S, now, idx, warm)) {
			*due_at = *now;
			return true;
		}
		if (!S->measuring)
			return false;   /* warm-up requests still to finish */
	}
	bool due = cfg->mode == MODE_BURST ||
		   (cfg->mode == MODE_CONCURRENCY && S->in_flight < cfg->concurrency) ||
		   ((cfg->mode == MODE_RATE || cfg->mode == MODE_REPLAY) && S->next_arrival <= *now);
	if (!due || !may_issue(S, now))
		return false;
	*idx = S->issued++;
	*warm = false;
	*due_at = cfg->mode == MODE_RATE || cfg->mode == MODE_REPLAY ? S->next_arrival : *now;
	S->in_flight++;
	next_due(S);
	return true;
}

double sched_wait(struct sched *S, double now)
{
	/* may_issue reads the clock again: an arrival that fell due while the
	 * last one was being built is due now (0), not "none pending" (-1) */
	if (S->measuring && (S->cfg->mode == MODE_RATE || S->cfg->mode == MODE_REPLAY) && may_issue(S, &now))
		return S->next_arrival > now ? S->next_arrival - now : 0;
	return -1;
}

void sched_finished(struct sched *S, bool warm, double now)
{
	if (warm) {
		S->warm_done++;
	} else {
		S->done++;
		S->t_end = now;
	}
	S->in_flight--;
}

bool sched_over(struct sched *S)
{
	double t;
	return S->measuring && S->in_flight == 0 && !may_issue(S, &t);
}

double sched_wall_s(const struct sched *S)
{
	return S->measuring && S->t_end > S->t0 ? S->t_end - S->t0 : 0;
}

/* ---- progress line --------------------------------------------------------- */

void sched_progress(const struct sched *S, const struct run *run, double now, bool tty, bool final)
{
	const struct config *cfg = S->cfg;
	long errors = 0;
	for (size_t i = 0; i < run->n_res; i++)
		errors += run->res[i].error != NULL;
	double el = S->measuring ? now - S->t0 : 0;
	char total[32] = "";
	if (cfg->requests)
		snprintf(total, sizeof(total), "/%ld", cfg->requests);
	if (!S->measuring)
		fprintf(stderr, "%skpi-bench: warm-up %ld/%ld%s", tty ? "\r" : "", S->warm_done,
			cfg->warmup, tty ? "\033[K" : "\n");
	else
		fprintf(stderr, "%skpi-bench: %6.1fs  done %ld%s  in flight %ld  errors %ld  %.2f req/s%s",
			tty ? "\r" : "", el, S->done, total, S->in_flight, errors,
			el > 0 ? S->done / el : 0.0, tty ? (final ? "\033[K\n" : "\033[K") : "\n");
}
