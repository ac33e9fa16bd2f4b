/* main.c - kpi-bench: load generator and client-side KPI meter for
 * OpenAI-compatible streaming servers. One thread, one epoll loop, one
 * non-blocking keep-alive connection per in-flight request. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tools/kpi-bench/bench.h"
#include "tools/kpi-bench/http.h"

#define EXIT_USAGE 2
#define EXIT_INTERRUPTED 130

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
	(void)sig;
	interrupted = 1;
}

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- command line -------------------------------------------------------- */

static const char usage_text[] =
"usage: kpi-bench --url URL [options]\n"
"\n"
"Sends a workload to an OpenAI-compatible server (/v1/completions or\n"
"/v1/chat/completions) and measures, per request, what the client sees:\n"
"TTFT, inter-token latency, TPOT and end-to-end latency (see docs/bench.md).\n"
"\n"
"target:\n"
"  --url URL              server base URL, http://HOST[:PORT] (required); a URL\n"
"                         with a path (http://h:p/x/y) posts to that path as is\n"
"  --endpoint KIND        completions (default) or chat\n"
"  --model NAME           the request's \"model\" field (default: kpi)\n"
"\n"
"how many:\n"
"  --requests N           measured requests (default 100 unless --duration)\n"
"  --duration S           stop starting requests after S seconds, then wait for\n"
"                         the ones in flight; with --requests, whichever is first\n"
"  --warmup N             N unmeasured requests before the run (default 0)\n"
"\n"
"arrivals (pick one):\n"
"  --concurrency C        closed loop: keep C requests in flight (default 1)\n"
"  --rate R               open loop: Poisson arrivals, R requests/s on average\n"
"  --burst                send all --requests at once\n"
"\n"
"workload (DIST is N, uniform:A:B, exp:MEAN[:MAX] or file:PATH; file:\n"
"holds one length per line, drawn uniformly):\n"
"  --prompt-len DIST      prompt length in tokens (default 128); prompts are\n"
"                         ASCII text of exactly that many bytes, which a\n"
"                         byte-level tokenizer reads as that many tokens\n"
"  --token-ids[=A:B]      send the prompt as an array of token ids drawn from\n"
"                         [A, B] (default 3:258, kpi-infer's byte tokens)\n"
"  --max-tokens DIST      max_tokens of each request (default 64)\n"
"  --ignore-eos           ask the server to ignore EOS (\"ignore_eos\": true), so\n"
"                         every answer is exactly max_tokens long\n"
"  --temperature T        send this sampling temperature (default: server's)\n"
"  --no-stream            non-streaming requests: TTFT = e2e, no ITL/TPOT\n"
"  --seed S               workload seed (default 1): same seed, same prompts,\n"
"                         lengths and arrival times\n"
"\n"
"SLOs and output:\n"
"  --slo LIST             e.g. ttft=200,tpot=50,e2e=5000 (milliseconds); a\n"
"                         request meets the SLO when it succeeded and meets\n"
"                         every bound given; goodput = such requests per second\n"
"  --timeout S            give up on a request after S seconds (default 600)\n"
"  --json FILE            write the summary as JSON (- for stdout)\n"
"  --csv FILE             write one row per request, with the server's\n"
"                         x-request-id, to FILE (- for stdout)\n"
"  --quiet                no progress line on stderr\n"
"  --help                 this text\n"
"\n"
"Ctrl-C (or SIGTERM) stops the run and prints what was measured so far\n"
"(exit 130).\n"
"Exit status: 0 when the run finished and at least one request succeeded,\n"
"1 when none did or the server could not be reached, 2 for a bad command line.\n";

enum {
	OPT_URL = 256, OPT_ENDPOINT, OPT_MODEL, OPT_REQUESTS, OPT_DURATION, OPT_WARMUP,
	OPT_CONC, OPT_RATE, OPT_BURST, OPT_PROMPT, OPT_TOKEN_IDS, OPT_MAXTOK, OPT_IGNORE_EOS,
	OPT_TEMP, OPT_NO_STREAM, OPT_SEED, OPT_SLO, OPT_TIMEOUT, OPT_JSON, OPT_CSV, OPT_QUIET,
	OPT_HELP,
};

static const struct option long_opts[] = {
	{ "url", required_argument, NULL, OPT_URL },
	{ "endpoint", required_argument, NULL, OPT_ENDPOINT },
	{ "model", required_argument, NULL, OPT_MODEL },
	{ "requests", required_argument, NULL, OPT_REQUESTS },
	{ "duration", required_argument, NULL, OPT_DURATION },
	{ "warmup", required_argument, NULL, OPT_WARMUP },
	{ "concurrency", required_argument, NULL, OPT_CONC },
	{ "rate", required_argument, NULL, OPT_RATE },
	{ "burst", no_argument, NULL, OPT_BURST },
	{ "prompt-len", required_argument, NULL, OPT_PROMPT },
	{ "token-ids", optional_argument, NULL, OPT_TOKEN_IDS },
	{ "max-tokens", required_argument, NULL, OPT_MAXTOK },
	{ "ignore-eos", no_argument, NULL, OPT_IGNORE_EOS },
	{ "temperature", required_argument, NULL, OPT_TEMP },
	{ "no-stream", no_argument, NULL, OPT_NO_STREAM },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "slo", required_argument, NULL, OPT_SLO },
	{ "timeout", required_argument, NULL, OPT_TIMEOUT },
	{ "json", required_argument, NULL, OPT_JSON },
	{ "csv", required_argument, NULL, OPT_CSV },
	{ "quiet", no_argument, NULL, OPT_QUIET },
	{ "help", no_argument, NULL, OPT_HELP },
	{ 0 },
};

static double temperature = -1;

static void __attribute__((noreturn, format(printf, 1, 2))) usage_error(const char *fmt, ...)
{
	va_list ap;
	fputs("kpi-bench: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\n(kpi-bench --help lists every flag)\n", stderr);
	exit(EXIT_USAGE);
}

static long parse_long_flag(const char *flag, const char *v, long min, const char *what)
{
	char *end;
	errno = 0;
	long x = strtol(v, &end, 10);
	if (!*v || *end || errno || x < min)
		usage_error("%s '%s': expected %s", flag, v, what);
	return x;
}

static double parse_double_flag(const char *flag, const char *v, double min, bool strict, const char *what)
{
	char *end;
	errno = 0;
	double x = strtod(v, &end);
	if (!*v || *end || errno || isnan(x) || isinf(x) || x < min || (strict && x == min))
		usage_error("%s '%s': expected %s", flag, v, what);
	return x;
}

static void parse_slo(struct config *cfg, const char *arg)
{
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", arg);
	char *save = NULL;
	int n = 0;
	for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(item, '=');
		if (!eq)
			usage_error("--slo '%s': '%s' is not NAME=MS; expected e.g. ttft=200,tpot=50,e2e=5000", arg, item);
		*eq = '\0';
		double *slot = !strcmp(item, "ttft") ? &cfg->slo_ttft :
			       !strcmp(item, "tpot") ? &cfg->slo_tpot :
			       !strcmp(item, "e2e") ? &cfg->slo_e2e : NULL;
		if (!slot)
			usage_error("--slo '%s': unknown metric '%s'; expected ttft, tpot or e2e", arg, item);
		char *end;
		errno = 0;
		double v = strtod(eq + 1, &end);
		if (!eq[1] || *end || errno || !(v > 0) || isinf(v))
			usage_error("--slo '%s': %s needs a positive number of milliseconds, got '%s'", arg, item, eq + 1);
		*slot = v;
		n++;
	}
	if (!n)
		usage_error("--slo '%s': expected e.g. ttft=200,tpot=50,e2e=5000", arg);
}

static void parse_url(struct config *cfg, const char *url)
{
	snprintf(cfg->url, sizeof(cfg->url), "%s", url);
	if (strncmp(url, "http://", 7)) {
		if (!strncmp(url, "https://", 8))
			usage_error("--url '%s': https is not supported; point kpi-bench at the server's plain http port", url);
		usage_error("--url '%s': expected http://HOST[:PORT][/PATH]", url);
	}
	const char *h = url + 7, *slash = strchr(h, '/');
	size_t hl = slash ? (size_t)(slash - h) : strlen(h);
	char hostport[300];
	if (!hl || hl >= sizeof(hostport))
		usage_error("--url '%s': missing host; expected http://HOST[:PORT][/PATH]", url);
	memcpy(hostport, h, hl);
	hostport[hl] = '\0';
	char *colon = hostport[0] == '[' ? strstr(hostport, "]:") : strrchr(hostport, ':');
	if (hostport[0] == '[' && colon)
		colon++;
	snprintf(cfg->port, sizeof(cfg->port), "80");
	if (colon) {
		*colon = '\0';
		long p = parse_long_flag("--url", colon + 1, 1, "a port 1..65535 after the host");
		if (p > 65535)
			usage_error("--url '%s': port %ld is out of range 1..65535", url, p);
		snprintf(cfg->port, sizeof(cfg->port), "%d", (int)p);
	}
	char *host = hostport;
	if (host[0] == '[') {
		host++;
		host[strcspn(host, "]")] = '\0';
	}
	if (!*host)
		usage_error("--url '%s': missing host; expected http://HOST[:PORT][/PATH]", url);
	snprintf(cfg->host, sizeof(cfg->host), "%.255s", host);
	cfg->path[0] = '\0';
	if (slash && strcmp(slash, "/"))
		snprintf(cfg->path, sizeof(cfg->path), "%s", slash);
}

static void parse_dist_flag(struct dist *d, const char *flag, const char *arg)
{
	char err[512];
	if (dist_parse(d, arg, err, sizeof(err)))
		usage_error("%s '%s': %s", flag, arg, err);
}

static void parse_args(struct config *cfg, int argc, char **argv)
{
	bool have_url = false, have_prompt = false, have_maxtok = false;
	int arrival_flags = 0;
	const char *arrival_names[3] = { 0 };

	memset(cfg, 0, sizeof(*cfg));
	cfg->endpoint = EP_COMPLETIONS;
	snprintf(cfg->model, sizeof(cfg->model), "kpi");
	cfg->mode = MODE_CONCURRENCY;
	cfg->concurrency = 1;
	cfg->stream = true;
	cfg->seed = 1;
	cfg->timeout = 600;
	cfg->id_lo = 3;
	cfg->id_hi = 258;

	opterr = 0;   /* we word the errors ourselves */
	int c;
	while ((c = getopt_long(argc, argv, ":", long_opts, NULL)) != -1) {
		const char *a = optarg;
		switch (c) {
		case OPT_URL: parse_url(cfg, a); have_url = true; break;
		case OPT_ENDPOINT:
			if (!strcmp(a, "completions"))
				cfg->endpoint = EP_COMPLETIONS;
			else if (!strcmp(a, "chat"))
				cfg->endpoint = EP_CHAT;
			else
				usage_error("--endpoint '%s': expected completions or chat", a);
			break;
		case OPT_MODEL: snprintf(cfg->model, sizeof(cfg->model), "%s", a); break;
		case OPT_REQUESTS: cfg->requests = parse_long_flag("--requests", a, 1, "a positive integer"); break;
		case OPT_DURATION:
			cfg->duration = parse_double_flag("--duration", a, 0, true, "a positive number of seconds");
			break;
		case OPT_WARMUP: cfg->warmup = parse_long_flag("--warmup", a, 0, "an integer >= 0"); break;
		case OPT_CONC:
			cfg->concurrency = parse_long_flag("--concurrency", a, 1, "a positive integer");
			cfg->mode = MODE_CONCURRENCY;
			arrival_names[arrival_flags++ % 3] = "--concurrency";
			break;
		case OPT_RATE:
			cfg->rate = parse_double_flag("--rate", a, 0, true, "a positive number of requests per second");
			cfg->mode = MODE_RATE;
			arrival_names[arrival_flags++ % 3] = "--rate";
			break;
		case OPT_BURST:
			cfg->mode = MODE_BURST;
			arrival_names[arrival_flags++ % 3] = "--burst";
			break;
		case OPT_PROMPT: dist_free(&cfg->prompt_len); parse_dist_flag(&cfg->prompt_len, "--prompt-len", a); have_prompt = true; break;
		case OPT_MAXTOK: dist_free(&cfg->max_tokens); parse_dist_flag(&cfg->max_tokens, "--max-tokens", a); have_maxtok = true; break;
		case OPT_TOKEN_IDS:
			cfg->token_ids = true;
			if (a) {
				char *end, *end2;
				errno = 0;
				long lo = strtol(a, &end, 10), hi = *end == ':' ? strtol(end + 1, &end2, 10) : -1;
				if (errno || end == a || *end != ':' || *end2 || end2 == end + 1 || lo < 0 || hi < lo)
					usage_error("--token-ids='%s': expected A:B with 0 <= A <= B (token id range)", a);
				cfg->id_lo = lo;
				cfg->id_hi = hi;
			}
			break;
		case OPT_IGNORE_EOS: cfg->ignore_eos = true; break;
		case OPT_TEMP: temperature = parse_double_flag("--temperature", a, 0, false, "a number >= 0"); break;
		case OPT_NO_STREAM: cfg->stream = false; break;
		case OPT_SEED: {
			char *end;
			errno = 0;
			unsigned long long s = strtoull(a, &end, 0);
			if (!*a || *end || errno || *a == '-')
				usage_error("--seed '%s': expected a non-negative integer", a);
			cfg->seed = s;
			break;
		}
		case OPT_SLO: parse_slo(cfg, a); break;
		case OPT_TIMEOUT:
			cfg->timeout = parse_double_flag("--timeout", a, 0, true, "a positive number of seconds");
			break;
		case OPT_JSON: cfg->json_path = a; break;
		case OPT_CSV: cfg->csv_path = a; break;
		case OPT_QUIET: cfg->quiet = true; break;
		case OPT_HELP: fputs(usage_text, stdout); exit(0);
		case ':':
			usage_error("%s needs a value", argv[optind - 1]);
		case '?':
		default:
			if (optopt && optopt < 256)
				usage_error("unknown flag '-%c'", optopt);
			usage_error("unknown flag '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		usage_error("unexpected argument '%s' (every option is a --flag)", argv[optind]);
	if (!have_url)
		usage_error("--url is required, e.g. --url http://127.0.0.1:8000");
	if (arrival_flags > 1)
		usage_error("%s and %s both choose how requests arrive; give one of --concurrency, --rate, --burst",
			    arrival_names[0], arrival_names[1]);
	if (cfg->mode == MODE_BURST && !cfg->requests)
		usage_error("--burst needs --requests N (how many to send at once)");
	if (cfg->mode == MODE_BURST && cfg->duration)
		usage_error("--duration does not apply to --burst; give --requests N only");
	if (!cfg->requests && !cfg->duration)
		cfg->requests = 100;
	if (!have_prompt)
		dist_parse(&cfg->prompt_len, "128", NULL, 0);
	if (!have_maxtok)
		dist_parse(&cfg->max_tokens, "64", NULL, 0);
	if (cfg->json_path && cfg->csv_path && !strcmp(cfg->json_path, "-") && !strcmp(cfg->csv_path, "-"))
		usage_error("--json - and --csv - both want stdout; send one of them to a file");
}

/* ---- workload ------------------------------------------------------------ */

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

static int build_request(const struct config *cfg, long idx, long *prompt_len, long *max_tokens,
			 struct buf *out)
{
	struct rng r;
	request_rng(cfg, idx, &r);
	*prompt_len = dist_sample(&cfg->prompt_len, &r);
	*max_tokens = dist_sample(&cfg->max_tokens, &r);

	json_t *body = json_object(), *prompt;
	if (cfg->token_ids) {
		prompt = json_array();
		for (long i = 0; i < *prompt_len; i++)
			json_array_append_new(prompt, json_integer(rng_range(&r, cfg->id_lo, cfg->id_hi)));
	} else {
		struct buf text = { 0 };
		while ((long)text.len < *prompt_len) {
			const char *w = words[rng_next(&r) % (sizeof(words) / sizeof(words[0]))];
			if (text.len)
				buf_append(&text, " ", 1);
			buf_append(&text, w, strlen(w));
		}
		prompt = json_stringn(text.p, (size_t)*prompt_len);
		buf_free(&text);
	}
	json_object_set_new(body, "model", json_string(cfg->model));
	if (cfg->endpoint == EP_CHAT) {
		json_t *msg = json_pack("{s:s, s:o}", "role", "user", "content", prompt);
		json_object_set_new(body, "messages", json_pack("[o]", msg));
	} else {
		json_object_set_new(body, "prompt", prompt);
	}
	json_object_set_new(body, "max_tokens", json_integer(*max_tokens));
	if (cfg->ignore_eos)
		json_object_set_new(body, "ignore_eos", json_true());
	if (temperature >= 0)
		json_object_set_new(body, "temperature", json_real(temperature));
	json_object_set_new(body, "stream", json_boolean(cfg->stream));
	if (cfg->stream)
		json_object_set_new(body, "stream_options", json_pack("{s:b}", "include_usage", 1));
	char *js = json_dumps(body, JSON_COMPACT);
	json_decref(body);
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

/* ---- connections ----------------------------------------------------------- */

enum conn_state { C_FREE, C_CONNECTING, C_SENDING, C_WAITING, C_IDLE, C_RETRY };

struct conn {
	int fd;
	enum conn_state state;
	bool reused;            /* kept alive from an earlier request */
	bool retried;           /* this request already retried once */
	bool got_bytes;         /* any response bytes for this request */
	bool warm;              /* a warm-up request: not measured */
	long idx, prompt_len, max_tokens;
	double t_start;         /* when the request was started (for --timeout) */
	double t_sent, t_first, t_last;
	long chunks, prompt_tokens, completion_tokens;
	bool saw_done;
	char stream_err[160];
	double *itl;            /* this request's gaps, ms */
	size_t n_itl, cap_itl;
	struct buf out;
	size_t out_off;
	struct http_resp resp;
	struct buf ev;
};

struct loop {
	const struct config *cfg;
	struct run *run;
	int ep;
	struct addrinfo *ai;
	struct conn **conns;
	size_t n_conns;
	long in_flight;         /* conns holding a request */
	long issued, done;      /* measured requests */
	long warm_issued, warm_done;
	bool measuring;
	double t0, t_end;       /* measured run start; last request finished */
	double next_arrival;
	struct rng arrivals;
};

static int conn_watch(struct loop *L, struct conn *c, uint32_t events, int op)
{
	struct epoll_event ev = { .events = events, .data.ptr = c };
	return epoll_ctl(L->ep, op, c->fd, &ev);
}

static void conn_close(struct loop *L, struct conn *c)
{
	if (c->fd >= 0) {
		epoll_ctl(L->ep, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
	}
	c->fd = -1;
	c->state = C_FREE;
	c->reused = false;
}

static int conn_open(struct loop *L, struct conn *c)
{
	struct addrinfo *ai = L->ai;
	c->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -errno;
	int one = 1;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->reused = false;
	if (connect(c->fd, ai->ai_addr, ai->ai_addrlen) && errno != EINPROGRESS) {
		int e = errno;
		close(c->fd);
		c->fd = -1;
		return -e;
	}
	c->state = C_CONNECTING;
	if (conn_watch(L, c, EPOLLOUT, EPOLL_CTL_ADD)) {
		int e = errno;
		close(c->fd);
		c->fd = -1;
		return -e;
	}
	return 0;
}

static void itl_push(double **a, size_t *n, size_t *cap, double v)
{
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 256;
		double *p = realloc(*a, nc * sizeof(*p));
		if (!p)
			return;   /* drop a sample rather than the run */
		*a = p;
		*cap = nc;
	}
	(*a)[(*n)++] = v;
}

/* The request on c is over: record it (unless warm-up) and release c. */
static void request_finish(struct loop *L, struct conn *c, const char *error, const char *detail)
{
	struct run *run = L->run;
	double now = mono();
	/* a cleanly ended response keeps its connection, even a 429 */
	bool reusable = c->fd >= 0 && !error && c->resp.phase == RESP_DONE && !c->resp.conn_close &&
			c->out_off == c->out.len;
	if (c->warm) {
		L->warm_done++;
	} else {
		L->done++;
		L->t_end = now;
		if (run->n_res == run->cap_res) {
			run->cap_res = run->cap_res ? run->cap_res * 2 : 256;
			run->res = realloc(run->res, run->cap_res * sizeof(*run->res));
			if (!run->res) {
				fprintf(stderr, "kpi-bench: out of memory storing results\n");
				exit(1);
			}
		}
		struct result *r = &run->res[run->n_res++];
		memset(r, 0, sizeof(*r));
		r->idx = c->idx;
		r->status = c->resp.status;
		snprintf(r->request_id, sizeof(r->request_id), "%s", c->resp.request_id);
		r->prompt_len = c->prompt_len;
		r->max_tokens = c->max_tokens;
		r->prompt_tokens = c->prompt_tokens;
		r->completion_tokens = c->completion_tokens;
		r->chunks = c->chunks;
		r->t_sent = c->t_sent ? (c->t_sent - L->t0) * 1e3 : -1;
		r->connect = c->t_sent ? (c->t_sent - c->t_start) * 1e3 : -1;
		r->ttft = r->tpot = r->e2e = r->itl_max = -1;
		if (!error && c->resp.status != 200) {
			char key[16];
			snprintf(key, sizeof(key), "%d", c->resp.status);
			report_count_error(run, key, c->resp.body.p ? c->resp.body.p + c->resp.body.off : "");
			error = "http";
		} else if (error) {
			report_count_error(run, error, detail ? detail : "");
		}
		r->error = error;
		if (!error) {
			r->ttft = (c->t_first - c->t_sent) * 1e3;
			r->e2e = (c->t_last - c->t_sent) * 1e3;
			if (r->completion_tokens < 0)
				r->completion_tokens = c->chunks;   /* no usage: count chunks */
			if (r->completion_tokens > 1 && L->cfg->stream)
				r->tpot = (r->e2e - r->ttft) / (double)(r->completion_tokens - 1);
			for (size_t i = 0; i < c->n_itl; i++) {
				itl_push(&run->itl, &run->n_itl, &run->cap_itl, c->itl[i]);
				if (c->itl[i] > r->itl_max)
					r->itl_max = c->itl[i];
			}
		}
	}
	c->n_itl = 0;
	L->in_flight--;
	if (reusable) {
		c->state = C_IDLE;     /* keep-alive: the next request reuses it */
		c->reused = true;
		conn_watch(L, c, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_MOD);
	} else {
		conn_close(L, c);
	}
}

/* Send what is left of the request; -1 on a dead connection. */
static int conn_send(struct loop *L, struct conn *c)
{
	while (c->out_off < c->out.len) {
		if (!c->out_off)
			c->t_sent = mono();   /* "request sent": its first byte goes to the kernel */
		ssize_t n = send(c->fd, c->out.p + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			/* watch both ways: a server may answer (413, 429) and close
			 * before it has read the whole request */
			c->state = C_SENDING;
			conn_watch(L, c, EPOLLOUT | EPOLLIN | EPOLLRDHUP, EPOLL_CTL_MOD);
			return 0;
		}
		if (n < 0)
			return -1;
		c->out_off += (size_t)n;
	}
	c->state = C_WAITING;
	conn_watch(L, c, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_MOD);
	return 0;
}

static bool retry_stale(struct loop *L, struct conn *c);

static void request_fail_errno(struct loop *L, struct conn *c, const char *what, int err)
{
	char d[400];
	snprintf(d, sizeof(d), "%s %s:%s: %s", what, L->cfg->host, L->cfg->port, strerror(err));
	request_finish(L, c, what, d);
}

/* Put the request held by c on the wire: on c's keep-alive socket when it
 * has one, else on a new connection. */
static void request_send(struct loop *L, struct conn *c)
{
	c->out_off = 0;
	c->t_sent = 0;
	c->got_bytes = false;
	http_resp_init(&c->resp);
	buf_reset(&c->ev);
	if (c->state == C_IDLE) {
		c->state = C_WAITING;
		if (conn_send(L, c)) {
			int e = errno;
			if (!retry_stale(L, c))
				request_fail_errno(L, c, "send", e);
		}
		return;
	}
	int rc = conn_open(L, c);
	if (rc)
		request_fail_errno(L, c, "connect", -rc);
}

static struct conn *conn_get(struct loop *L)
{
	struct conn *spare = NULL;
	for (size_t i = 0; i < L->n_conns; i++) {
		struct conn *c = L->conns[i];
		if (c->state == C_IDLE)
			return c;
		if (c->state == C_FREE && !spare)
			spare = c;
	}
	if (spare)
		return spare;
	struct conn **nc = realloc(L->conns, (L->n_conns + 1) * sizeof(*nc));
	struct conn *c = calloc(1, sizeof(*c));
	if (!nc || !c) {
		fprintf(stderr, "kpi-bench: out of memory for connection %zu\n", L->n_conns);
		exit(1);
	}
	c->fd = -1;
	http_resp_init(&c->resp);
	L->conns = nc;
	L->conns[L->n_conns++] = c;
	return c;
}

/* Starts request idx at time now (the clock read that allowed it). */
static void request_start(struct loop *L, long idx, bool warm, double now)
{
	struct conn *c = conn_get(L);
	c->idx = idx;
	c->warm = warm;
	c->retried = false;
	c->t_start = now;
	c->t_first = c->t_last = 0;
	c->chunks = 0;
	c->prompt_tokens = c->completion_tokens = -1;
	c->saw_done = false;
	c->stream_err[0] = '\0';
	c->n_itl = 0;
	if (warm)
		L->warm_issued++;
	else
		L->issued++;
	L->in_flight++;
	if (build_request(L->cfg, idx, &c->prompt_len, &c->max_tokens, &c->out)) {
		fprintf(stderr, "kpi-bench: out of memory building request %ld\n", idx);
		exit(1);
	}
	request_send(L, c);
}

/* ---- responses --------------------------------------------------------------- */

static void take_usage(struct conn *c, json_t *root)
{
	json_t *u = json_object_get(root, "usage");
	if (!json_is_object(u))
		return;
	json_t *pt = json_object_get(u, "prompt_tokens"), *ct = json_object_get(u, "completion_tokens");
	if (json_is_integer(pt))
		c->prompt_tokens = (long)json_integer_value(pt);
	if (json_is_integer(ct))
		c->completion_tokens = (long)json_integer_value(ct);
}

/* One SSE event of a 200 stream, received at time now. A content chunk is
 * one with non-empty choices, whatever its text: a token whose bytes are an
 * incomplete UTF-8 sequence still arrives as a chunk with empty text, and a
 * server may send the last token together with the finish_reason. The first
 * content chunk stops the TTFT clock. */
static void sse_event(struct conn *c, const char *data, double now)
{
	if (!strcmp(data, "[DONE]")) {
		c->saw_done = true;
		return;
	}
	json_error_t jerr;
	json_t *root = json_loads(data, JSON_ALLOW_NUL, &jerr);
	if (!root) {
		if (!c->stream_err[0])
			snprintf(c->stream_err, sizeof(c->stream_err), "bad JSON in SSE event: %.120s", jerr.text);
		return;
	}
	json_t *choices = json_object_get(root, "choices");
	if (json_is_array(choices) && json_array_size(choices) > 0) {
		if (!c->chunks)
			c->t_first = now;
		else
			itl_push(&c->itl, &c->n_itl, &c->cap_itl, (now - c->t_last) * 1e3);
		c->t_last = now;
		c->chunks++;
	}
	take_usage(c, root);
	json_t *err = json_object_get(root, "error");
	if (err && !json_is_null(err) && !c->stream_err[0]) {
		char *s = json_dumps(err, JSON_COMPACT);
		snprintf(c->stream_err, sizeof(c->stream_err), "error event: %s", s ? s : "?");
		free(s);
	}
	json_decref(root);
}

static void response_complete(struct loop *L, struct conn *c, double now)
{
	struct http_resp *r = &c->resp;
	if (r->status != 200) {
		request_finish(L, c, NULL, NULL);   /* counted by its status */
		return;
	}
	if (!r->event_stream) {
		/* a whole JSON answer: TTFT is its arrival, as for any non-stream client */
		json_error_t jerr;
		json_t *root = json_loadb(r->body.p ? r->body.p + r->body.off : "", r->body.len - r->body.off, JSON_ALLOW_NUL, &jerr);
		if (!root) {
			char d[200];
			snprintf(d, sizeof(d), "200 response body is not JSON: %s", jerr.text);
			request_finish(L, c, "protocol", d);
			return;
		}
		json_t *choices = json_object_get(root, "choices");
		bool has_choices = json_is_array(choices) && json_array_size(choices) > 0;
		take_usage(c, root);
		json_decref(root);
		if (!has_choices) {
			request_finish(L, c, "protocol", "200 response without choices");
			return;
		}
		c->t_first = c->t_last = now;
		c->chunks = 1;
		request_finish(L, c, NULL, NULL);
		return;
	}
	if (c->stream_err[0]) {
		request_finish(L, c, "stream", c->stream_err);
		return;
	}
	if (!c->saw_done) {
		request_finish(L, c, "stream", "stream ended without data: [DONE]");
		return;
	}
	if (!c->chunks) {
		request_finish(L, c, "stream", "stream carried no chunk with choices");
		return;
	}
	request_finish(L, c, NULL, NULL);
}

/* A kept-alive socket that the server closed before answering: the request
 * never reached it, so send it again, once, on a fresh connection. */
static bool retry_stale(struct loop *L, struct conn *c)
{
	if (!c->reused || c->got_bytes || c->retried)
		return false;
	epoll_ctl(L->ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	c->retried = true;
	c->state = C_RETRY;   /* reconnected by the scheduler, outside this epoll batch */
	return true;
}

static void conn_readable(struct loop *L, struct conn *c)
{
	char buf[65536];
	for (int rounds = 0; rounds < 16; rounds++) {
		ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
		double now = mono();
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			int err = n < 0 ? errno : 0;
			if (c->state == C_IDLE) {
				conn_close(L, c);   /* server closed an idle keep-alive socket */
				return;
			}
			if (retry_stale(L, c))
				return;
			int rc = http_resp_eof(&c->resp);
			if (rc == 1 && !err) {
				c->resp.conn_close = true;
				if (c->resp.status == 200 && c->resp.event_stream)
					while (sse_next(&c->resp.body, &c->ev))
						sse_event(c, c->ev.p, now);
				response_complete(L, c, now);
			} else if (err) {
				request_fail_errno(L, c, "recv", err);
			} else {
				request_finish(L, c, "closed", c->resp.err);
			}
			return;
		}
		if (c->state == C_IDLE) {
			conn_close(L, c);   /* bytes nobody asked for: drop the socket */
			return;
		}
		c->got_bytes = true;
		int rc = http_resp_feed(&c->resp, buf, (size_t)n);
		if (rc < 0) {
			request_finish(L, c, "protocol", c->resp.err);
			return;
		}
		if (c->resp.status == 200 && c->resp.event_stream)
			while (sse_next(&c->resp.body, &c->ev))
				sse_event(c, c->ev.p, now);
		if (rc == 1) {
			response_complete(L, c, now);
			return;
		}
	}
}

static void conn_event(struct loop *L, struct conn *c, uint32_t ev)
{
	if (c->fd < 0 || c->state == C_FREE || c->state == C_RETRY)
		return;   /* closed earlier in this batch */
	if (c->state == C_CONNECTING) {
		int err = 0;
		socklen_t len = sizeof(err);
		getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
		if (err) {
			request_fail_errno(L, c, "connect", err);
			return;
		}
		c->state = C_SENDING;
		if (conn_send(L, c))
			request_fail_errno(L, c, "send", errno);
		return;
	}
	if (c->state == C_SENDING) {
		if (ev & EPOLLIN) {
			conn_readable(L, c);   /* an early answer wins over the unsent rest */
			if (c->state != C_SENDING)
				return;
		}
		if (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP) && conn_send(L, c)) {
			int e = errno;
			if (!retry_stale(L, c))
				request_fail_errno(L, c, "send", e);
		}
		return;
	}
	if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
		conn_readable(L, c);
}

/* ---- the run --------------------------------------------------------------- */

/* Whether a measured request may start; *now is read afresh, so that one
 * started after a batch of events is not let through by the clock of the
 * loop turn, and becomes the request's start time. */
static bool may_issue(struct loop *L, double *now)
{
	const struct config *cfg = L->cfg;
	if (cfg->requests && L->issued >= cfg->requests)
		return false;
	*now = mono();
	if (cfg->duration && *now - L->t0 >= cfg->duration)
		return false;
	return true;
}

/* Start whatever is due now; returns seconds until something else is due
 * (or -1 when only responses can move the run on). */
static double schedule(struct loop *L, double now)
{
	const struct config *cfg = L->cfg;

	for (size_t i = 0; i < L->n_conns; i++)
		if (L->conns[i]->state == C_RETRY) {
			L->conns[i]->state = C_FREE;
			request_send(L, L->conns[i]);
		}

	if (!L->measuring) {
		long wconc = cfg->mode == MODE_CONCURRENCY ? cfg->concurrency : 64;
		while (L->warm_issued < cfg->warmup && L->in_flight < wconc)
			request_start(L, -1 - L->warm_issued, true, mono());
		if (L->warm_done < cfg->warmup)
			return -1;
		L->measuring = true;
		L->t0 = L->t_end = now = mono();
		L->next_arrival = now;
	}

	switch (cfg->mode) {
	case MODE_CONCURRENCY:
		while (L->in_flight < cfg->concurrency && may_issue(L, &now))
			request_start(L, L->issued, false, now);
		break;
	case MODE_BURST:
		while (may_issue(L, &now))
			request_start(L, L->issued, false, now);
		break;
	case MODE_RATE:
		while (L->next_arrival <= now && may_issue(L, &now)) {
			request_start(L, L->issued, false, now);
			L->next_arrival += rng_exp(&L->arrivals, 1.0 / cfg->rate);
		}
		if (may_issue(L, &now))
			return L->next_arrival - now;
		break;
	}
	return -1;
}

static void check_timeouts(struct loop *L, double now)
{
	for (size_t i = 0; i < L->n_conns; i++) {
		struct conn *c = L->conns[i];
		if (c->state == C_FREE || c->state == C_IDLE || c->state == C_RETRY)
			continue;
		if (now - c->t_start > L->cfg->timeout) {
			char d[96];
			snprintf(d, sizeof(d), "no complete response within --timeout %gs", L->cfg->timeout);
			request_finish(L, c, "timeout", d);
		}
	}
}

static void progress(struct loop *L, double now, bool tty, bool final)
{
	const struct config *cfg = L->cfg;
	long errors = 0;
	for (size_t i = 0; i < L->run->n_res; i++)
		errors += L->run->res[i].error != NULL;
	double el = L->measuring ? now - L->t0 : 0;
	char total[32] = "";
	if (cfg->requests)
		snprintf(total, sizeof(total), "/%ld", cfg->requests);
	if (!L->measuring)
		fprintf(stderr, "%skpi-bench: warm-up %ld/%ld%s", tty ? "\r" : "", L->warm_done,
			cfg->warmup, tty ? "\033[K" : "\n");
	else
		fprintf(stderr, "%skpi-bench: %6.1fs  done %ld%s  in flight %ld  errors %ld  %.2f req/s%s",
			tty ? "\r" : "", el, L->done, total, L->in_flight, errors,
			el > 0 ? L->done / el : 0.0, tty ? (final ? "\033[K\n" : "\033[K") : "\n");
}

static void raise_fd_limit(long want)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	if (rl.rlim_cur != RLIM_INFINITY && (rlim_t)want + 64 > rl.rlim_cur) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static int resolve(const struct config *cfg, struct addrinfo **ai)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	int rc = getaddrinfo(cfg->host, cfg->port, &hints, ai);
	if (rc) {
		fprintf(stderr, "kpi-bench: cannot resolve '%s': %s; check --url\n", cfg->host, gai_strerror(rc));
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct config cfg;
	parse_args(&cfg, argc, argv);

	struct run run = { 0 };
	struct loop L = { .cfg = &cfg, .run = &run, .ep = -1 };
	if (resolve(&cfg, &L.ai))
		return 1;
	rng_seed(&L.arrivals, cfg.seed ^ 0x5eed0a77a1ULL);
	raise_fd_limit(cfg.mode == MODE_BURST ? cfg.requests : cfg.mode == MODE_CONCURRENCY ? cfg.concurrency : 4096);

	struct sigaction sa = { .sa_handler = on_sigint };   /* no SA_RESTART: epoll_wait returns EINTR */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	L.ep = epoll_create1(EPOLL_CLOEXEC);
	if (L.ep < 0) {
		fprintf(stderr, "kpi-bench: epoll_create1: %s\n", strerror(errno));
		return 1;
	}

	bool tty = isatty(STDERR_FILENO);
	double tick = tty ? 0.5 : 10.0, next_progress = mono() + tick, next_timeouts = 0;
	struct epoll_event evs[256];
	for (;;) {
		double now = mono();
		if (interrupted)
			break;
		double due = schedule(&L, now), t;
		if (L.measuring && L.in_flight == 0 && !may_issue(&L, &t))
			break;
		double wait = next_progress - now;
		if (due >= 0 && due < wait)
			wait = due;
		if (wait > 0.1)
			wait = 0.1;   /* timeouts and --duration are checked at least this often */
		int n = epoll_wait(L.ep, evs, 256, wait > 0 ? (int)ceil(wait * 1e3) : 0);
		if (n < 0 && errno != EINTR) {
			fprintf(stderr, "kpi-bench: epoll_wait: %s\n", strerror(errno));
			return 1;
		}
		for (int i = 0; i < n; i++)
			conn_event(&L, evs[i].data.ptr, evs[i].events);
		now = mono();
		if (now >= next_timeouts) {
			check_timeouts(&L, now);
			next_timeouts = now + 0.1;
		}
		if (!cfg.quiet && now >= next_progress) {
			progress(&L, now, tty, false);
			next_progress = now + tick;
		}
	}
	if (!cfg.quiet && tty)
		progress(&L, mono(), tty, true);

	if (interrupted) {
		run.interrupted = true;
		for (size_t i = 0; i < L.n_conns; i++) {
			struct conn *c = L.conns[i];
			if (c->state != C_FREE && c->state != C_IDLE && !c->warm)
				run.in_flight_dropped++;
		}
		if (!L.measuring)
			L.t0 = L.t_end = mono();
	}
	run.wall_s = L.t_end > L.t0 ? L.t_end - L.t0 : 0;
	for (size_t i = 0; i < L.n_conns; i++) {
		conn_close(&L, L.conns[i]);
		http_resp_free(&L.conns[i]->resp);
		buf_free(&L.conns[i]->out);
		buf_free(&L.conns[i]->ev);
		free(L.conns[i]->itl);
		free(L.conns[i]);
	}
	free(L.conns);
	close(L.ep);
	freeaddrinfo(L.ai);

	report_apply_slo(&cfg, &run);
	int rc = 0;
	bool json_stdout = cfg.json_path && !strcmp(cfg.json_path, "-");
	bool csv_stdout = cfg.csv_path && !strcmp(cfg.csv_path, "-");
	if (!json_stdout && !csv_stdout)
		report_text(stdout, &cfg, &run);
	else
		report_text(stderr, &cfg, &run);
	if (cfg.json_path && report_json(cfg.json_path, &cfg, &run))
		rc = 1;
	if (cfg.csv_path && report_csv(cfg.csv_path, &run))
		rc = 1;

	long ok = 0;
	for (size_t i = 0; i < run.n_res; i++)
		ok += !run.res[i].error;
	free(run.res);
	free(run.itl);
	dist_free(&cfg.prompt_len);
	dist_free(&cfg.max_tokens);
	if (run.interrupted)
		return EXIT_INTERRUPTED;
	if (!ok) {
		fprintf(stderr, "kpi-bench: no request succeeded; see the errors above\n");
		return 1;
	}
	return rc;
}
