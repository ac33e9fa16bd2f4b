/* main.c - kpi-infer: flags, model selection, engine creation, then the
 * HTTP server (server.c) until SIGTERM drains it. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/engine.h"
#include "daemon/engine/gguf.h"
#include "daemon/engine/kldiv.h"
#include "daemon/engine/model_make.h"
#include "daemon/engine/qmatmul.h"
#include "daemon/server/server.h"
#include "kpi_version.h"

static const char usage[] =
"Usage: kpi-infer [OPTIONS]\n"
"       kpi-infer --role prefill|decode [OPTIONS]\n"
"       kpi-infer --role router --decode HOST:PORT[,...] [--prefill HOST:PORT[,...]]\n"
"       kpi-infer --make-model PATH [--preset tiny|small] [--seed N] [--type T]\n"
"       kpi-infer --model PATH --kl-divergence REFERENCE [--kl-text FILE]\n"
"\n"
"Llama-architecture inference behind an OpenAI-compatible HTTP API (SSE\n"
"streaming, continuous batching, paged KV cache) with USDT probes for kpiscope.\n"
"Prints 'listening on http://HOST:PORT' when ready; SIGTERM drains in-flight\n"
"requests and exits 0.\n"
"\n"
"Model:\n"
"  --model PATH              GGUF model to serve (default: the built-in tiny model,\n"
"                            generated once into ~/.cache/kpiscope/tiny-s0.gguf)\n"
"  --make-model PATH         write a built-in model to PATH and exit\n"
"  --preset tiny|small       with --make-model: which model (default tiny)\n"
"  --seed N                  with --make-model: weight seed (default 0)\n"
"  --type T                  with --make-model: the matrices' type: F32, F16\n"
"                            (default), Q8_0, Q4_0 or Q4_K (the same weights,\n"
"                            quantized as llama.cpp's formats lay them out)\n"
"  --kernels K               quantized matmul kernels: avx512-vnni, avx-vnni,\n"
"                            avx2 or scalar (default: the best this CPU runs)\n"
"\n"
"Accuracy (prints a report and exits):\n"
"  --kl-divergence REF       each position's next-token distribution of --model\n"
"                            against REF's (e.g. the F32 file it was quantized\n"
"                            from): KL divergence, top-1 agreement, perplexity,\n"
"                            as llama-perplexity --kl-divergence reports them\n"
"  --kl-text FILE            the text scored (default: seeded tokens)\n"
"  --kl-ctx N                tokens per chunk; the second half is scored\n"
"                            (default 256)\n"
"  --kl-chunks N             chunks (default 8, or as many as the text fills)\n"
"  --json                    the report as one JSON object\n"
"\n"
"Server:\n"
"  --host ADDR               address to bind (default 127.0.0.1)\n"
"  --port N                  TCP port (default 8000)\n"
"  --max-queue N             waiting requests before 429 Too Many Requests\n"
"                            (default 256)\n"
"  --max-body BYTES          largest request body, else 413 (default 1048576)\n"
"  --request-timeout S       a request's head and body must arrive within S\n"
"                            seconds of its first byte, else 408 (default 10)\n"
"  --idle-timeout S          close keep-alive connections idle for S seconds\n"
"                            (default 60)\n"
"  --max-conns N             open connections; more wait in the backlog\n"
"                            (default 10000)\n"
"  --reasoning-tokens N      serve the first N generated tokens of every request\n"
"                            as reasoning: chat sends them as reasoning_content\n"
"                            (delta.reasoning_content when streaming), text\n"
"                            completions inline as <think>...</think>; usage\n"
"                            counts them (default 0: none)\n"
"\n"
"Disaggregated prefill and decode (docs/disaggregation.md):\n"
"  --role ROLE               colocated (default): prefill and decode here;\n"
"                            prefill: serves POST /v1/kv/prefill, streams the\n"
"                            prompt's KV to the decode worker that asked;\n"
"                            decode: serves completions, fetching the KV from\n"
"                            the prefill worker a request names (x-kpi-prefill);\n"
"                            router: loads no model, forwards each request to a\n"
"                            decode worker and names its prefill worker\n"
"  --decode LIST             router: decode workers, HOST:PORT[,HOST:PORT...]\n"
"  --prefill LIST            router: prefill workers (none: decode workers\n"
"                            prefill themselves)\n"
"  --policy P                router: round-robin (default), least-loaded (from\n"
"                            each worker's /load) or prefix (prefill worker by\n"
"                            the prompt's first --prefix-bytes; decode least\n"
"                            loaded)\n"
"  --prefix-bytes N          router, --policy prefix: prompt bytes that pick the\n"
"                            prefill worker (default 256)\n"
"  --load-interval MS        router: how often each worker's /load is read\n"
"                            (default 50)\n"
"  --upstream-timeout S      router and decode: a worker that sends nothing for\n"
"                            S seconds fails the request (default 300)\n"
"  --prefix-cache on|off     keep full KV blocks of earlier prompts for reuse\n"
"                            (default: on for --role prefill, else off)\n"
"\n"
"Engine:\n"
"  --max-seqs N              running sequences per step (default 64)\n"
"  --max-batched-tokens N    tokens per step, prefill + decode (default 2048)\n"
"  --kv-blocks N             KV pool size in blocks (default: max-seqs full\n"
"                            contexts, capped)\n"
"  --block-size N            tokens per KV block (default 16)\n"
"  --backend cpu|cuda        where the forward pass runs (default cpu)\n"
"  --cupti PATH              load a CUPTI injection library (build/libkpi_cupti.so)\n"
"                            into the CUDA backend: sets CUDA_INJECTION64_PATH\n"
"  --batching continuous|static\n"
"                            scheduler policy (default continuous)\n"
"  --threads N               engine worker threads (default: online CPUs)\n"
"\n"
"  -h, --help                this text\n"
"  --version                 the version and the git commit it was built from\n"
"\n"
"API: POST /v1/completions, POST /v1/chat/completions, GET /v1/models,\n"
"GET /health, GET /load, GET /metrics; --role prefill: POST /v1/kv/prefill.\n"
"See docs/server.md and docs/disaggregation.md.\n";

enum {
	OPT_MODEL = 256, OPT_HOST, OPT_PORT, OPT_MAX_SEQS, OPT_MAX_BATCHED, OPT_MAX_QUEUE,
	OPT_KV_BLOCKS, OPT_BLOCK_SIZE, OPT_BACKEND, OPT_BATCHING, OPT_THREADS, OPT_MAX_BODY,
	OPT_REQ_TIMEOUT, OPT_IDLE_TIMEOUT, OPT_MAX_CONNS, OPT_MAKE_MODEL, OPT_PRESET, OPT_SEED, OPT_CUPTI,
	OPT_TYPE, OPT_KERNELS, OPT_KL, OPT_KL_TEXT, OPT_KL_CTX, OPT_KL_CHUNKS, OPT_JSON,
	OPT_ROLE, OPT_DECODE, OPT_PREFILL, OPT_POLICY, OPT_PREFIX_BYTES, OPT_LOAD_INTERVAL,
	OPT_UPSTREAM_TIMEOUT, OPT_PREFIX_CACHE,
	OPT_REASONING_TOKENS,
};

static const struct option options[] = {
	{ "model", required_argument, NULL, OPT_MODEL },
	{ "host", required_argument, NULL, OPT_HOST },
	{ "port", required_argument, NULL, OPT_PORT },
	{ "max-seqs", required_argument, NULL, OPT_MAX_SEQS },
	{ "max-batched-tokens", required_argument, NULL, OPT_MAX_BATCHED },
	{ "max-queue", required_argument, NULL, OPT_MAX_QUEUE },
	{ "kv-blocks", required_argument, NULL, OPT_KV_BLOCKS },
	{ "block-size", required_argument, NULL, OPT_BLOCK_SIZE },
	{ "backend", required_argument, NULL, OPT_BACKEND },
	{ "cupti", required_argument, NULL, OPT_CUPTI },
	{ "batching", required_argument, NULL, OPT_BATCHING },
	{ "threads", required_argument, NULL, OPT_THREADS },
	{ "max-body", required_argument, NULL, OPT_MAX_BODY },
	{ "request-timeout", required_argument, NULL, OPT_REQ_TIMEOUT },
	{ "idle-timeout", required_argument, NULL, OPT_IDLE_TIMEOUT },
	{ "max-conns", required_argument, NULL, OPT_MAX_CONNS },
	{ "reasoning-tokens", required_argument, NULL, OPT_REASONING_TOKENS },
	{ "make-model", required_argument, NULL, OPT_MAKE_MODEL },
	{ "preset", required_argument, NULL, OPT_PRESET },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "type", required_argument, NULL, OPT_TYPE },
	{ "kernels", required_argument, NULL, OPT_KERNELS },
	{ "kl-divergence", required_argument, NULL, OPT_KL },
	{ "kl-text", required_argument, NULL, OPT_KL_TEXT },
	{ "kl-ctx", required_argument, NULL, OPT_KL_CTX },
	{ "kl-chunks", required_argument, NULL, OPT_KL_CHUNKS },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "role", required_argument, NULL, OPT_ROLE },
	{ "decode", required_argument, NULL, OPT_DECODE },
	{ "prefill", required_argument, NULL, OPT_PREFILL },
	{ "policy", required_argument, NULL, OPT_POLICY },
	{ "prefix-bytes", required_argument, NULL, OPT_PREFIX_BYTES },
	{ "load-interval", required_argument, NULL, OPT_LOAD_INTERVAL },
	{ "upstream-timeout", required_argument, NULL, OPT_UPSTREAM_TIMEOUT },
	{ "prefix-cache", required_argument, NULL, OPT_PREFIX_CACHE },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ 0 },
};

/* A whole decimal number within [lo, hi], or exit 2 naming the flag. */
static long long int_flag(const char *flag, const char *s, long long lo, long long hi)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi) {
		fprintf(stderr, "kpi-infer: --%s expects a whole number from %lld to %lld, got '%s'\n",
			flag, lo, hi, s);
		exit(2);
	}
	return v;
}

/* One of two words, a (0) or b (1), or exit 2 naming the flag. */
static int choice_flag(const char *flag, const char *s, const char *a, const char *b)
{
	if (!strcmp(s, a))
		return 0;
	if (!strcmp(s, b))
		return 1;
	fprintf(stderr, "kpi-infer: --%s expects %s or %s, got '%s'\n", flag, a, b, s);
	exit(2);
}

/* One of n words, or exit 2 naming the flag and the words. */
static int word_flag(const char *flag, const char *s, const char *const *words, int n)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(s, words[i]))
			return i;
	fprintf(stderr, "kpi-infer: --%s expects", flag);
	for (int i = 0; i < n; i++)
		fprintf(stderr, "%s %s", i ? (i == n - 1 ? " or" : ",") : "", words[i]);
	fprintf(stderr, ", got '%s'\n", s);
	exit(2);
}

/* A comma-separated list of HOST:PORT into out (pointing into s, which is
 * modified); exit 2 naming the flag and the bad entry. */
static int workers_flag(const char *flag, char *s, const char **out)
{
	int n = 0;
	for (char *save = NULL, *w = strtok_r(s, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
		const char *colon = strrchr(w, ':');
		char *end = NULL;
		long port = colon ? strtol(colon + 1, &end, 10) : 0;
		if (!colon || colon == w || !end || *end || port < 1 || port > 65535 ||
		    strlen(w) >= 128) {
			fprintf(stderr, "kpi-infer: --%s expects HOST:PORT[,HOST:PORT...], got '%s'\n",
				flag, w);
			exit(2);
		}
		if (n == SERVER_MAX_WORKERS) {
			fprintf(stderr, "kpi-infer: --%s takes at most %d workers\n", flag,
				SERVER_MAX_WORKERS);
			exit(2);
		}
		out[n++] = w;
	}
	return n;
}

/* What the flags say beyond the engine's and the server's configuration. */
struct flags {
	const char *model, *make_path, *preset, *cupti;
	unsigned long long seed;
	bool seed_set;
	int type; /* --type: a GGML type id, -1 unset */
	struct kldiv_opts kl; /* --kl-divergence and its options */
	bool kl_opts;
	int prefix_cache;  /* -1: the role's default */
	bool router_flags; /* a flag only the router takes */
};

/* Fills ec, sc and f from argv. Returns -1 to go on, or main's exit status. */
static int parse_flags(int argc, char **argv, struct engine_config *ec,
		       struct server_config *sc, struct flags *f)
{
	int opt;
	while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
		switch (opt) {
		case OPT_MODEL: f->model = optarg; break;
		case OPT_HOST: sc->host = optarg; break;
		case OPT_PORT: sc->port = (int)int_flag("port", optarg, 1, 65535); break;
		case OPT_MAX_SEQS: ec->max_seqs = (int)int_flag("max-seqs", optarg, 1, 4096); break;
		case OPT_MAX_BATCHED:
			ec->max_batched_tokens = (int)int_flag("max-batched-tokens", optarg, 1, 1 << 24);
			break;
		case OPT_MAX_QUEUE: sc->max_queue = (int)int_flag("max-queue", optarg, 1, 1 << 24); break;
		case OPT_KV_BLOCKS: ec->kv_blocks = (int)int_flag("kv-blocks", optarg, 1, 1 << 26); break;
		case OPT_BLOCK_SIZE: ec->block_size = (int)int_flag("block-size", optarg, 1, 1024); break;
		case OPT_THREADS: ec->threads = (int)int_flag("threads", optarg, 0, 1024); break;
		case OPT_MAX_BODY:
			sc->max_body = (size_t)int_flag("max-body", optarg, 1, 1LL << 30);
			break;
		case OPT_REQ_TIMEOUT:
			sc->request_timeout_s = (int)int_flag("request-timeout", optarg, 1, 86400);
			break;
		case OPT_IDLE_TIMEOUT:
			sc->idle_timeout_s = (int)int_flag("idle-timeout", optarg, 1, 86400);
			break;
		case OPT_MAX_CONNS: sc->max_conns = (int)int_flag("max-conns", optarg, 1, 1 << 20); break;
		case OPT_REASONING_TOKENS:
			sc->reasoning_tokens = (int)int_flag("reasoning-tokens", optarg, 0, 1 << 24);
			break;
		case OPT_BACKEND:
			ec->backend = choice_flag("backend", optarg, "cpu", "cuda") ?
				ENGINE_BACKEND_CUDA : ENGINE_BACKEND_CPU;
			break;
		case OPT_BATCHING:
			ec->batching = choice_flag("batching", optarg, "continuous", "static") ?
				ENGINE_BATCH_STATIC : ENGINE_BATCH_CONTINUOUS;
			break;
		case OPT_CUPTI: f->cupti = optarg; break;
		case OPT_MAKE_MODEL: f->make_path = optarg; break;
		case OPT_PRESET:
			choice_flag("preset", optarg, "tiny", "small");
			f->preset = optarg;
			break;
		case OPT_SEED:
			f->seed = (unsigned long long)int_flag("seed", optarg, 0, LLONG_MAX);
			f->seed_set = true;
			break;
		case OPT_TYPE:
			f->type = model_make_parse_type(optarg);
			if (f->type < 0) {
				fprintf(stderr, "kpi-infer: --type expects F32, F16, Q8_0, Q4_0 or Q4_K, got '%s'\n",
					optarg);
				return 2;
			}
			break;
		case OPT_KERNELS: {
			char err[256];
			int isa = qmm_isa_parse(optarg);
			if (isa < 0) {
				fprintf(stderr, "kpi-infer: --kernels expects avx512-vnni, avx-vnni, avx2 or scalar, got '%s'\n",
					optarg);
				return 2;
			}
			if (qmm_isa_set(isa, err, sizeof(err))) {
				fprintf(stderr, "kpi-infer: --kernels %s: %s\n", optarg, err);
				return 2;
			}
			break;
		}
		case OPT_KL: f->kl.reference = optarg; break;
		case OPT_KL_TEXT: f->kl.text = optarg; f->kl_opts = true; break;
		case OPT_KL_CTX: f->kl.ctx = (int)int_flag("kl-ctx", optarg, 8, 1 << 20); f->kl_opts = true; break;
		case OPT_KL_CHUNKS:
			f->kl.chunks = (int)int_flag("kl-chunks", optarg, 1, 1 << 20);
			f->kl_opts = true;
			break;
		case OPT_JSON: f->kl.json = true; f->kl_opts = true; break;
		case OPT_ROLE: {
			static const char *const roles[] = { "colocated", "prefill", "decode", "router" };
			sc->role = (enum server_role)word_flag("role", optarg, roles, 4);
			break;
		}
		case OPT_DECODE:
			sc->router.n_decode = workers_flag("decode", optarg, sc->router.decode);
			f->router_flags = true;
			break;
		case OPT_PREFILL:
			sc->router.n_prefill = workers_flag("prefill", optarg, sc->router.prefill);
			f->router_flags = true;
			break;
		case OPT_POLICY: {
			static const char *const pol[] = { "round-robin", "least-loaded", "prefix" };
			sc->router.policy = (enum kpi_route_policy)(word_flag("policy", optarg, pol, 3) +
								    KPI_ROUTE_ROUND_ROBIN);
			f->router_flags = true;
			break;
		}
		case OPT_PREFIX_BYTES:
			sc->router.prefix_bytes = (int)int_flag("prefix-bytes", optarg, 1, 1 << 20);
			f->router_flags = true;
			break;
		case OPT_LOAD_INTERVAL:
			sc->router.load_interval_ms = (int)int_flag("load-interval", optarg, 1, 60000);
			f->router_flags = true;
			break;
		case OPT_UPSTREAM_TIMEOUT:
			sc->upstream_timeout_s = (int)int_flag("upstream-timeout", optarg, 1, 86400);
			break;
		case OPT_PREFIX_CACHE:
			f->prefix_cache = choice_flag("prefix-cache", optarg, "off", "on");
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		case 'V':
			printf("kpi-infer %s\n", KPI_VERSION_STRING);
			return 0;
		default:
			fprintf(stderr, "Try 'kpi-infer --help' for the list of flags.\n");
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kpi-infer: unexpected argument '%s' (flags start with --; see --help)\n",
			argv[optind]);
		return 2;
	}
	if (sc->role == ROLE_ROUTER && sc->router.n_decode == 0) {
		fprintf(stderr, "kpi-infer: --role router needs --decode HOST:PORT[,...]: the decode "
			"workers it forwards to\n");
		return 2;
	}
	if (sc->role != ROLE_ROUTER && f->router_flags) {
		fprintf(stderr, "kpi-infer: --decode, --prefill, --policy, --prefix-bytes and "
			"--load-interval go with --role router\n");
		return 2;
	}
	if ((sc->role == ROLE_PREFILL || sc->role == ROLE_DECODE) &&
	    ec->batching == ENGINE_BATCH_STATIC) {
		fprintf(stderr, "kpi-infer: --batching static is the single-process baseline; "
			"--role %s needs continuous batching\n", sc->role == ROLE_PREFILL ? "prefill" :
			"decode");
		return 2;
	}
	return -1;
}

/* --make-model PATH: writes the model and exits. */
static int make_model(const struct flags *f)
{
	char err[512];
	const char *preset = f->preset ? f->preset : "tiny";
	if (f->model) {
		fprintf(stderr, "kpi-infer: --make-model writes a model and exits; drop --model\n");
		return 2;
	}
	uint32_t type = f->type >= 0 ? (uint32_t)f->type : GGML_F16;
	if (model_make_type(f->make_path, preset, f->seed, type, err, sizeof(err)) < 0) {
		fprintf(stderr, "kpi-infer: %s\n", err);
		return 1;
	}
	printf("wrote %s model (seed %llu, %s) to %s\n", preset, f->seed, ggml_type_name(type), f->make_path);
	return 0;
}

/* --kl-divergence REF: the report, then exit. */
static int kl_divergence(struct flags *f, const char *model, int threads)
{
	char err[512];
	f->kl.model = model;
	f->kl.threads = threads;
	if (kldiv_run(&f->kl, stdout, err, sizeof(err))) {
		fprintf(stderr, "kpi-infer: --kl-divergence: %s\n", err);
		return 1;
	}
	return 0;
}

/* CUDA reads CUDA_INJECTION64_PATH when the backend initialises the driver,
 * which engine_create does: set it before. Returns 0, or 2 (message printed). */
static int cupti_setup(const char *cupti, enum engine_backend_kind backend)
{
	if (backend != ENGINE_BACKEND_CUDA) {
		fprintf(stderr, "kpi-infer: --cupti only applies to --backend cuda\n");
		return 2;
	}
	if (access(cupti, R_OK) != 0) {
		fprintf(stderr, "kpi-infer: --cupti %s: %s (build it with make: build/libkpi_cupti.so)\n",
			cupti, strerror(errno));
		return 2;
	}
	setenv("CUDA_INJECTION64_PATH", cupti, 1);
	return 0;
}

int main(int argc, char **argv)
{
	struct engine_config ec = {
		.max_seqs = 64, .max_batched_tokens = 2048, .kv_blocks = 0, .block_size = 16,
		.threads = 0, .batching = ENGINE_BATCH_CONTINUOUS, .backend = ENGINE_BACKEND_CPU,
	};
	struct server_config sc = {
		.host = "127.0.0.1", .port = 8000, .max_queue = 256, .max_body = 1 << 20,
		.request_timeout_s = 10, .idle_timeout_s = 60, .max_conns = 10000,
		.upstream_timeout_s = 300,
		.router = { .policy = KPI_ROUTE_ROUND_ROBIN, .prefix_bytes = 256,
			    .load_interval_ms = 50 },
	};
	struct flags f = { .type = -1, .prefix_cache = -1 };
	int rc = parse_flags(argc, argv, &ec, &sc, &f);
	if (rc >= 0)
		return rc;
	if (f.make_path)
		return make_model(&f);
	if (f.preset || f.seed_set || f.type >= 0) {
		fprintf(stderr, "kpi-infer: --preset, --seed and --type only go with --make-model PATH\n");
		return 2;
	}
	if (f.kl_opts && !f.kl.reference) {
		fprintf(stderr, "kpi-infer: --kl-text, --kl-ctx, --kl-chunks and --json only go with --kl-divergence REF\n");
		return 2;
	}

	/* Block the shutdown signals before any thread exists (the engine's
	 * workers included): the server takes them through a signalfd. */
	sigset_t ss;
	sigemptyset(&ss);
	sigaddset(&ss, SIGTERM);
	sigaddset(&ss, SIGINT);
	pthread_sigmask(SIG_BLOCK, &ss, NULL);
	signal(SIGPIPE, SIG_IGN);

	if (sc.role == ROLE_ROUTER) {
		if (f.model || f.cupti) {
			fprintf(stderr, "kpi-infer: --role router loads no model: drop --model/--cupti\n");
			return 2;
		}
		rc = server_run(NULL, &sc);
		if (rc == 0)
			fprintf(stderr, "kpi-infer: drained, exiting\n");
		return rc;
	}

	char err[512], default_path[4096];
	const char *model = f.model;
	if (!model) {
		if (model_default_path(default_path, sizeof(default_path), err, sizeof(err)) < 0) {
			fprintf(stderr, "kpi-infer: no --model given and the built-in model is "
				"unavailable: %s\n", err);
			return 1;
		}
		model = default_path;
	}
	ec.model_path = model;
	if (f.kl.reference)
		return kl_divergence(&f, model, ec.threads);
	if (f.cupti && cupti_setup(f.cupti, ec.backend))
		return 2;
	ec.prefix_cache = f.prefix_cache >= 0 ? f.prefix_cache == 1 : sc.role == ROLE_PREFILL;
	ec.fingerprint = sc.role == ROLE_PREFILL || sc.role == ROLE_DECODE;
	ec.kv_digests = sc.role == ROLE_PREFILL; /* its stream's checksum, once per block */

	struct engine *e = engine_create(&ec, err, sizeof(err));
	if (!e) {
		fprintf(stderr, "kpi-infer: cannot start the %s engine on %s: %s\n",
			ec.backend == ENGINE_BACKEND_CUDA ? "cuda" : "cpu", model, err);
		return 1;
	}
	const struct model_info *mi = engine_model(e);
	fprintf(stderr, "kpi-infer: model %s (%s, %d layers, dim %d), %.1f MiB of weights, %s kernels\n",
		mi->name, mi->weight_type, mi->n_layers, mi->dim, engine_weight_bytes(e) / 1048576.0,
		engine_kernels(e));
	const char *base = strrchr(model, '/');
	sc.model_label = base ? base + 1 : model;
	sc.block_size = ec.block_size;
	rc = server_run(e, &sc);
	engine_destroy(e);
	if (rc == 0)
		fprintf(stderr, "kpi-infer: drained, exiting\n");
	return rc;
}
