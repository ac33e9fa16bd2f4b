/* injection.c - libkpi_cupti.so: CUDA_INJECTION64_PATH entry point. Collects GPU
 * kernel, memcpy and memset records through CUPTI's activity API while a
 * kpi_cupti probe listener is attached, ties each to the host's batch step, and
 * hands them out in batches through USDT. Never takes the host down. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cupti.h>

#include "kpi_cupti_probes.h"
#include "cupti/convert.h"
#include "abi/kpi_step.h"

#define EXPORT __attribute__((visibility("default")))

#define BUF_SIZE (2u << 20)      /* one activity buffer: ~10k kernel records */
#define CALIB_TRIES 7
#define MAX_CBIDS 1024
/* A listener attaches its probes one by one; switch on only once the gate
 * (activity__batch) has been set this long, so state and names are seen. */
#define SETTLE_MS 50

enum { ST_PAUSED = 0, ST_ON = 1, ST_DISABLED = -1 };

static struct {
	int state;                      /* control thread's view: ST_* */
	atomic_int failed;              /* set once, from any thread */
	CUpti_SubscriberHandle sub;
	int subscribed;
	struct { CUpti_CallbackDomain dom; CUpti_CallbackId id; } cb[MAX_CBIDS];
	int ncb;

	const struct kpi_cupti_step_slot *host; /* NULL: host publishes no step */
	struct kpi_steplog steps;

	pthread_mutex_t clock_mu;       /* calibration points vs. conversion */
	struct kpi_clock clock;

	pthread_mutex_t buf_mu;         /* buffer completion may run on two threads */
	struct kpi_names names;
	struct kpi_cupti_conv conv;
	struct kpi_gpu_rec batch[KPI_CUPTI_BATCH_MAX];
	uint64_t batch_seq, records, buffers, dropped;

	pthread_t thread;
	int thread_started;
	pthread_mutex_t mu;
	pthread_cond_t cond;
	int stop;
	unsigned poll_ms, flush_ms, calib_ms;
	int verbose;
} g = {
	.clock_mu = PTHREAD_MUTEX_INITIALIZER,
	.buf_mu = PTHREAD_MUTEX_INITIALIZER,
	.mu = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
};

/* One call site per probe (style: parcagpu): every firing goes through these. */
static __attribute__((noinline)) void probe_state(int st, const char *why)
{
	if (KPI_CUPTI_STATE_ENABLED())
		KPI_CUPTI_STATE(st, why);
}

static __attribute__((noinline)) void probe_name(uint32_t id, const char *name)
{
	if (KPI_CUPTI_KERNEL_NAME_ENABLED())
		KPI_CUPTI_KERNEL_NAME(id, name);
}

/* Arguments in registers or on the stack, never RIP-relative to a global:
 * libbpf and bpftrace cannot read "8@sym+off(%rip)" argument specs. */
static __attribute__((noinline)) void probe_stats(uint64_t records, uint64_t dropped,
						  uint64_t step_unknown, uint64_t names_full,
						  uint64_t buffers)
{
	if (KPI_CUPTI_STATS_ENABLED())
		KPI_CUPTI_STATS(records, dropped, step_unknown, names_full, buffers);
}

static void say(const char *fmt, ...)
{
	va_list ap;
	char line[512];

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "kpi_cupti: %s\n", line);
}

/* Any CUPTI failure: one line, then the control thread switches everything off. */
static void fail(const char *what, CUptiResult r)
{
	if (atomic_exchange(&g.failed, 1))
		return;
	const char *s = NULL;
	if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s)
		s = "unknown CUPTI error";
	char reason[256];
	/* what is the call's source text: name the function, not its arguments */
	snprintf(reason, sizeof(reason), "%.*s failed: %s (%d)", (int)strcspn(what, "("), what,
		 s, (int)r);
	say("%s; GPU activity collection is off for this process (pid %d), which runs on",
	    reason, (int)getpid());
	probe_state(ST_DISABLED, reason);
	pthread_mutex_lock(&g.mu);
	pthread_cond_signal(&g.cond);
	pthread_mutex_unlock(&g.mu);
}

#define CUPTI_OK(call) ({ CUptiResult _r = (call); if (_r != CUPTI_SUCCESS) fail(#call, _r); \
	_r == CUPTI_SUCCESS; })

/* ---- launch callbacks: the hot path, a load and a compare per launch ------ */

static void CUPTIAPI on_api(void *ud, CUpti_CallbackDomain dom, CUpti_CallbackId cbid,
			    const void *cbdata)
{
	const CUpti_CallbackData *d = cbdata;

	if (d->callbackSite != CUPTI_API_ENTER || !g.host)
		return;
	uint64_t step = __atomic_load_n(&g.host->step, __ATOMIC_ACQUIRE);
	if (kpi_steplog_changed(&g.steps, step))
		kpi_steplog_note(&g.steps, d->correlationId, step);
}

/* ---- activity buffers: CUPTI's worker thread, off the host's path --------- */

static void CUPTIAPI buffer_requested(uint8_t **buf, size_t *size, size_t *max_records)
{
	*max_records = 0;
	*buf = aligned_alloc(ACTIVITY_RECORD_ALIGNMENT, BUF_SIZE);
	*size = *buf ? BUF_SIZE : 0; /* none: CUPTI drops and counts the records */
}

static __attribute__((noinline)) void emit_batch(int n)
{
	if (n && KPI_CUPTI_ACTIVITY_BATCH_ENABLED())
		KPI_CUPTI_ACTIVITY_BATCH(g.batch, (uint32_t)n, (uint32_t)sizeof(g.batch[0]),
					 ++g.batch_seq);
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buf,
				      size_t size, size_t valid)
{
	CUpti_Activity *rec = NULL;
	int n = 0;

	pthread_mutex_lock(&g.buf_mu);
	/* Nobody listening (or failed): hand the buffer back unread. */
	if (!atomic_load(&g.failed) && KPI_CUPTI_ACTIVITY_BATCH_ENABLED()) {
		pthread_mutex_lock(&g.clock_mu);
		while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
			uint32_t new_name;
			if (!kpi_cupti_convert(&g.conv, rec, &g.batch[n], &new_name))
				continue;
			if (new_name)
				probe_name(new_name, kpi_names_get(&g.names, new_name));
			g.records++;
			if (++n == KPI_CUPTI_BATCH_MAX) {
				emit_batch(n);
				n = 0;
			}
		}
		pthread_mutex_unlock(&g.clock_mu);
		emit_batch(n);
		size_t dropped = 0;
		if (ctx && cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS)
			g.dropped += dropped;
		g.buffers++;
		probe_stats(g.records, g.dropped, g.conv.step_unknown, g.conv.names_full, g.buffers);
	}
	pthread_mutex_unlock(&g.buf_mu);
	free(buf);
}

/* ---- clock calibration ---------------------------------------------------- */

static int read_cupti(void *arg, uint64_t *ns)
{
	return cuptiGetTimestamp(ns) == CUPTI_SUCCESS ? 0 : -1;
}

static __attribute__((noinline)) void calibrate(void)
{
	struct kpi_clock_point p;
	uint64_t window;

	if (kpi_clock_sample(read_cupti, NULL, CALIB_TRIES, &p, &window)) {
		uint64_t ns;
		CUPTI_OK(cuptiGetTimestamp(&ns)); /* reports the error */
		return;
	}
	pthread_mutex_lock(&g.clock_mu);
	kpi_clock_add(&g.clock, p.cupti_ns, p.mono_ns);
	pthread_mutex_unlock(&g.clock_mu);
	if (KPI_CUPTI_CLOCK_SYNC_ENABLED())
		KPI_CUPTI_CLOCK_SYNC(p.cupti_ns, p.mono_ns, window);
}

/* ---- collection on / off, driven by the probe semaphore ------------------- */

static const CUpti_ActivityKind kinds[] = {
	CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, /* not KIND_KERNEL: that one serialises kernels */
	CUPTI_ACTIVITY_KIND_MEMCPY,
	CUPTI_ACTIVITY_KIND_MEMSET,
};

static void set_state(int st, const char *why)
{
	g.state = st;
	if (g.verbose)
		say("collection %s (%s)", st == ST_ON ? "on" : st == ST_PAUSED ? "paused" : "off", why);
	probe_state(st, why);
}

static void announce_names(void)
{
	pthread_mutex_lock(&g.buf_mu);
	for (uint32_t id = 1; id <= g.names.count && KPI_CUPTI_KERNEL_NAME_ENABLED(); id++)
		probe_name(id, kpi_names_get(&g.names, id));
	pthread_mutex_unlock(&g.buf_mu);
}

static int set_callbacks(uint32_t on)
{
	for (int i = 0; i < g.ncb; i++)
		if (!CUPTI_OK(cuptiEnableCallback(on, g.sub, g.cb[i].dom, g.cb[i].id)))
			return -1;
	return 0;
}

static void collection_on(void)
{
	calibrate();
	if (g.host && set_callbacks(1))
		return;
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if (!CUPTI_OK(cuptiActivityEnable(kinds[i])))
			return;
	announce_names();
	set_state(ST_ON, "listener attached");
}

/* Best effort: also the way out after a failure, so errors here stay quiet. */
static void collection_off(int st, const char *why)
{
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		cuptiActivityDisable(kinds[i]);
	if (g.subscribed)
		for (int i = 0; i < g.ncb; i++)
			cuptiEnableCallback(0, g.sub, g.cb[i].dom, g.cb[i].id);
	cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	set_state(st, why);
}

static uint64_t now_ms(void)
{
	return kpi_clock_mono_now() / 1000000;
}

static void *control_main(void *arg)
{
	uint64_t last_flush = 0, last_calib = now_ms(), listening_since = 0;

	for (;;) {
		struct timespec until;
		pthread_mutex_lock(&g.mu);
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += (long)g.poll_ms * 1000000L;
		until.tv_sec += until.tv_nsec / 1000000000L;
		until.tv_nsec %= 1000000000L;
		if (!g.stop && !atomic_load(&g.failed))
			pthread_cond_timedwait(&g.cond, &g.mu, &until);
		int stop = g.stop;
		pthread_mutex_unlock(&g.mu);

		if (atomic_load(&g.failed)) {
			if (g.state != ST_DISABLED)
				collection_off(ST_DISABLED, "CUPTI failure");
			if (g.subscribed)
				cuptiUnsubscribe(g.sub);
			g.subscribed = 0;
			break;
		}
		if (stop)
			break;
		int listening = KPI_CUPTI_ACTIVITY_BATCH_ENABLED();
		if (!listening)
			listening_since = 0;
		else if (!listening_since)
			listening_since = now_ms();
		if (listening && g.state == ST_PAUSED && now_ms() - listening_since >= SETTLE_MS)
			collection_on();
		else if (!listening && g.state == ST_ON)
			collection_off(ST_PAUSED, "no listener");
		if (g.state != ST_ON)
			continue;
		uint64_t t = now_ms();
		if (t - last_flush >= g.flush_ms) {
			CUPTI_OK(cuptiActivityFlushAll(0)); /* completed buffers only: no waiting */
			last_flush = t;
		}
		if (t - last_calib >= g.calib_ms) {
			calibrate();
			last_calib = t;
		}
	}
	return NULL;
}

static void at_exit(void)
{
	pthread_mutex_lock(&g.mu);
	g.stop = 1;
	pthread_cond_signal(&g.cond);
	pthread_mutex_unlock(&g.mu);
	if (g.thread_started)
		pthread_join(g.thread, NULL);
	/* the process's last records, before the CUDA runtime tears contexts down */
	if (g.state == ST_ON && !atomic_load(&g.failed))
		cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

/* A forked child has no control thread and no usable CUPTI state: it must
 * neither join the parent's thread at exit nor touch CUPTI. */
static void at_fork_child(void)
{
	g.thread_started = 0;
	g.state = ST_DISABLED;
	atomic_store(&g.failed, 1);
}

/* ---- set-up --------------------------------------------------------------- */

static unsigned env_ms(const char *name, unsigned dflt, unsigned lo, unsigned hi)
{
	const char *s = getenv(name);
	if (!s || !*s)
		return dflt;
	char *end;
	unsigned long v = strtoul(s, &end, 10);
	if (*end || v < lo || v > hi) {
		say("%s='%s' is not a number of ms in [%u, %u]; using %u", name, s, lo, hi, dflt);
		return dflt;
	}
	return (unsigned)v;
}

/* Launch, memcpy and memset entry points of both API layers, found by name so
 * that new CUDA versions' variants (_ptsz, Ex, _v2) are covered too. */
static void find_callbacks(void)
{
	static const struct { CUpti_CallbackDomain dom; int size; } doms[] = {
		{ CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE },
		{ CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE },
	};
	for (size_t d = 0; d < 2; d++)
		for (int id = 1; id < doms[d].size && g.ncb < MAX_CBIDS; id++) {
			const char *name = NULL;
			if (cuptiGetCallbackName(doms[d].dom, (uint32_t)id, &name) != CUPTI_SUCCESS || !name)
				continue;
			if (strstr(name, "Launch") || strstr(name, "Memcpy") || strstr(name, "Memset")) {
				g.cb[g.ncb].dom = doms[d].dom;
				g.cb[g.ncb].id = (CUpti_CallbackId)id;
				g.ncb++;
			}
		}
}

static void find_host_step(void)
{
	const struct kpi_cupti_step_slot *s = dlsym(RTLD_DEFAULT, KPI_CUPTI_STEP_SYMBOL);

	if (s && s->magic == KPI_CUPTI_STEP_MAGIC && s->version == KPI_CUPTI_STEP_VERSION) {
		g.host = s;
		return;
	}
	if (s)
		say("%s in the host has magic %#x version %u, expected %#x version %u: "
		    "rebuild the host with this abi/kpi_step.h; records carry step 0",
		    KPI_CUPTI_STEP_SYMBOL, s->magic, s->version, KPI_CUPTI_STEP_MAGIC,
		    KPI_CUPTI_STEP_VERSION);
	else if (g.verbose)
		say("the host exports no %s (see abi/kpi_step.h): records carry step 0",
		    KPI_CUPTI_STEP_SYMBOL);
}

static int setup(void)
{
	g.poll_ms = env_ms("KPI_CUPTI_POLL_MS", 100, 1, 10000);
	g.flush_ms = env_ms("KPI_CUPTI_FLUSH_MS", 200, 1, 60000);
	g.calib_ms = env_ms("KPI_CUPTI_CALIB_MS", 1000, 10, 600000);
	g.verbose = getenv("KPI_CUPTI_VERBOSE") && *getenv("KPI_CUPTI_VERBOSE") == '1';

	kpi_steplog_init(&g.steps);
	kpi_clock_init(&g.clock);
	if (kpi_names_init(&g.names)) {
		say("out of memory for the kernel name table; GPU activity collection is off");
		atomic_store(&g.failed, 1);
		return -1;
	}
	find_host_step();
	g.conv = (struct kpi_cupti_conv){ .clock = &g.clock, .steps = &g.steps,
					  .names = &g.names, .have_step_source = g.host != NULL };

	/* Subscribed now, but no callback or activity kind is enabled until a
	 * listener attaches: until then CUPTI costs the host nothing per launch. */
	if (g.host) {
		if (!CUPTI_OK(cuptiSubscribe(&g.sub, on_api, NULL)))
			return -1;
		g.subscribed = 1;
		find_callbacks();
	}
	if (!CUPTI_OK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed)))
		return -1;
	calibrate();
	if (atomic_load(&g.failed))
		return -1;
	return 0;
}

EXPORT int InitializeInjection(void)
{
	static atomic_int once;

	if (atomic_exchange(&once, 1))
		return 1;
	if (setup() == 0) {
		g.state = ST_PAUSED;
		if (pthread_create(&g.thread, NULL, control_main, NULL) == 0) {
			g.thread_started = 1;
			pthread_setname_np(g.thread, "kpi_cupti");
		} else {
			say("cannot start the control thread; GPU activity collection is off");
			atomic_store(&g.failed, 1);
		}
	}
	if (atomic_load(&g.failed)) {
		g.state = ST_DISABLED;
		if (g.subscribed)
			cuptiUnsubscribe(g.sub);
		g.subscribed = 0;
	}
	atexit(at_exit);
	pthread_atfork(NULL, NULL, at_fork_child);
	if (g.verbose)
		say("loaded in pid %d: %s%s", (int)getpid(),
		    g.state == ST_DISABLED ? "collection off"
					   : "collecting while a kpi_cupti probe listener is attached",
		    g.host ? "" : " (host publishes no step)");
	/* 1 in every case: the host's CUDA must never fail because of this library. */
	return 1;
}
