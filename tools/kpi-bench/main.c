/* main.c - kpi-bench: load generator and client-side KPI meter for
 * OpenAI-compatible streaming servers. The command line, then the run
 * (client.c, paced by sched.c) and its reports (report.c). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/kpi-bench/bench.h"

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
	cfg->timeout = 600;
	cfg->id_lo = 3;
	cfg->id_hi = 258;
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
	case OPT_CSV: cfg->csv_path = a; break;
	case OPT_QUIET: cfg->quiet = true; break;
	case OPT_HELP: fputs(usage_text, stdout); exit(0);
	case ':':
		usage_error("%s needs a value", argv[optind - 1]);
	case '?':
		if (optopt && optopt < 256)
			usage_error("unknown flag '-%c'", optopt);
		usage_error("unknown flag '%s'", argv[optind - 1]);
	default:
		parse_request_option(cfg, seen, c, a);
	}
}

/* The checks across flags, and the defaults that depend on what was given. */
static void check_args(struct config *cfg, const struct seen *seen)
{
	if (!seen->url)
		usage_error("--url is required, e.g. --url http://127.0.0.1:8000");
	if (seen->arrivals > 1)
		usage_error("%s and %s both choose how requests arrive; give one of --concurrency, --rate, --burst",
			    seen->arrival_names[0], seen->arrival_names[1]);
	if (cfg->mode == MODE_BURST && !cfg->requests)
		usage_error("--burst needs --requests N (how many to send at once)");
	if (cfg->mode == MODE_BURST && cfg->duration)
		usage_error("--duration does not apply to --burst; give --requests N only");
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
	return rc;
}

int main(int argc, char **argv)
{
	struct config cfg;
	parse_args(&cfg, argc, argv);

	struct run run = { 0 };
	struct client *cl = client_open(&cfg, &run);
	if (!cl)
		return 1;
	struct sigaction sa = { .sa_handler = on_sigint };   /* no SA_RESTART: epoll_wait returns EINTR */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	int failed = client_run(cl, &interrupted);
	client_close(cl);
	if (failed)
		return 1;

	int rc = write_reports(&cfg, &run);
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
