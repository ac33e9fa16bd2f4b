/* main.c - kpi-agent: flags, start-up checks, load, then the loop that drains
 * the ring buffer into the assembler and SQLite; attach.c follows the targets. */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <getopt.h>
#include <linux/capability.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>
#include "kpi.skel.h"
#include "agent/track/assemble.h"
#include "agent/track/bus.h"
#include "agent/sources/cost.h"
#include "agent/sources/energy.h"
#include "agent/sources/attach.h"
#include "agent/sources/hold.h"
#include "agent/sinks/exporters.h"
#include "agent/sources/gpu.h"
#include "agent/sources/tls.h"
#include "agent/sources/llama.h"
#include "agent/host/container.h"
#include "agent/host/host.h"
#include "agent/track/http_path.h"
#include "agent/track/trajectory.h"
#include "agent/track/split_infer.h"
#include "agent/sinks/http_serve.h"
#include "agent/sources/losses.h"
#include "agent/host/peer_addr.h"
#include "agent/host/privdrop.h"
#include "agent/sinks/retain.h"
#include "agent/sinks/side_store.h"
#include "agent/sinks/store.h"
#include "agent/host/targets.h"
#include "kpi_version.h"

#define RESCAN_NS   500000000ull    /* look for new and exited targets */
#define SAMPLE_NS  1000000000ull

static struct env {
	const char *db;
	pid_t pids[KPI_MAX_TARGETS];
	int n_pids;
	const char *exe;
	char exe_real[PATH_MAX];
	uint16_t ports[KPI_MAX_TARGETS];
	int n_ports;
	struct container_sel sel; /* --container, --pod */
	bool http_only;
	int64_t http_timeout_ns; /* --http-timeout DURATION */
	int64_t task_idle_gap_ns; /* --task-idle-gap DURATION */
	int flush_ms;
	int ringbuf_mb;
	bool token_detail;
	bool no_exec_hold;       /* --no-exec-hold */
	bool release_held;       /* --release-held */
	bool store_peer_addrs;   /* --store-peer-addrs */
	double duration;
	bool verbose;
	const char *metrics;     /* --metrics ADDR:PORT */
	const char *otlp;        /* --otlp URL */
	const char *user;        /* --user NAME (NULL: kpiscope when it exists) */
	long max_backlog;        /* --max-backlog N */
	int64_t retain_ns;       /* --retain DURATION; 0: for ever */
	long max_db_mb;          /* --max-db-mb N; 0: no bound */
	const char *powercap_root; /* --powercap-root DIR */
	double price_per_hour;   /* --price-per-hour USD; < 0: none */
} env = { .db = TRACE_STORE_DEFAULT_PATH, .flush_ms = 200, .ringbuf_mb = 16,
	      .http_timeout_ns = HTTP_PATH_TIMEOUT_NS, .task_idle_gap_ns = TRAJ_IDLE_GAP_NS,
	      .max_backlog = TRACE_STORE_DEFAULT_BACKLOG, .retain_ns = RETAIN_DEFAULT_KEEP_NS,
	      .max_db_mb = RETAIN_DEFAULT_MAX_MB, .powercap_root = ENERGY_POWERCAP_DEFAULT,
	      .price_per_hour = -1 };

static volatile sig_atomic_t exiting;

static const char usage[] =
"Usage: kpi-agent [OPTION]...\n"
"Record where every kpi-infer request spends its time (network in, queue,\n"
"prefill, decode, network out) with eBPF, into a SQLite trace; for any other\n"
"OpenAI-compatible server (HTTP/1.1, HTTP/2, gRPC), TTFT, inter-event gaps and\n"
"the network phases from the HTTP exchange on its sockets.\n"
"\n"
"  --db PATH          trace database (default " TRACE_STORE_DEFAULT_PATH ";\n"
"                     its directory is created 0750, the file 0640)\n"
"  --pid PID          trace this process (repeatable); default: every running\n"
"                     kpi-infer, and every one that starts later from its exec\n"
"  --exe PATH         trace processes running this executable, now and later\n"
"  --port PORT        trace the process(es) listening on this local TCP port\n"
"                     (repeatable), found again when another takes the port\n"
"                     in any network namespace (two pods on 8000: two targets)\n"
"  --container NAME|ID-PREFIX\n"
"                     of the processes the other flags (or discovery) find, trace\n"
"                     only those in this container: its name (podman's, the\n"
"                     Kubernetes container name) or the start of its runtime id\n"
"  --pod [NAMESPACE/]NAME\n"
"                     ... only those in this Kubernetes pod (any namespace\n"
"                     without one); with --container, that container of it.\n"
"                     Read from the cgroup and the runtime's state, no API\n"
"                     server (docs/agent.md, Containers and pods)\n"
"  --http-only        follow every target from the HTTP exchange on its sockets\n"
"                     (source 'http'), even a kpi-infer with its USDT probes,\n"
"                     and probe no engine library (no llama.cpp uprobes):\n"
"                     queue and prefill are then inferred from stream timing;\n"
"                     a --pid/--exe/--port process without kpi probes is\n"
"                     followed so anyway (docs/agent.md, Tracing any HTTP server);\n"
"                     TLS is read through SSL_read/SSL_write uprobes on the\n"
"                     libssl it maps, or its executable's own OpenSSL (Node's),\n"
"                     or Go's crypto/tls in a Go executable (stripped too);\n"
"                     another TLS stack (GnuTLS, rustls): 'TLS not readable'\n"
"  --http-timeout DURATION\n"
"                     an HTTP exchange that moves no byte this long ends as\n"
"                     end_reason 'timeout' (N followed by s, m or h; default 60s):\n"
"                     raise it for servers that think longer before their first\n"
"                     byte\n"
"  --task-idle-gap DURATION\n"
"                     a process that serves nothing (a command-line agent) starts\n"
"                     a new task after making no call this long, for calls that\n"
"                     carry no traceparent or gen_ai.conversation.id (default 2s;\n"
"                     docs/agent.md, Tasks)\n"
"  --no-exec-hold     in discovery mode, do not stop a kpi-infer at the exec of a\n"
"                     build the agent has not attached yet (by default it waits,\n"
"                     10-20 ms once per new file, until its probes are in place, so\n"
"                     its first requests are traced; docs/agent.md, Targets), nor a\n"
"                     --port server at its listen()\n"
"  --release-held     continue every process that a kpi-agent which is gone (killed,\n"
"                     crashed) left stopped at its exec or listen(), then exit: what\n"
"                     the systemd unit's ExecStopPost= runs (an agent also does it\n"
"                     when it starts, and its guard, kpi-hold-guard, when the agent\n"
"                     alone dies); a process stopped by anyone else is left so\n"
"  --flush-ms N       write to the database every N ms, one transaction (default 200)\n"
"  --ringbuf-mb N     BPF ring buffer size in MiB, a power of two (default 16)\n"
"  --token-detail     also store every token's write time (table tokens)\n"
"  --store-peer-addrs store the address of a connection's remote end in full\n"
"                     (default: this host's addresses in full, any other as a\n"
"                     keyed hash, the key in DB.peerkey, root's; docs/security.md)\n"
"  --duration S       stop after S seconds (default: until SIGINT/SIGTERM)\n"
"  --metrics ADDR:PORT\n"
"                     serve Prometheus /metrics there (a bare PORT binds\n"
"                     127.0.0.1; default off); see docs/fleet.md\n"
"  --otlp URL         export one OpenTelemetry span per request to an OTLP/HTTP\n"
"                     JSON receiver, http:// or https://, e.g.\n"
"                     http://127.0.0.1:4318 (default off;\n"
"                     OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_MAX_EXPORT_BATCH_SIZE,\n"
"                     OTEL_BSP_SCHEDULE_DELAY, OTEL_EXPORTER_OTLP_TIMEOUT,\n"
"                     OTEL_EXPORTER_OTLP_CERTIFICATE and OTEL_SERVICE_NAME\n"
"                     are honoured; docs/fleet.md)\n"
"  --user NAME        after loading, run as this user with only CAP_BPF,\n"
"                     CAP_PERFMON and CAP_SYS_PTRACE (and CAP_SYS_ADMIN where the\n"
"                     kernel wants it for uprobes) (default: " PRIVDROP_DEFAULT_USER " when\n"
"                     that user exists; 'root' keeps uid 0; capabilities are\n"
"                     dropped either way); see docs/security.md\n"
"  --max-backlog N    while the database cannot be written (disk full), keep at\n"
"                     most N requests (and N steps, N samples) in memory; later\n"
"                     ones are shed and counted (default 100000)\n"
"  --retain DURATION  remove rows older than this (N followed by s, m, h or d;\n"
"                     0 keeps everything) (default 14d)\n"
"  --max-db-mb N      keep the trace's rows under N MiB, removing the oldest\n"
"                     first (0: no bound) (default 4096); what retention removes\n"
"                     is counted (meta loss_retention_rows_total)\n"
"  --price-per-hour USD\n"
"                     the machine's (or GPU's) price an hour: each request's\n"
"                     cost_usd, the idle cost, /metrics kpi_cost_usd_total\n"
"                     (default: none, cost_usd NULL); docs/cost.md\n"
"  --powercap-root DIR\n"
"                     where the RAPL energy counters are (intel-rapl:* zones)\n"
"                     (default " ENERGY_POWERCAP_DEFAULT "); GPUs are read\n"
"                     through NVML where libnvidia-ml.so.1 exists\n"
"  -v, --verbose      say which programs were chosen; libbpf's debug output\n"
"  -h, --help         this help\n"
"  --version          the version, the git commit it was built from, and whether\n"
"                     this kernel has BTF, the BPF ring buffer, uprobes and USDT\n"
"                     semaphores\n"
"\n"
"Targets that have libkpi_cupti.so loaded (CUDA_INJECTION64_PATH) also get\n"
"their GPU kernels recorded (gpu_kernels, steps.gpu_busy_ns and the requests'\n"
"prefill_gpu_ns / decode_gpu_ns; docs/cupti.md).\n"
"HTTP-mode targets that map a llama.cpp library defining llama_decode also get\n"
"the engine's split from uprobes on it: 'libllama' steps, and requests with\n"
"queue, prefill, decode and prefix-cache reuse (source 'http+libllama';\n"
"docs/agent.md, llama.cpp servers).\n"
"\n"
"Needs root, or CAP_BPF + CAP_PERFMON. Prints 'writing PATH' once ready,\n"
"'attached to pid N' for each target ('..., traced N ms after its exec' for\n"
"one that started later: a kpi-infer whose executable the agent has seen is\n"
"followed from its first instruction, its probes attached to the file for\n"
"every process) and 'detached from pid N' when one exits. The exit line counts\n"
"the requests that arrived before a target's attach completed. SIGINT/SIGTERM\n"
"flush the trace and exit 0. Queries: docs/queries.md.\n"
"\n"
"KPI_AGENT_DISABLE=name,... makes the agent act as if the kernel lacked these\n"
"features (syscall_tp, raw_tp, tcp_probe_tp, sched_tp, task_storage, task_regs,\n"
"sched_info, proc_tp; btf, ringbuf, uprobe, usdt_sem: refused with what to do), to\n"
"exercise its fallbacks; docs/agent.md.\n";

static void die_usage(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "kpi-agent: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'kpi-agent --help'.\n");
	exit(2);
}

/* s as a number in [lo, hi], or nan when it is none or outside (the caller
 * says what the flag wants). */
static double parse_real(const char *s, double lo, double hi)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	return errno || end == s || *end || !(v >= lo && v <= hi) ? NAN : v;
}

static long parse_num(const char *flag, const char *s, long lo, long hi)
{
	char *end;
	long v;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		die_usage("%s wants an integer from %ld to %ld, got '%s'", flag, lo, hi, s);
	return v;
}

/* "30s", "15m", "12h", "14d" or "0" as ns. */
static int64_t parse_duration(const char *flag, const char *s)
{
	static const struct { char unit; int64_t ns; } units[] = {
		{ 's', 1000000000ll }, { 'm', 60000000000ll }, { 'h', 3600000000000ll },
		{ 'd', 86400000000000ll },
	};
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (!errno && end != s && v == 0 && !*end)
		return 0;
	if (!errno && end != s && v > 0 && !strcmp(end, "ms") && v <= INT64_MAX / 1000000ll)
		return v * 1000000ll;
	for (size_t i = 0; !errno && end != s && v > 0 && end[0] && !end[1] && i < 4; i++)
		if (*end == units[i].unit && v <= INT64_MAX / units[i].ns)
			return v * units[i].ns;
	die_usage("%s wants a duration like 300ms, 30s, 15m, 12h or 14d (or 0), got '%s'", flag, s);
	return 0;
}

/* Which processes and how their HTTP is followed: --pid, --exe, --port,
 * --http-only, --http-timeout, --task-idle-gap, --no-exec-hold, --release-held.
 * false: not one of these. */
static bool parse_targets_option(int c)
{
	char why[512];

	switch (c) {
	case 'p':
		if (env.n_pids == KPI_MAX_TARGETS)
			die_usage("at most %d --pid flags", KPI_MAX_TARGETS);
		env.pids[env.n_pids++] = (pid_t)parse_num("--pid", optarg, 1, INT_MAX);
		break;
	case 'e':
		if (!realpath(optarg, env.exe_real))
			die_usage("--exe %s: %s", optarg, strerror(errno));
		env.exe = env.exe_real;
		break;
	case 'T':
		if (env.n_ports == KPI_MAX_TARGETS)
			die_usage("at most %d --port flags", KPI_MAX_TARGETS);
		env.ports[env.n_ports++] = (uint16_t)parse_num("--port", optarg, 1, 65535);
		break;
	case 'K':
	case 'Q':
		if ((c == 'K' ? container_sel_container : container_sel_pod)(&env.sel, optarg, why,
									   sizeof(why)))
			die_usage("%s", why);
		break;
	case 'H':
		env.http_only = true;
		break;
	case 'W':
		env.http_timeout_ns = parse_duration("--http-timeout", optarg);
		if (!env.http_timeout_ns)
			die_usage("--http-timeout wants a duration above 0, like 60s or 10m");
		break;
	case 'X':
		env.no_exec_hold = true;
		break;
	case 'L':
		env.release_held = true;
		break;
	case 'G':
		env.task_idle_gap_ns = parse_duration("--task-idle-gap", optarg);
		if (!env.task_idle_gap_ns)
			die_usage("--task-idle-gap wants a duration above 0, like 2s or 300ms");
		break;
	default:
		return false;
	}
	return true;
}

/* The trace: --db, --flush-ms, --ringbuf-mb, --token-detail, --store-peer-addrs, --max-backlog, --retain, --max-db-mb. false: not one of these. */
static bool parse_store_option(int c)
{
	switch (c) {
	case 'd':
		if (!*optarg)
			die_usage("--db wants a path");
		env.db = optarg;
		break;
	case 'f':
		env.flush_ms = (int)parse_num("--flush-ms", optarg, 1, 3600000);
		break;
	case 'r':
		env.ringbuf_mb = (int)parse_num("--ringbuf-mb", optarg, 1, 4096);
		if (env.ringbuf_mb & (env.ringbuf_mb - 1))
			die_usage("--ringbuf-mb must be a power of two (1, 2, 4, ...), got %d", env.ringbuf_mb);
		break;
	case 't':
		env.token_detail = true;
		break;
	case 'A':
		env.store_peer_addrs = true;
		break;
	case 'B':
		env.max_backlog = parse_num("--max-backlog", optarg, 1, 100000000);
		break;
	case 'R':
		env.retain_ns = parse_duration("--retain", optarg);
		break;
	case 'S':
		env.max_db_mb = parse_num("--max-db-mb", optarg, 0, 1L << 30);
		break;
	default:
		return false;
	}
	return true;
}

/* What else goes out: --metrics, --otlp, --user, --price-per-hour, --powercap-root, --duration. false: not one of these. */
static bool parse_outputs_option(int c)
{
	switch (c) {
	case 'M': {
		char host[256], why[256];
		int port;
		if (http_serve_parse_addr(optarg, host, sizeof(host), &port, why, sizeof(why)))
			die_usage("--metrics %s", why);
		env.metrics = optarg;
		break;
	}
	case 'O':
		if (strncmp(optarg, "http://", 7) && strncmp(optarg, "https://", 8))
			die_usage("--otlp wants an http:// or https:// URL (OTLP/HTTP JSON), "
				  "e.g. http://127.0.0.1:4318, got '%s'", optarg);
		env.otlp = optarg;
		break;
	case 'u':
		if (!*optarg)
			die_usage("--user wants a user name");
		env.user = optarg;
		break;
	case 'P':
		env.price_per_hour = parse_real(optarg, 0, 1e9);
		if (isnan(env.price_per_hour))
			die_usage("--price-per-hour wants a price in USD (0 or more), got '%s'", optarg);
		break;
	case 'C':
		if (!*optarg)
			die_usage("--powercap-root wants a directory");
		env.powercap_root = optarg;
		break;
	case 'D':
		env.duration = parse_real(optarg, 0, INFINITY);
		if (isnan(env.duration) || env.duration <= 0)
			die_usage("--duration wants a positive number of seconds, got '%s'", optarg);
		break;
	default:
		return false;
	}
	return true;
}

/* The version, the commit, and what this kernel offers of what the agent
 * needs (the ring buffer's probe needs CAP_BPF: unknown without). */
static void print_version(void)
{
	struct host_features f = { 0 };
	struct utsname u;

	host_probe_kernel(&f);
	printf("kpi-agent %s\n", KPI_VERSION_STRING);
	printf("kernel %s: BTF %s, ring buffer %s, uprobes %s, USDT semaphores %s\n",
	       uname(&u) ? "?" : u.release, f.btf ? "yes" : "no",
	       f.ringbuf ? "yes" : f.bpf_refused ? "unknown (needs CAP_BPF)" : "no",
	       f.uprobe ? "yes" : "no", f.usdt_sem ? "yes" : "no");
}

static void parse_args(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "db", required_argument, NULL, 'd' },
		{ "pid", required_argument, NULL, 'p' },
		{ "exe", required_argument, NULL, 'e' },
		{ "port", required_argument, NULL, 'T' },
		{ "container", required_argument, NULL, 'K' },
		{ "pod", required_argument, NULL, 'Q' },
		{ "http-only", no_argument, NULL, 'H' },
		{ "http-timeout", required_argument, NULL, 'W' },
		{ "task-idle-gap", required_argument, NULL, 'G' },
		{ "flush-ms", required_argument, NULL, 'f' },
		{ "ringbuf-mb", required_argument, NULL, 'r' },
		{ "token-detail", no_argument, NULL, 't' },
		{ "store-peer-addrs", no_argument, NULL, 'A' },
		{ "duration", required_argument, NULL, 'D' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "metrics", required_argument, NULL, 'M' },
		{ "otlp", required_argument, NULL, 'O' },
		{ "user", required_argument, NULL, 'u' },
		{ "max-backlog", required_argument, NULL, 'B' },
		{ "retain", required_argument, NULL, 'R' },
		{ "max-db-mb", required_argument, NULL, 'S' },
		{ "no-exec-hold", no_argument, NULL, 'X' },
		{ "release-held", no_argument, NULL, 'L' },
		{ "price-per-hour", required_argument, NULL, 'P' },
		{ "powercap-root", required_argument, NULL, 'C' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{},
	};
	int c;

	while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
		if (parse_targets_option(c) || parse_store_option(c) || parse_outputs_option(c))
			continue;
		switch (c) {
		case 'v':
			env.verbose = true;
			break;
		case 'h':
			fputs(usage, stdout);
			exit(0);
		case 'V':
			print_version();
			exit(0);
		default:
			die_usage("unknown or incomplete option");
		}
	}
	if (optind < argc)
		die_usage("unexpected argument '%s'", argv[optind]);
	if ((env.n_pids || env.n_ports) && env.exe)
		die_usage("--exe excludes --pid and --port");
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list args)
{
	if (level == LIBBPF_DEBUG && !env.verbose)
		return 0;
	if (!env.verbose && level == LIBBPF_INFO)
		return 0;
	/* a server without probes is traced in HTTP mode, which the attach line says */
	if (!env.verbose && strstr(fmt, "no USDT notes section"))
		return 0;
	return vfprintf(stderr, fmt, args);
}

/* Nothing traced yet: what the agent waits for. */
static void say_waiting(void)
{
	char in[512] = "";

	if (container_sel_any(&env.sel)) {
		snprintf(in, sizeof(in), " in ");
		container_sel_describe(&env.sel, in + 4, sizeof(in) - 4);
	}
	if (env.n_ports)
		printf("waiting for a process to listen on port %u%s\n", env.ports[0], in);
	else if (env.n_pids)
		printf("waiting for a --pid process%s\n", in);
	else
		printf("waiting for %s to start%s\n", env.exe ? env.exe : TARGET_DEFAULT_NAME, in);
}

/* --metrics on a port below 1024 needs CAP_NET_BIND_SERVICE when it binds. */
static bool metrics_low_port(void)
{
	char host[256], why[256];
	int port = 0;

	return env.metrics && !http_serve_parse_addr(env.metrics, host, sizeof(host), &port, why,
						     sizeof(why)) && port > 0 && port < 1024;
}

static void on_signal(int sig)
{
	exiting = 1;
}


/* ---- the agent's state ------------------------------------------------------------ */

struct agent {
	struct kpi_bpf *skel;
	struct ring_buffer *rb;
	struct bus *bus;                     /* every record, to every sink in turn */
	struct assembler *asm_;
	struct trace_store *store;
	struct host_features feat;
	struct attach *at;                   /* the targets and the links */
	int n_cpus;
	struct agent_gpu *gpu;               /* NULL: GPU collection off */
	struct agent_tls *tls;               /* NULL: TLS exchanges not read */
	struct loss_probe losses;            /* the kernel side's losses */
	struct exporters exp;
	struct agent_cost *cost;             /* NULL: cost and energy off */
	struct agent_llama *llama;           /* NULL: llama.cpp's engine split off */
	struct side_store *side;             /* the GPU and cost rows' connection */
};


static struct kpi_runq runq_total(struct agent *ag, __u32 pid)
{
	struct kpi_runq v = { 0 };
	bpf_map__lookup_elem(ag->skel->maps.runq_total, &pid, sizeof(pid), &v, sizeof(v), 0);
	return v;
}

static int handle_event(void *ctx, void *data, size_t size)
{
	struct agent *ag = ctx;

	if (!attach_event(ag->at, data, size))          /* processes starting, ending */
		assemble_event(ag->asm_, data, size);   /* counts a malformed one */
	return 0;
}

/* ---- writing -------------------------------------------------------------------------- */

/* After the trace store's flush, so that the rows the GPU columns update exist. */
static void gpu_flush(struct agent *ag, uint64_t now, bool final)
{
	static uint64_t last_err;
	char err[512];

	if (!agent_gpu_flush(ag->gpu, now, err, sizeof(err)))
		return;
	if (final || now - last_err >= SAMPLE_NS) {
		fprintf(stderr, "kpi-agent: %s\n", err);
		last_err = now;
	}
}

static void flush(struct agent *ag, uint64_t now, bool final)
{
	static uint64_t last_err, failing_since;
	char err[512];
	size_t pending = trace_store_pending(ag->store);
	struct kpi_inflight_view live = assemble_inflight_view(ag->asm_);

	if (!trace_store_flush(ag->store, &live, now, losses_bpf_counter(&ag->losses, KPI_CNT_DROPS), err, sizeof(err))) {
		if (failing_since) {
			uint64_t shed_req, shed_rows;
			trace_store_shed(ag->store, &shed_req, &shed_rows);
			fprintf(stderr, "kpi-agent: writing the trace again after %.1f s of errors: %zu rows "
				"written now, %llu requests and %llu other rows shed in all\n",
				(double)(now - failing_since) / 1e9, pending,
				(unsigned long long)shed_req, (unsigned long long)shed_rows);
			failing_since = 0;
		}
		return;
	}
	if (!failing_since)
		failing_since = now;
	/* once per interval, not once per flush; the BPF side keeps running */
	if (final || now - last_err >= SAMPLE_NS) {
		fprintf(stderr, "kpi-agent: %s\n", err);
		last_err = now;
	}
}

/* The loss ledger's running totals, from the kernel side, the store and the
 * assembler, to every sink (the trace's losses rows and meta, /metrics). */
static void losses_sample(struct agent *ag, uint64_t now, struct kpi_loss_record *l)
{
	uint64_t shed_req, shed_rows;

	*l = (struct kpi_loss_record){ .t = now };
	losses_collect(&ag->losses, now, l);
	trace_store_shed(ag->store, &shed_req, &shed_rows);
	l->total[KPI_LOSS_SHED_ROWS] = shed_req + shed_rows;
	l->total[KPI_LOSS_RETENTION_ROWS] = trace_store_retained(ag->store);
	l->total[KPI_LOSS_UNSHIPPED_ROWS] = trace_store_unshipped(ag->store);
	assemble_losses(ag->asm_, l);
}

/* "losses: 3 ringbuf_drops, 1 orphans" or "losses: none" */
static void losses_print(const struct kpi_loss_record *l)
{
	int n = 0;

	printf("losses:");
	for (int c = 0; c < KPI_LOSS__COUNT; c++)
		if (l->total[c])
			printf("%s %llu %s", n++ ? "," : "", (unsigned long long)l->total[c], kpi_loss_name(c));
	printf("%s\n", n ? "" : " none");
}

static void sample(struct agent *ag, uint64_t now)
{
	uint32_t pids[KPI_MAX_TARGETS];
	struct kpi_runq runq[KPI_MAX_TARGETS];
	int n = attach_live_pids(ag->at, pids, KPI_MAX_TARGETS);

	for (int i = 0; i < n; i++)
		runq[i] = runq_total(ag, pids[i]);
	/* the kernel counts a wait in runq_total before it sends the wait's
	 * RUNQ_BY event: read the totals first, then the events, so that the
	 * sample's named waits are those its totals hold */
	ring_buffer__consume(ag->rb);
	assemble_sample(ag->asm_, now, pids, runq, n, losses_bpf_counter(&ag->losses, KPI_CNT_DROPS));
	/* every target: kpi-infer's steps split by tokens, an HTTP-mode
	 * target's requests by their time in flight */
	agent_cost_sample(ag->cost, now, pids, n);
	struct kpi_loss_record l;
	losses_sample(ag, now, &l);
}

/* ---- start-up ------------------------------------------------------------------------- */

/* Privileges, tracefs and the kernel's features: 0, or -1 with the message
 * printed. */
static int check_host(struct agent *ag, struct privdrop *priv)
{
	char err[512];
	bool mounted;

	if (host_check_pid_ns(err, sizeof(err)) || host_check_privileges(err, sizeof(err)) ||
	    privdrop_plan(priv, env.user, metrics_low_port(), err, sizeof(err))) {
		fprintf(stderr, "kpi-agent: %s\n", err);
		return -1;
	}
	if (!env.no_exec_hold && !env.n_pids)
		privdrop_keep_kill(priv);
	/* --port finds the process behind a listening socket in /proc/PID/fd,
	 * which is 0500 and owned by the process's user: a server that runs as
	 * another user (nginx's workers) is found only with DAC read-search */
	if (env.n_ports)
		priv->keep |= 1ULL << CAP_DAC_READ_SEARCH;
	if (host_ensure_tracefs(&mounted, err, sizeof(err))) {
		fprintf(stderr, "kpi-agent: %s\n", err);
		return -1;
	}
	if (mounted)
		printf("mounted tracefs at /sys/kernel/tracing\n");
	host_probe_features(&ag->feat);
	if (host_check_kernel(&ag->feat, err, sizeof(err))) {
		fprintf(stderr, "kpi-agent: %s\n", err);
		return -1;
	}
	return 0;
}

/* The trace store, the GPU side, the privilege drop, the assembler with its
 * sinks and the ring buffer: everything between the global attach and the
 * first target.  0, or -1 with the message printed. */
static int open_outputs(struct agent *ag, struct privdrop *priv)
{
	char err[512], said[640];
	struct kpi_sink sink;

	ag->store = trace_store_open(env.db, env.token_detail, err, sizeof(err));
	if (!ag->store) {
		fprintf(stderr, "kpi-agent: %s\n", err);
		return -1;
	}
	/* the trace's key, root's: read before the privilege drop */
	if (peer_addr_open(env.db, env.store_peer_addrs, err, sizeof(err)))
		fprintf(stderr, "kpi-agent: %s\n", err);
	trace_store_set_max_backlog(ag->store, (size_t)env.max_backlog);
	trace_store_set_retention(ag->store, env.retain_ns, (int64_t)env.max_db_mb << 20);
	ag->side = side_store_open(env.db, trace_store_run_id(ag->store), err, sizeof(err));
	if (!ag->side)
		fprintf(stderr, "kpi-agent: GPU kernels, cost and energy will not be recorded: %s\n", err);
	ag->gpu = ag->side ? agent_gpu_open(ag->side, env.verbose, err, sizeof(err)) : NULL;
	if (ag->side && !ag->gpu)
		fprintf(stderr, "kpi-agent: GPU kernels will not be recorded, nor steps split per request "
			"by their sequences: %s\n", err);
	/* --http-only: no engine probes at all, so every HTTP row's split is the
	 * inferred one (compared against another agent's measured one) */
	ag->llama = env.http_only ? NULL : agent_llama_open(err, sizeof(err));
	if (!ag->llama && !env.http_only)
		fprintf(stderr, "kpi-agent: llama.cpp servers will be traced from HTTP only: %s\n", err);
	ag->cost = ag->side ? agent_cost_open(ag->side, env.powercap_root, env.price_per_hour, err,
					      sizeof(err)) : NULL;
	if (ag->side && !ag->cost)
		fprintf(stderr, "kpi-agent: cost and energy will not be attributed: %s\n", err);
	agent_cost_listen(ag->cost, ag->gpu);
	/* loaded and attached (the USDT probes attach with what is kept, as
	 * they will for every kpi-infer that starts later); before any thread */
	if (privdrop_own_db(priv, env.db, err, sizeof(err)) ||
	    privdrop_apply(priv, said, sizeof(said), err, sizeof(err))) {
		fprintf(stderr, "kpi-agent: %s\n", err);
		return -1;
	}
	printf("%s\n", said);
	/* it needs no more than the main loop; the hold guard it forks comes
	 * before any other thread */
	attach_watchdog_start(ag->at);
	ag->bus = bus_new();
	if (!ag->bus || !(ag->asm_ = assemble_new(ag->bus))) {
		fprintf(stderr, "kpi-agent: out of memory\n");
		return -1;
	}
	assemble_set_tls_query(ag->asm_, agent_tls_readable, ag->tls);
	assemble_set_http_timeout(ag->asm_, (uint64_t)env.http_timeout_ns);
	assemble_set_task_idle_gap(ag->asm_, (uint64_t)env.task_idle_gap_ns);
	/* the sinks, in the order every record reaches them */
	sink = trace_store_sink(ag->store);
	bus_add(ag->bus, &sink);
	if (ag->cost) {
		sink = agent_cost_sink(ag->cost);
		bus_add(ag->bus, &sink);
		agent_cost_watch_http(ag->cost, assemble_http_in_flight, ag->asm_);
	}
	if (exporters_start(&ag->exp, env.metrics, env.otlp, err, sizeof(err))) {
		fprintf(stderr, "kpi-agent: %s\n", err);
		return -1;
	}
	for (int i = 0; i < ag->exp.n_sinks; i++)
		bus_add(ag->bus, &ag->exp.sinks[i]);
	agent_cost_metrics(ag->cost, ag->exp.prom);
	ag->rb = ring_buffer__new(bpf_map__fd(ag->skel->maps.events), handle_event, ag, NULL);
	if (!ag->rb) {
		fprintf(stderr, "kpi-agent: cannot open the BPF ring buffer: %s\n", strerror(errno));
		return -1;
	}
	if (ag->gpu && agent_gpu_add_ring(ag->gpu, ag->rb, err, sizeof(err))) {
		fprintf(stderr, "kpi-agent: GPU kernels will not be recorded, nor steps split per request "
			"by their sequences: %s\n", err);
		agent_cost_listen(ag->cost, NULL);
		agent_gpu_close(ag->gpu);
		ag->gpu = NULL;
	}
	if (ag->llama && agent_llama_connect(ag->llama, ag->bus, ag->rb, err, sizeof(err))) {
		fprintf(stderr, "kpi-agent: llama.cpp servers will be traced from HTTP only: %s\n", err);
		agent_llama_close(ag->llama);
		ag->llama = NULL;
	}
	attach_set_consumers(ag->at, ag->rb, ag->asm_);
	/* the side objects follow the targets, told them at once by attach */
	attach_add_side(ag->at, agent_gpu_side(ag->gpu));
	attach_add_side(ag->at, agent_tls_side(ag->tls));
	attach_add_side(ag->at, agent_llama_side(ag->llama));
	return 0;
}

/* ---- the loop ------------------------------------------------------------------------- */

/* Drains the ring, samples, rescans and flushes on their clocks until a
 * signal or --duration.  0, or -1 when polling fails. */
static int poll_loop(struct agent *ag)
{
	uint64_t start = host_mono_ns(), next_flush, next_rescan, next_sample;
	int r;

	next_flush = start + (uint64_t)env.flush_ms * 1000000ull;
	next_rescan = start + RESCAN_NS;
	next_sample = start + SAMPLE_NS;
	sample(ag, start);
	while (!exiting) {
		uint64_t now = host_mono_ns(), wake = next_flush;
		if (next_rescan < wake)
			wake = next_rescan;
		if (next_sample < wake)
			wake = next_sample;
		int timeout = wake > now ? (int)((wake - now) / 1000000ull) + 1 : 0;
		r = ring_buffer__poll(ag->rb, timeout);
		if (r < 0 && r != -EINTR) {
			fprintf(stderr, "kpi-agent: polling the ring buffer failed: %s\n", strerror(-r));
			return -1;
		}
		/* events are submitted without a wake-up until the ring fills up:
		 * a poll that timed out has not read them */
		ring_buffer__consume(ag->rb);
		attach_pending(ag->at);         /* targets met at their exec, or gone */
		now = host_mono_ns();
		if (env.duration > 0 && now - start >= (uint64_t)(env.duration * 1e9))
			break;
		if (now >= next_sample) {
			sample(ag, now);
			next_sample += SAMPLE_NS;
			if (next_sample <= now)
				next_sample = now + SAMPLE_NS;
		}
		if (now >= next_rescan) {
			peer_addr_refresh();
			attach_rescan(ag->at);
			next_rescan = now + RESCAN_NS;
		}
		if (now >= next_flush) {
			assemble_flush(ag->asm_, now, false);       /* HTTP requests whose split is decided */
			agent_llama_flush(ag->llama, now, false);   /* the requests it held, into this flush */
			flush(ag, now, false);
			gpu_flush(ag, now, false);
			agent_cost_flush(ag->cost, now, false);
			next_flush += (uint64_t)env.flush_ms * 1000000ull;
			if (next_flush <= now)
				next_flush = now + (uint64_t)env.flush_ms * 1000000ull;
		}
	}
	return 0;
}

/* The exit lines: everything already in the ring is written first. */
static void finish(struct agent *ag)
{
	struct assemble_stats st;
	uint64_t shed_req, shed_rows;
	char gpu_said[512];
	struct kpi_loss_record lost;

	/* with the ledger's final totals */
	ring_buffer__consume(ag->rb);
	assemble_finish(ag->asm_);      /* calls held for evidence, tasks still open */
	assemble_release_held(ag->asm_);
	losses_sample(ag, host_mono_ns(), &lost);
	assemble_flush(ag->asm_, host_mono_ns(), true);
	agent_llama_flush(ag->llama, host_mono_ns(), true);
	flush(ag, host_mono_ns(), true);
	gpu_flush(ag, host_mono_ns(), true);
	agent_cost_flush(ag->cost, host_mono_ns(), true);
	assemble_stats(ag->asm_, &st);
	trace_store_shed(ag->store, &shed_req, &shed_rows);
	printf("stopped: %llu requests (%llu rejected), %llu events, %llu ring-buffer drops, "
	       "%llu requests arrived before the attach completed\n",
	       (unsigned long long)st.requests, (unsigned long long)st.rejected,
	       (unsigned long long)st.events, (unsigned long long)losses_bpf_counter(&ag->losses, KPI_CNT_DROPS),
	       (unsigned long long)st.before_attach);
	printf("at target exits: %llu finished requests recorded, %llu cut off (those the engine "
	       "saw recorded with end_reason target_exit); %llu requests "
	       "shed while the database could not be written; %zu rows unwritten\n",
	       (unsigned long long)st.exit_completed, (unsigned long long)st.exit_cut,
	       (unsigned long long)shed_req, trace_store_pending(ag->store));
	uint64_t linked = st.hops_out[1] + st.hops_out[2] + st.hops_out[3] + st.hops_out[4];
	if (linked + st.hops_out[0])
		printf("hops: %llu outbound exchanges linked to the request they served (%llu by "
		       "header, %llu by thread, %llu by the only one open, %llu by the id its response "
		       "relayed), %llu unlinked (%llu while several were open)\n",
		       (unsigned long long)linked, (unsigned long long)st.hops_out[1],
		       (unsigned long long)st.hops_out[2], (unsigned long long)st.hops_out[3],
		       (unsigned long long)st.hops_out[4], (unsigned long long)st.hops_out[0],
		       (unsigned long long)st.hops_ambiguous);
	if (st.pd_joined + st.pd_partial)
		printf("disaggregated: %llu requests joined across router, decode and prefill workers, "
		       "%llu with a worker's row missing\n", (unsigned long long)st.pd_joined,
		       (unsigned long long)st.pd_partial);
	if (st.tasks[0] + st.tasks[1] + st.tasks[2] + st.tasks[3])
		printf("tasks: %llu (%llu of inbound requests, %llu by traceparent, %llu by "
		       "conversation id, %llu by idle gaps), %llu escalations\n",
		       (unsigned long long)(st.tasks[0] + st.tasks[1] + st.tasks[2] + st.tasks[3]),
		       (unsigned long long)st.tasks[0], (unsigned long long)st.tasks[1],
		       (unsigned long long)st.tasks[2], (unsigned long long)st.tasks[3],
		       (unsigned long long)st.escalations);
	struct container_counts cc;
	container_counts(&cc);
	if (cc.resolved + cc.unknown_shape + cc.bad_config + cc.huge_config)
		printf("containers: %llu resolved (%llu named by their runtime's state), %llu cgroups of an "
		       "unknown shape (no container named), %llu runtime state files ignored (%llu "
		       "malformed, %llu over the size cap)\n", (unsigned long long)cc.resolved,
		       (unsigned long long)cc.named, (unsigned long long)cc.unknown_shape,
		       (unsigned long long)(cc.bad_config + cc.huge_config), (unsigned long long)cc.bad_config,
		       (unsigned long long)cc.huge_config);
	const struct http2_track_stats *h2 = assemble_h2_stats(ag->asm_);
	if (h2->conns)
		printf("http2: %llu connections (%llu open before the attach), %llu frames, %llu streams, "
		       "%llu gRPC messages, %llu header blocks not decodable, %llu bad frames, %llu streams "
		       "not followed (over %d at once), %llu lying gRPC length prefixes, %llu HPACK bombs\n",
		       (unsigned long long)h2->conns, (unsigned long long)h2->midstream,
		       (unsigned long long)h2->frames, (unsigned long long)h2->streams,
		       (unsigned long long)h2->grpc_messages,
		       (unsigned long long)h2->headers_undecodable, (unsigned long long)h2->bad_frames,
		       (unsigned long long)h2->streams_dropped, HTTP2_MAX_STREAMS,
		       (unsigned long long)h2->grpc_bad_prefix, (unsigned long long)h2->bombs);
	losses_print(&lost);
	agent_gpu_summary(ag->gpu, gpu_said, sizeof(gpu_said));
	if (gpu_said[0])
		printf("%s\n", gpu_said);
	agent_tls_summary(ag->tls, gpu_said, sizeof(gpu_said));
	if (gpu_said[0])
		printf("%s\n", gpu_said);
	agent_llama_summary(ag->llama, gpu_said, sizeof(gpu_said));
	if (gpu_said[0])
		printf("%s\n", gpu_said);
	split_infer_summary(assemble_split_stats(ag->asm_), gpu_said, sizeof(gpu_said));
	if (gpu_said[0])
		printf("%s\n", gpu_said);
}

/* --release-held: the holds of agents that are gone end; 0, or 1 when the
 * map cannot be read. */
static int release_held(void)
{
	char err[512];
	int n = hold_release_orphans(err, sizeof(err));

	if (n < 0) {
		fprintf(stderr, "kpi-agent: %s\n", err);
		return 1;
	}
	if (!n)
		printf("no process is held by a kpi-agent that is gone\n");
	return 0;
}

int main(int argc, char **argv)
{
	struct agent ag = { 0 };
	struct privdrop priv;
	char err[512];
	int rc = 1, r;

	setvbuf(stdout, NULL, _IOLBF, 0);
	parse_args(argc, argv);
	if (env.release_held)
		return release_held();
	/* from here on a stop signal ends the loop; whatever the agent holds
	 * by then is continued in its teardown (attach_hold_end) */
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	/* an agent that was killed holding a process: it runs on now, before
	 * anything that takes time (the checks, the programs' load) */
	if (hold_release_orphans(err, sizeof(err)) < 0 && !geteuid())
		fprintf(stderr, "kpi-agent: %s\n", err);
	libbpf_set_print(libbpf_print);
	if (check_host(&ag, &priv))
		return 1;
	ag.n_cpus = libbpf_num_possible_cpus();

	ag.skel = kpi_bpf__open();
	ag.losses = (struct loss_probe){ .skel = ag.skel, .n_cpus = ag.n_cpus };
	if (!ag.skel) {
		fprintf(stderr, "kpi-agent: cannot open the BPF object: %s\n", strerror(errno));
		return 1;
	}
	ag.at = attach_new(ag.skel, &ag.feat, &(struct attach_want){
		.pids = env.pids, .n_pids = env.n_pids, .exe = env.exe, .ports = env.ports,
		.n_ports = env.n_ports, .http_only = env.http_only, .verbose = env.verbose,
		.exec_hold = !env.no_exec_hold, .sel = &env.sel });
	if (!ag.at) {
		fprintf(stderr, "kpi-agent: out of memory\n");
		goto cleanup;
	}
	bpf_map__set_max_entries(ag.skel->maps.events, (__u32)env.ringbuf_mb << 20);
	/* a quarter full wakes us early; otherwise we drain on the loop's clock */
	ag.skel->rodata->wakeup_bytes = ((__u64)env.ringbuf_mb << 20) / 4;
	attach_choose_programs(ag.at);
	r = kpi_bpf__load(ag.skel);
	if (r) {
		fprintf(stderr, "kpi-agent: loading the BPF programs failed (%s); run with -v for "
			"the verifier's log\n", strerror(-r));
		goto cleanup;
	}
	/* on the loaded object's maps, before the privilege drop */
	ag.tls = agent_tls_open(ag.skel, env.verbose, err, sizeof(err));
	if (!ag.tls)
		fprintf(stderr, "kpi-agent: TLS exchanges will not be read (their connections are "
			"counted as tls_unreadable): %s\n", err);
	if (attach_global(ag.at) || open_outputs(&ag, &priv))
		goto cleanup;
	/* before the line scripts wait on: what runs now is attached, and with
	 * --exe its file's probes are in place for what starts next */
	attach_rescan(ag.at);
	if (env.n_pids && !attach_count(ag.at)) {
		fprintf(stderr, "kpi-agent: none of the --pid processes could be traced\n");
		goto cleanup;
	}
	printf("writing %s (run %lld)\n", env.db, (long long)trace_store_run_id(ag.store));
	if (!attach_count(ag.at))
		say_waiting();
	r = poll_loop(&ag);
	attach_hold_end(ag.at);         /* before the final flush, however long it takes */
	if (r)
		goto cleanup;
	finish(&ag);
	rc = 0;
cleanup:
	exporters_stop(&ag.exp);
	attach_free(ag.at);
	ring_buffer__free(ag.rb);
	agent_gpu_close(ag.gpu);
	agent_tls_close(ag.tls);
	agent_llama_close(ag.llama);
	agent_cost_close(ag.cost);
	side_store_close(ag.side);
	if (ag.store)
		trace_store_close(ag.store);
	assemble_free(ag.asm_);
	bus_free(ag.bus);
	kpi_bpf__destroy(ag.skel);
	return rc;
}
