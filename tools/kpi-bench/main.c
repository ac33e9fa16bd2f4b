/* main.c - kpi-bench: load generator and client-side KPI meter for
 * OpenAI-compatible streaming servers. The command line, then the run
 * (client.c, paced by sched.c) and its reports (report.c), or a sweep of
 * runs (sweep.c, drawn by html.c). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/kpi-bench/bench.h"
#include "kpi_version.h"

#define EXIT_USAGE 2
#define EXIT_INTERRUPTED 130

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* ---- command line -------------------------------------------------------- */

static const char usage_text[] =
"usage: kpi-bench --url URL [options]\n"
"       kpi-bench --url URL --sweep rate|concurrency --slo LIST [options]\n"
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
"  --replay FILE          recorded traffic: a CSV with a header holding each\n"
"                         request's offset and lengths (kpi-bench's --csv, a\n"
"                         trace's requests table exported with sqlite3 -csv\n"
"                         -header, or offset_ms,prompt_len,output_len); each\n"
"                         request starts at its offset with its own prompt and\n"
"                         max_tokens (add --ignore-eos to get those lengths back)\n"
"  --replay-speed S       play the recording S times faster (default 1)\n"
"  --burstiness B         with --rate or --sweep rate: gamma arrivals whose gaps\n"
"                         have shape B (coefficient of variation 1/sqrt(B));\n"
"                         1 = Poisson (default), below 1 burstier, above smoother\n"
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
"  --baseline OLD.json    compare with a stored run (an earlier --json): a table of\n"
"                         TTFT/TPOT/e2e percentiles, the share within the SLO and\n"
"                         goodput (with --slo) and the error rate with their 95%\n"
"                         intervals; exit 3 when one is worse past the thresholds\n"
"                         and clear of the baseline's interval; repeat it with\n"
"                         several runs of the old build and their spread counts as\n"
"                         noise too (docs/bench.md, \"The regression gate\")\n"
"  --max-regress PCT      how much worse a percentile may get (default 10, and\n"
"                         1 ms); the error rate and the SLO share: 1 point\n"
"\n"
"sweep (capacity: the highest load that still meets the SLO):\n"
"  --sweep rate           Poisson (or --burstiness) runs from --sweep-start up,\n"
"                         doubling (or through --sweep-steps) until a run misses\n"
"                         the SLO, then bisecting between the last good and the\n"
"                         first bad rate to --sweep-precision\n"
"  --sweep concurrency    closed-loop runs at 1, 2, 4, ... --sweep-max (or\n"
"                         --sweep-steps), then the same bisection\n"
"                         Each point runs --warmup unmeasured requests, then\n"
"                         --duration S (default 10 s) and at least\n"
"                         --min-requests, or exactly --requests N; --slo is\n"
"                         required. A point meets the SLO only when its load\n"
"                         was sustained: answered at the rate sent (within 5%)\n"
"                         with TTFT not climbing from its first third to its\n"
"                         last. The answer is run again as long as the longest\n"
"                         point (or --confirm-duration); a miss there sends the\n"
"                         search lower (up to 8 times). A confirmation stops as\n"
"                         soon as more requests missed the SLO than --slo-share\n"
"                         allows of all it could send\n"
"  --min-requests N       a point past its --duration keeps sending until N\n"
"                         requests were sent (default 100)\n"
"  --confirm-duration S   confirm the answer for at least S seconds: as long as\n"
"                         the load must hold (default: the longest point's)\n"
"  --sweep-steps LIST     the loads to run, e.g. 2,4,6,8 (instead of doubling)\n"
"  --sweep-start X        the first load of the doubling (default 1)\n"
"  --sweep-max X          the highest load tried (default 1024 req/s, 64 for\n"
"                         concurrency)\n"
"  --sweep-precision F    bisect until bad/good - 1 <= F (default 0.1)\n"
"  --slo-share F          a load meets the SLO when at least this share of its\n"
"                         requests does (default 0.99)\n"
"  --knee-repeats N       run the knee's load N more times to show the noise\n"
"                         (default 2; 0 skips)\n"
"  --html FILE            one self-contained page with the curves (SVG)\n"
"  --trace-db FILE        a kpi-agent trace of the same server during the sweep:\n"
"                         adds the server-side phases of each point's requests\n"
"  --help                 this text\n"
"  --version              the version and the git commit it was built from\n"
"\n"
"Ctrl-C (or SIGTERM) stops the run and prints what was measured so far\n"
"(exit 130); a sweep keeps its finished points and writes --json and --html.\n"
"Exit status: 0 when the run finished and at least one request succeeded,\n"
"1 when none did or the server could not be reached, 2 for a bad command line,\n"
"3 when --baseline found a regression.\n";

enum {
	OPT_URL = 256, OPT_ENDPOINT, OPT_MODEL, OPT_REQUESTS, OPT_DURATION, OPT_WARMUP,
	OPT_CONC, OPT_RATE, OPT_BURST, OPT_PROMPT, OPT_TOKEN_IDS, OPT_MAXTOK, OPT_IGNORE_EOS,
	OPT_TEMP, OPT_NO_STREAM, OPT_SEED, OPT_SLO, OPT_TIMEOUT, OPT_JSON, OPT_CSV, OPT_QUIET,
	OPT_HELP, OPT_VERSION, OPT_REPLAY, OPT_REPLAY_SPEED, OPT_BURSTINESS, OPT_SWEEP, OPT_SWEEP_STEPS,
	OPT_SWEEP_START, OPT_SWEEP_MAX, OPT_SWEEP_PRECISION, OPT_SLO_SHARE, OPT_KNEE_REPEATS,
	OPT_MIN_REQUESTS, OPT_CONFIRM_DURATION, OPT_HTML, OPT_TRACE_DB, OPT_BASELINE, OPT_MAX_REGRESS,
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
	{ "baseline", required_argument, NULL, OPT_BASELINE },
	{ "max-regress", required_argument, NULL, OPT_MAX_REGRESS },
	{ "csv", required_argument, NULL, OPT_CSV },
	{ "quiet", no_argument, NULL, OPT_QUIET },
	{ "help", no_argument, NULL, OPT_HELP },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ "replay", required_argument, NULL, OPT_REPLAY },
	{ "replay-speed", required_argument, NULL, OPT_REPLAY_SPEED },
	{ "burstiness", required_argument, NULL, OPT_BURSTINESS },
	{ "sweep", required_argument, NULL, OPT_SWEEP },
	{ "sweep-steps", required_argument, NULL, OPT_SWEEP_STEPS },
	{ "sweep-start", required_argument, NULL, OPT_SWEEP_START },
	{ "sweep-max", required_argument, NULL, OPT_SWEEP_MAX },
	{ "sweep-precision", required_argument, NULL, OPT_SWEEP_PRECISION },
	{ "slo-share", required_argument, NULL, OPT_SLO_SHARE },
	{ "knee-repeats", required_argument, NULL, OPT_KNEE_REPEATS },
	{ "min-requests", required_argument, NULL, OPT_MIN_REQUESTS },
	{ "confirm-duration", required_argument, NULL, OPT_CONFIRM_DURATION },
	{ "html", required_argument, NULL, OPT_HTML },
	{ "trace-db", required_argument, NULL, OPT_TRACE_DB },
	{ 0 },
};

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

/* --token-ids[=A:B] */
static void parse_token_ids(struct config *cfg, const char *a)
{
	cfg->token_ids = true;
	if (!a)
		return;
	char *end, *end2;
	errno = 0;
	long lo = strtol(a, &end, 10), hi = *end == ':' ? strtol(end + 1, &end2, 10) : -1;
	if (errno || end == a || *end != ':' || *end2 || end2 == end + 1 || lo < 0 || hi < lo)
		usage_error("--token-ids='%s': expected A:B with 0 <= A <= B (token id range)", a);
	cfg->id_lo = lo;
	cfg->id_hi = hi;
}

static unsigned long long parse_seed(const char *a)
{
	char *end;
	errno = 0;
	unsigned long long s = strtoull(a, &end, 0);
	if (!*a || *end || errno || *a == '-')
		usage_error("--seed '%s': expected a non-negative integer", a);
	return s;
}

/* What the command line gave, for the checks that span several flags. */
struct seen {
	bool url, prompt, maxtok;
	int arrivals;                   /* flags that choose how requests arrive */
	const char *arrival_names[3];
	const char *replay_path, *sweep_only, *csv;   /* set by flags checked later */
	bool burstiness, replay_speed, sweep_max, min_requests;
};

static void set_arrivals(struct config *cfg, struct seen *seen, enum mode mode, const char *flag)
{
	cfg->mode = mode;
	seen->arrival_names[seen->arrivals++ % 3] = flag;
}

static void config_defaults(struct config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->endpoint = EP_COMPLETIONS;
	snprintf(cfg->model, sizeof(cfg->model), "kpi");
	cfg->mode = MODE_CONCURRENCY;
	cfg->concurrency = 1;
	cfg->stream = true;
	cfg->temperature = -1;
	cfg->seed = 1;
	cfg->max_regress_pct = 10;
	cfg->timeout = 600;
	cfg->id_lo = 3;
	cfg->id_hi = 258;
	cfg->burstiness = 1;
	cfg->replay_speed = 1;
	cfg->sweep_start = 1;
	cfg->sweep_precision = 0.1;
	cfg->slo_share = 0.99;
	cfg->knee_repeats = 2;
}

/* --sweep-steps 2,4,8: positive, ascending. */
static void parse_sweep_steps(struct config *cfg, const char *arg)
{
	char buf[1024];
	snprintf(buf, sizeof(buf), "%s", arg);
	char *save = NULL;
	cfg->n_sweep_steps = 0;
	for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		if (cfg->n_sweep_steps == SWEEP_MAX_STEPS)
			usage_error("--sweep-steps '%s': more than %d loads", arg, SWEEP_MAX_STEPS);
		double v = parse_double_flag("--sweep-steps", item, 0, true, "a positive load in a comma-separated list");
		if (cfg->n_sweep_steps && v <= cfg->sweep_steps[cfg->n_sweep_steps - 1])
			usage_error("--sweep-steps '%s': loads must rise (%g after %g)", arg, v,
				    cfg->sweep_steps[cfg->n_sweep_steps - 1]);
		cfg->sweep_steps[cfg->n_sweep_steps++] = v;
	}
	if (!cfg->n_sweep_steps)
		usage_error("--sweep-steps '%s': expected loads such as 2,4,8", arg);
}

/* The flags that shape a sweep or the arrivals; false when c is none. */
static bool parse_sweep_option(struct config *cfg, struct seen *seen, int c, const char *a)
{
	switch (c) {
	case OPT_REPLAY: seen->replay_path = a; set_arrivals(cfg, seen, MODE_REPLAY, "--replay"); return true;
	case OPT_REPLAY_SPEED:
		cfg->replay_speed = parse_double_flag("--replay-speed", a, 0, true, "a positive factor");
		seen->replay_speed = true;
		return true;
	case OPT_BURSTINESS:
		cfg->burstiness = parse_double_flag("--burstiness", a, 0, true, "a positive number (1 = Poisson)");
		seen->burstiness = true;
		return true;
	case OPT_SWEEP:
		if (!strcmp(a, "rate"))
			cfg->sweep = SWEEP_RATE;
		else if (!strcmp(a, "concurrency"))
			cfg->sweep = SWEEP_CONCURRENCY;
		else
			usage_error("--sweep '%s': expected rate or concurrency", a);
		return true;
	}
	if (c < OPT_SWEEP_STEPS || c > OPT_TRACE_DB)
		return false;
	for (const struct option *o = long_opts; o->name; o++)
		if (o->val == c)
			seen->sweep_only = o->name;
	switch (c) {
	case OPT_SWEEP_STEPS: parse_sweep_steps(cfg, a); break;
	case OPT_SWEEP_START: cfg->sweep_start = parse_double_flag("--sweep-start", a, 0, true, "a positive load"); break;
	case OPT_SWEEP_MAX:
		cfg->sweep_max = parse_double_flag("--sweep-max", a, 0, true, "a positive load");
		seen->sweep_max = true;
		break;
	case OPT_SWEEP_PRECISION:
		cfg->sweep_precision = parse_double_flag("--sweep-precision", a, 0, true, "a positive fraction, e.g. 0.1");
		break;
	case OPT_SLO_SHARE:
		cfg->slo_share = parse_double_flag("--slo-share", a, 0, true, "a share in (0, 1], e.g. 0.99");
		if (cfg->slo_share > 1)
			usage_error("--slo-share '%s': expected a share in (0, 1], e.g. 0.99", a);
		break;
	case OPT_KNEE_REPEATS: cfg->knee_repeats = parse_long_flag("--knee-repeats", a, 0, "0, 1 or 2"); break;
	case OPT_MIN_REQUESTS:
		cfg->min_requests = parse_long_flag("--min-requests", a, 1, "a positive integer");
		seen->min_requests = true;
		break;
	case OPT_CONFIRM_DURATION:
		cfg->confirm_s = parse_double_flag("--confirm-duration", a, 0, true, "seconds, e.g. 30");
		break;
	case OPT_HTML: cfg->html_path = a; break;
	case OPT_TRACE_DB: cfg->trace_db = a; break;
	}
	return true;
}

/* The flags that shape each request (target and workload). */
static void parse_request_option(struct config *cfg, struct seen *seen, int c, const char *a)
{
	switch (c) {
	case OPT_URL: parse_url(cfg, a); seen->url = true; break;
	case OPT_ENDPOINT:
		if (!strcmp(a, "completions"))
			cfg->endpoint = EP_COMPLETIONS;
		else if (!strcmp(a, "chat"))
			cfg->endpoint = EP_CHAT;
		else
			usage_error("--endpoint '%s': expected completions or chat", a);
		break;
	case OPT_MODEL: snprintf(cfg->model, sizeof(cfg->model), "%s", a); break;
	case OPT_PROMPT: dist_free(&cfg->prompt_len); parse_dist_flag(&cfg->prompt_len, "--prompt-len", a); seen->prompt = true; break;
	case OPT_MAXTOK: dist_free(&cfg->max_tokens); parse_dist_flag(&cfg->max_tokens, "--max-tokens", a); seen->maxtok = true; break;
	case OPT_TOKEN_IDS: parse_token_ids(cfg, a); break;
	case OPT_IGNORE_EOS: cfg->ignore_eos = true; break;
	case OPT_TEMP: cfg->temperature = parse_double_flag("--temperature", a, 0, false, "a number >= 0"); break;
	case OPT_NO_STREAM: cfg->stream = false; break;
	case OPT_SEED: cfg->seed = parse_seed(a); break;
	}
}

/* One flag from getopt_long: the run's size, pacing and outputs here, the
 * rest in parse_request_option. */
static void parse_option(struct config *cfg, struct seen *seen, int c, const char *a, char **argv)
{
	switch (c) {
	case OPT_REQUESTS: cfg->requests = parse_long_flag("--requests", a, 1, "a positive integer"); break;
	case OPT_DURATION:
		cfg->duration = parse_double_flag("--duration", a, 0, true, "a positive number of seconds");
		break;
	case OPT_WARMUP: cfg->warmup = parse_long_flag("--warmup", a, 0, "an integer >= 0"); break;
	case OPT_CONC:
		cfg->concurrency = parse_long_flag("--concurrency", a, 1, "a positive integer");
		set_arrivals(cfg, seen, MODE_CONCURRENCY, "--concurrency");
		break;
	case OPT_RATE:
		cfg->rate = parse_double_flag("--rate", a, 0, true, "a positive number of requests per second");
		set_arrivals(cfg, seen, MODE_RATE, "--rate");
		break;
	case OPT_BURST: set_arrivals(cfg, seen, MODE_BURST, "--burst"); break;
	case OPT_SLO: parse_slo(cfg, a); break;
	case OPT_TIMEOUT:
		cfg->timeout = parse_double_flag("--timeout", a, 0, true, "a positive number of seconds");
		break;
	case OPT_JSON: cfg->json_path = a; break;
	case OPT_BASELINE:
		if (cfg->n_baselines == BASELINE_MAX)
			usage_error("--baseline: at most %d runs", BASELINE_MAX);
		cfg->baseline_path[cfg->n_baselines++] = a;
		break;
	case OPT_MAX_REGRESS: {
		char *end;
		cfg->max_regress_pct = strtod(a, &end);
		if (end == a || *end || !(cfg->max_regress_pct >= 0))
			usage_error("--max-regress '%s': give a percentage, e.g. 10", a);
		break;
	}
	case OPT_CSV: cfg->csv_path = a; seen->csv = "--csv"; break;
	case OPT_QUIET: cfg->quiet = true; break;
	case OPT_HELP: fputs(usage_text, stdout); exit(0);
	case OPT_VERSION: printf("kpi-bench %s\n", KPI_VERSION_STRING); exit(0);
	case ':':
		usage_error("%s needs a value", argv[optind - 1]);
	case '?':
		if (optopt && optopt < 256)
			usage_error("unknown flag '-%c'", optopt);
		usage_error("unknown flag '%s'", argv[optind - 1]);
	default:
		if (!parse_sweep_option(cfg, seen, c, a))
			parse_request_option(cfg, seen, c, a);
	}
}

/* The checks that --sweep, --replay and --burstiness add. */
static void check_sweep_args(struct config *cfg, const struct seen *seen)
{
	if (cfg->sweep == SWEEP_NONE && seen->sweep_only)
		usage_error("--%s only applies to a sweep; add --sweep rate or --sweep concurrency", seen->sweep_only);
	if (seen->burstiness && cfg->mode != MODE_RATE && cfg->sweep != SWEEP_RATE)
		usage_error("--burstiness shapes open-loop arrivals; give it with --rate R or --sweep rate");
	if (seen->replay_speed && cfg->mode != MODE_REPLAY)
		usage_error("--replay-speed needs --replay FILE");
	if (cfg->sweep == SWEEP_NONE)
		return;
	if (seen->arrivals)
		usage_error("--sweep chooses each run's load; drop %s", seen->arrival_names[0]);
	if (!report_have_slo(cfg))
		usage_error("--sweep needs --slo, e.g. --slo ttft=200,tpot=50: the SLO decides the highest load");
	if (seen->csv)
		usage_error("--csv writes one run's requests; a sweep writes --json and --html");
	if (cfg->n_baselines)
		usage_error("--baseline compares one run with another; a sweep's capacity has no baseline yet");
	if (cfg->knee_repeats > 2)
		usage_error("--knee-repeats '%ld': expected 0, 1 or 2", cfg->knee_repeats);
	if (!seen->sweep_max)
		cfg->sweep_max = cfg->sweep == SWEEP_RATE ? 1024 : 64;
	/* points sized by time: a queue needs time, not a count, to settle */
	if (cfg->requests && seen->min_requests)
		usage_error("--min-requests is the floor of a --duration point, and --requests %ld already "
			    "fixes each point's count: give one of them", cfg->requests);
	if (!cfg->requests && !cfg->duration)
		cfg->duration = SWEEP_POINT_S;
	if (!cfg->requests && !seen->min_requests)
		cfg->min_requests = SWEEP_MIN_REQUESTS;
	if (cfg->sweep_max < cfg->sweep_start)
		usage_error("--sweep-max %g is below --sweep-start %g", cfg->sweep_max, cfg->sweep_start);
	if (cfg->sweep == SWEEP_CONCURRENCY)
		for (int i = 0; i < cfg->n_sweep_steps; i++)
			if (cfg->sweep_steps[i] != floor(cfg->sweep_steps[i]))
				usage_error("--sweep-steps: concurrency %g is not a whole number", cfg->sweep_steps[i]);
}

static void load_replay(struct config *cfg, const char *path)
{
	char err[512];
	if (replay_load(&cfg->replay, path, err, sizeof(err)))
		usage_error("--replay '%s': %s", path, err);
	if (cfg->replay.skipped)
		fprintf(stderr, "kpi-bench: --replay %s: %ld rows without an offset or lengths skipped "
			"(requests that never ran)\n", path, cfg->replay.skipped);
	if (!cfg->requests || cfg->requests > (long)cfg->replay.n)
		cfg->requests = (long)cfg->replay.n;
}

/* The checks across flags, and the defaults that depend on what was given. */
static void check_args(struct config *cfg, const struct seen *seen)
{
	if (!seen->url)
		usage_error("--url is required, e.g. --url http://127.0.0.1:8000");
	if (seen->arrivals > 1)
		usage_error("%s and %s both choose how requests arrive; give one of --concurrency, --rate, --burst, --replay",
			    seen->arrival_names[0], seen->arrival_names[1]);
	if (cfg->mode == MODE_BURST && !cfg->requests)
		usage_error("--burst needs --requests N (how many to send at once)");
	if (cfg->mode == MODE_BURST && cfg->duration)
		usage_error("--duration does not apply to --burst; give --requests N only");
	check_sweep_args(cfg, seen);
	if (cfg->mode == MODE_REPLAY)
		load_replay(cfg, seen->replay_path);
	if (!cfg->requests && !cfg->duration)
		cfg->requests = 100;
	if (!seen->prompt)
		dist_parse(&cfg->prompt_len, "128", NULL, 0);
	if (!seen->maxtok)
		dist_parse(&cfg->max_tokens, "64", NULL, 0);
	if (cfg->json_path && cfg->csv_path && !strcmp(cfg->json_path, "-") && !strcmp(cfg->csv_path, "-"))
		usage_error("--json - and --csv - both want stdout; send one of them to a file");
}

static void parse_args(struct config *cfg, int argc, char **argv)
{
	struct seen seen = { 0 };
	config_defaults(cfg);
	opterr = 0;   /* we word the errors ourselves */
	int c;
	while ((c = getopt_long(argc, argv, ":", long_opts, NULL)) != -1)
		parse_option(cfg, &seen, c, optarg, argv);
	if (optind < argc)
		usage_error("unexpected argument '%s' (every option is a --flag)", argv[optind]);
	check_args(cfg, &seen);
}

/* ---- the run ---------------------------------------------------------------- */

/* The text summary goes to stdout unless --json - or --csv - took it. */
static int write_reports(const struct config *cfg, struct run *run)
{
	report_apply_slo(cfg, run);
	int rc = 0;
	bool json_stdout = cfg->json_path && !strcmp(cfg->json_path, "-");
	bool csv_stdout = cfg->csv_path && !strcmp(cfg->csv_path, "-");
	report_text(json_stdout || csv_stdout ? stderr : stdout, cfg, run);
	if (cfg->json_path && report_json(cfg->json_path, cfg, run))
		rc = 1;
	if (cfg->csv_path && report_csv(cfg->csv_path, run))
		rc = 1;
	if (cfg->n_baselines) {
		int b = baseline_compare(cfg, run, json_stdout || csv_stdout ? stderr : stdout);
		if (b < 0)
			rc = 1;
		else if (b > 0 && !rc)
			rc = EXIT_REGRESSION;
	}
	return rc;
}

int main(int argc, char **argv)
{
	struct config cfg;
	parse_args(&cfg, argc, argv);

	struct sigaction sa = { .sa_handler = on_sigint };   /* no SA_RESTART: epoll_wait returns EINTR */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (cfg.sweep != SWEEP_NONE) {
		int rc = sweep_main(&cfg, &interrupted);
		dist_free(&cfg.prompt_len);
		dist_free(&cfg.max_tokens);
		return rc;
	}

	struct run run = { 0 };
	if (client_measure(&cfg, &run, &interrupted))
		return 1;

	int rc = write_reports(&cfg, &run);
	long ok = 0;
	for (size_t i = 0; i < run.n_res; i++)
		ok += !run.res[i].error;
	free(run.res);
	free(run.itl);
	dist_free(&cfg.prompt_len);
	dist_free(&cfg.max_tokens);
	replay_free(&cfg.replay);
	if (run.interrupted)
		return EXIT_INTERRUPTED;
	if (!ok) {
		fprintf(stderr, "kpi-bench: no request succeeded; see the errors above\n");
		return 1;
	}
	return rc;
}
