/* gpu.c - kpi-agent's CUPTI side: one copy of bpf/kpi_cupti.bpf.c, its
 * step__seqs program on every target with kpi probes (the GPU and the cost
 * split), libkpi_cupti.so's probes where it is mapped, and the GPU rows of
 * the trace (schema/002_gpu.sql). */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kpi_cupti.skel.h"
#include "agent/host/host.h"
#include "agent/host/targets.h"
#include "agent/sinks/gpu_store.h"
#include "agent/track/gpu_attr.h"
#include "gpu.h"
#include "loader.h"
#include "losses.h"

#define GPU_MAX_QUEUED  (1u << 20)  /* kernel rows kept while the store fails */
#define GPU_RING_BYTES  (16u << 20) /* ~4000 step lists, ~3200 full batches between polls */

/* Links of a target: step__seqs, then libkpi_cupti.so's probes,
 * activity__batch last (its semaphore is the library's switch). */
enum { L_STEP_SEQS, L_NAME, L_STATE, L_STATS, L_BATCH, N_LINKS };
_Static_assert(N_LINKS <= SIDE_MAX_LINKS, "a CUPTI target's links fit a side_target");

/* Per target (side_target.data); kept after its exit until the next flush,
 * which still needs its kernel names. */
struct gpu_target {
	pid_t pid;
	char lib[PATH_MAX];             /* its libkpi_cupti.so, "" none found yet */
	bool gpu;                       /* the library's probes are attached */
	bool failed;                    /* their attach failed: not retried */
	char **names;                   /* kernel__name id -> name */
	uint32_t n_names;
	int state;                      /* last kpi_cupti:state; 2: none seen */
	uint64_t last_seq, lost_batches, cupti_dropped, step_unknown;
	bool have_seq;
	struct gpu_target *next_gone;
};

struct agent_gpu {
	struct kpi_cupti_bpf *skel;
	struct side side;               /* the object and its targets (loader.h) */
	struct gpu_attr *attr;
	struct gpu_store *store;
	struct gpu_step_listener steps;
	bool verbose;
	struct gpu_target *gone;        /* exited since the last flush */
	struct gpu_store_row *q;        /* kernel rows for the next flush */
	size_t n_q, cap_q;
	uint64_t kernels_written, dropped_rows, bad_batch_seen;
	int n_attached;                 /* targets whose library was attached, in all */
	uint64_t lost_gone, cupti_dropped_gone; /* counts of targets freed since */
	int n_cpus;
};

/* ---- targets -------------------------------------------------------------- */

static void target_free(struct gpu_target *t)
{
	for (uint32_t i = 0; i < t->n_names; i++)
		free(t->names[i]);
	free(t->names);
	free(t);
}

/* libkpi_cupti.so's probes, once t maps it. */
static void attach_lib(struct agent_gpu *g, struct side_target *st, struct gpu_target *t)
{
	static const char *const probe[N_LINKS] = { "step__seqs", "kernel__name", "state", "stats",
						    "activity__batch" };
	struct bpf_program *prog[N_LINKS] = {
		g->skel->progs.kpi_step_seqs, g->skel->progs.kpi_cupti_kernel_name,
		g->skel->progs.kpi_cupti_state, g->skel->progs.kpi_cupti_stats,
		g->skel->progs.kpi_cupti_activity_batch,
	};

	char lib[PATH_MAX];

	if (t->gpu || t->failed || target_lib_path(st->pid, GPU_LIB_NAME, lib, sizeof(lib)))
		return; /* no library (yet): looked for again at the next rescan */
	snprintf(t->lib, sizeof(t->lib), "%s", lib);
	for (int i = L_NAME; i < N_LINKS; i++) {
		st->links[i] = bpf_program__attach_usdt(prog[i], st->pid, t->lib, "kpi_cupti", probe[i],
							NULL);
		if (st->links[i])
			continue;
		fprintf(stderr, "kpi-agent: pid %d: cannot attach to kpi_cupti:%s in %s (%s); its GPU "
			"kernels are not recorded: is %s from this build (abi/kpi_cupti_probes.d)?\n",
			st->pid, probe[i], t->lib, strerror(errno), GPU_LIB_NAME);
		for (int k = L_NAME; k <= i; k++) {
			bpf_link__destroy(st->links[k]);
			st->links[k] = NULL;
		}
		t->failed = true;
		return;
	}
	t->gpu = true;
	g->n_attached++;
	printf("collecting GPU activity of pid %d (%s)\n", st->pid, t->lib);
}

/* A target traced through its probes gets step__seqs (an older daemon
 * without it: its steps are not split per request); any target, the
 * library's probes once it maps it. */
static bool target_add(void *ctx, struct side_target *st)
{
	struct agent_gpu *g = ctx;
	struct gpu_target *t = calloc(1, sizeof(*t));
	char exe[PATH_MAX];

	if (!t)
		abort();
	t->pid = st->pid;
	t->state = 2;
	st->data = t;
	if (!st->http && !target_exe_path(st->pid, exe, sizeof(exe))) {
		st->links[L_STEP_SEQS] = bpf_program__attach_usdt(g->skel->progs.kpi_step_seqs, st->pid,
								  exe, "kpi", "step__seqs", NULL);
		if (!st->links[L_STEP_SEQS])
			fprintf(stderr, "kpi-agent: pid %d (%s): cannot attach to kpi:step__seqs (%s): its "
				"steps are not split per request (their GPU time is stored per step, their "
				"time and energy counted as unattributed); rebuild kpi-infer\n", st->pid, exe,
				strerror(errno));
	}
	attach_lib(g, st, t);
	return true;
}

static void target_recheck(void *ctx, struct side_target *st)
{
	attach_lib(ctx, st, st->data);
}

/* One whose library was attached is freed after the next flush, which still
 * needs its names. */
static void target_drop(void *ctx, struct side_target *st)
{
	struct agent_gpu *g = ctx;
	struct gpu_target *t = st->data;

	st->data = NULL;
	if (!t->gpu) {
		target_free(t);
		return;
	}
	gpu_attr_forget_pid(g->attr, (uint32_t)st->pid);
	t->next_gone = g->gone;
	g->gone = t;
}

/* ---- events ---------------------------------------------------------------- */

static void on_batch(struct agent_gpu *g, struct gpu_target *t, const struct kpi_gpu_ev_batch *e)
{
	uint64_t now = host_mono_ns();

	if (t->have_seq && e->seq > t->last_seq + 1)
		t->lost_batches += e->seq - t->last_seq - 1;
	t->last_seq = e->seq;
	t->have_seq = true;
	for (uint32_t i = 0; i < e->n && i < KPI_CUPTI_BATCH_MAX; i++) {
		gpu_attr_record(g->attr, e->h.pid, &e->recs[i], now);
		if (g->n_q == GPU_MAX_QUEUED) {
			g->dropped_rows++;
			continue;
		}
		if (g->n_q == g->cap_q) {
			g->cap_q = g->cap_q ? 2 * g->cap_q : 1024;
			g->q = realloc(g->q, g->cap_q * sizeof(*g->q));
			if (!g->q)
				abort();
		}
		g->q[g->n_q++] = (struct gpu_store_row){ e->h.pid, e->recs[i], NULL };
	}
}

static void on_name(struct gpu_target *t, const struct kpi_gpu_ev_name *e)
{
	if (e->id == 0 || e->id > (1u << 20))
		return;
	if (e->id >= t->n_names) {
		uint32_t n = e->id + 64;
		t->names = realloc(t->names, n * sizeof(*t->names));
		if (!t->names)
			abort();
		memset(t->names + t->n_names, 0, (n - t->n_names) * sizeof(*t->names));
		t->n_names = n;
	}
	char name[KPI_CUPTI_NAME_MAX];
	memcpy(name, e->name, sizeof(name));
	name[sizeof(name) - 1] = 0;
	if (t->names[e->id] && !strcmp(t->names[e->id], name))
		return;
	free(t->names[e->id]);
	t->names[e->id] = strdup(name);
}

static void on_state(struct agent_gpu *g, struct gpu_target *t, const struct kpi_gpu_ev_state *e)
{
	char reason[KPI_GPU_REASON_LEN];
	memcpy(reason, e->reason, sizeof(reason));
	reason[sizeof(reason) - 1] = 0;
	if (e->state == t->state)
		return;
	t->state = e->state;
	if (e->state < 0)
		fprintf(stderr, "kpi-agent: pid %d: %s turned GPU collection off: %s\n", t->pid,
			GPU_LIB_NAME, reason);
	else if (g->verbose)
		fprintf(stderr, "kpi-agent: pid %d: %s %s (%s)\n", t->pid, GPU_LIB_NAME,
			e->state ? "collecting" : "paused", reason);
}

/* Step lists go to the listener whoever sent them, and to the GPU split of
 * a target whose library is attached; the rest is the library's. */
static void on_step_seqs(struct agent_gpu *g, struct gpu_target *t, const struct kpi_gpu_ev_step_seqs *s)
{
	uint32_t n = s->n < KPI_STEP_SEQS_CHUNK ? s->n : KPI_STEP_SEQS_CHUNK;

	if (g->steps.step_seqs)
		g->steps.step_seqs(g->steps.ctx, s->h.pid, s->step, s->n_total, s->first, s->entries, n,
				   s->h.ts);
	if (t && t->gpu)
		gpu_attr_step_seqs(g->attr, s->h.pid, s->step, s->n_total, s->first, s->entries, n,
				   host_mono_ns());
}

static int on_event(void *ctx, void *data, size_t size)
{
	struct agent_gpu *g = ctx;
	const struct kpi_gpu_ev_hdr *h = data;

	if (size < sizeof(*h))
		return 0;
	struct side_target *st = side_find(&g->side, (pid_t)h->pid);
	struct gpu_target *t = st ? st->data : NULL;
	if (h->type == KPI_GEV_STEP_SEQS) {
		if (size >= sizeof(struct kpi_gpu_ev_step_seqs))
			on_step_seqs(g, t, data);
		return 0;
	}
	if (!t || !t->gpu)
		return 0;
	switch (h->type) {
	case KPI_GEV_BATCH:
		if (size >= sizeof(struct kpi_gpu_ev_batch))
			on_batch(g, t, data);
		break;
	case KPI_GEV_NAME:
		if (size >= sizeof(struct kpi_gpu_ev_name))
			on_name(t, data);
		break;
	case KPI_GEV_STATE:
		if (size >= sizeof(struct kpi_gpu_ev_state))
			on_state(g, t, data);
		break;
	case KPI_GEV_STATS:
		if (size >= sizeof(struct kpi_gpu_ev_stats)) {
			const struct kpi_gpu_ev_stats *s = data;
			t->cupti_dropped = s->cupti_dropped;
			t->step_unknown = s->step_unknown;
		}
		break;
	}
	return 0;
}

/* ---- open / close ---------------------------------------------------------- */

struct agent_gpu *agent_gpu_open(struct side_store *store, bool verbose, char *err, size_t errlen)
{
	struct agent_gpu *g = calloc(1, sizeof(*g));

	if (!g)
		abort();
	g->verbose = verbose;
	g->n_cpus = libbpf_num_possible_cpus();
	g->attr = gpu_attr_new();
	g->skel = kpi_cupti_bpf__open();
	if (side_open(&g->side, "CUPTI", g->skel, g->skel ? g->skel->skeleton : NULL, err, errlen))
		goto fail;
	bpf_map__set_max_entries(g->skel->maps.gpu_events, GPU_RING_BYTES);
	if (side_load(&g->side, err, errlen) || !(g->store = gpu_store_open(store, err, errlen)))
		goto fail;
	side_follow(&g->side, false, &(struct side_ops){ .add = target_add, .recheck = target_recheck,
							 .drop = target_drop }, g);
	return g;
fail:
	agent_gpu_close(g);
	return NULL;
}

void agent_gpu_listen_steps(struct agent_gpu *g, struct gpu_step_listener l)
{
	if (g)
		g->steps = l;
}

int agent_gpu_add_ring(struct agent_gpu *g, struct ring_buffer *rb, char *err, size_t errlen)
{
	return side_add_ring(&g->side, rb, g->skel->maps.gpu_events, on_event, g, err, errlen);
}

struct side *agent_gpu_side(struct agent_gpu *g)
{
	return g ? &g->side : NULL;
}

static void free_gone(struct agent_gpu *g)
{
	while (g->gone) {
		struct gpu_target *t = g->gone;
		g->gone = t->next_gone;
		g->lost_gone += t->lost_batches;
		g->cupti_dropped_gone += t->cupti_dropped;
		target_free(t);
	}
}

void agent_gpu_close(struct agent_gpu *g)
{
	if (!g)
		return;
	side_close(&g->side);
	free_gone(g);
	gpu_store_close(g->store);
	gpu_attr_free(g->attr);
	free(g->q);
	free(g);
}

/* ---- flush ------------------------------------------------------------------ */

static uint64_t counter(struct agent_gpu *g, uint32_t idx)
{
	return losses_percpu_sum(g->skel->maps.gpu_counters, idx, g->n_cpus);
}

uint64_t agent_gpu_ring_drops(struct agent_gpu *g)
{
	return g ? counter(g, KPI_GCNT_DROPS) : 0;
}

static const char *kernel_name(struct agent_gpu *g, const struct gpu_store_row *q)
{
	struct side_target *st = side_find(&g->side, (pid_t)q->pid);
	struct gpu_target *t = st ? st->data : NULL;

	for (struct gpu_target *x = g->gone; !t && x; x = x->next_gone)
		if ((uint32_t)x->pid == q->pid)
			t = x;  /* exited since: its names are kept until this flush ends */
	if (t && q->r.kind == KPI_GPU_REC_KERNEL && q->r.name_id && q->r.name_id < t->n_names)
		return t->names[q->r.name_id];
	return NULL;
}

/* A target maps the library, or did until the last flush. */
static bool any_gpu(struct agent_gpu *g)
{
	for (int i = 0; i < g->side.n_t; i++)
		if (((struct gpu_target *)g->side.t[i].data)->gpu)
			return true;
	return g->gone != NULL;
}

int agent_gpu_flush(struct agent_gpu *g, uint64_t now, char *err, size_t errlen)
{
	if (!g || (!any_gpu(g) && !g->n_q))
		return 0; /* no target maps the library: no empty transactions */
	uint64_t bad = counter(g, KPI_GCNT_BAD_BATCH);
	if (bad > g->bad_batch_seen) {
		fprintf(stderr, "kpi-agent: %llu kpi_cupti:activity__batch probes carried records of "
			"another size than %zu bytes and were ignored: use the %s of this build\n",
			(unsigned long long)(bad - g->bad_batch_seen), sizeof(struct kpi_gpu_rec),
			GPU_LIB_NAME);
		g->bad_batch_seen = bad;
	}
	for (size_t i = 0; i < g->n_q; i++)
		g->q[i].name = kernel_name(g, &g->q[i]);
	gpu_attr_settle(g->attr);
	if (gpu_attr_write(g->attr, g->store, now, g->q, g->n_q, err, errlen))
		return -1;
	g->kernels_written += g->n_q;
	g->n_q = 0;
	free_gone(g);
	return 0;
}

void agent_gpu_summary(struct agent_gpu *g, char *buf, size_t len)
{
	struct gpu_attr_stats st;
	uint64_t lost, cupti_dropped;

	buf[0] = 0;
	if (!g || !g->n_attached)
		return;
	lost = g->lost_gone;
	cupti_dropped = g->cupti_dropped_gone;
	for (struct gpu_target *t = g->gone; t; t = t->next_gone) {
		lost += t->lost_batches;
		cupti_dropped += t->cupti_dropped;
	}
	for (int i = 0; i < g->side.n_t; i++) {
		const struct gpu_target *t = g->side.t[i].data;
		lost += t->lost_batches;
		cupti_dropped += t->cupti_dropped;
	}
	gpu_attr_stats(g->attr, &st);
	snprintf(buf, len, "GPU: %llu records stored, %llu step lists (%llu sequences), %.3f ms "
		 "attributed to requests, %llu batches lost (%llu ring-buffer drops), %llu records "
		 "dropped by CUPTI, %llu shed by the agent", (unsigned long long)g->kernels_written,
		 (unsigned long long)st.step_lists, (unsigned long long)st.seq_entries,
		 st.attributed_ns / 1e6,
		 (unsigned long long)lost, (unsigned long long)counter(g, KPI_GCNT_DROPS),
		 (unsigned long long)cupti_dropped, (unsigned long long)g->dropped_rows);
}
