/* gpu.c - kpi-agent's GPU side: finds libkpi_cupti.so in the targets' maps,
 * attaches bpf/kpi_cupti.bpf.c to its probes and to kpi:step__seqs, and writes
 * gpu_kernels and the GPU columns of steps and requests (schema/002_gpu.sql). */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "kpi_cupti.skel.h"
#include "gpu.h"
#include "agent/track/gpu_attr.h"
#include "agent/sinks/gpu_store.h"
#include "losses.h"
#include "agent/host/targets.h"

#define GPU_MAX_TARGETS 64
#define GPU_MAX_QUEUED  (1u << 20)  /* kernel rows kept while the store fails */

/* libkpi_cupti.so's probes: activity__batch last, its semaphore is the switch */
enum { L_STEP_SEQS, L_NAME, L_STATE, L_STATS, L_BATCH, N_LINKS };

struct gpu_target {
	pid_t pid;
	unsigned long long start_time;
	char lib[PATH_MAX];
	struct bpf_link *links[N_LINKS];
	bool attached, failed, gone;
	char **names;               /* kernel__name id -> name */
	uint32_t n_names;
	int state;                  /* last kpi_cupti:state; 2: none seen */
	uint64_t last_seq, lost_batches, cupti_dropped, step_unknown;
	bool have_seq;
};

struct agent_gpu {
	struct kpi_cupti_bpf *skel;
	struct gpu_attr *attr;
	struct gpu_store *store;
	bool verbose;
	struct gpu_target *t[GPU_MAX_TARGETS];
	int n_t;
	struct gpu_store_row *q;   /* kernel rows for the next flush */
	size_t n_q, cap_q;
	uint64_t kernels_written, dropped_rows, bad_batch_seen;
	int n_attached;             /* targets attached, in all */
	uint64_t lost_gone, cupti_dropped_gone; /* counts of targets freed since */
	int n_cpus;
};

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- finding the library ------------------------------------------------ */

/* ---- targets -------------------------------------------------------------- */

static struct gpu_target *target_find(struct agent_gpu *g, uint32_t pid)
{
	for (int i = 0; i < g->n_t; i++)
		if ((uint32_t)g->t[i]->pid == pid && !g->t[i]->gone)
			return g->t[i];
	return NULL;
}

static void target_unlink(struct gpu_target *t)
{
	for (int i = 0; i < N_LINKS; i++) {
		bpf_link__destroy(t->links[i]);
		t->links[i] = NULL;
	}
}

static void target_free(struct gpu_target *t)
{
	target_unlink(t);
	for (uint32_t i = 0; i < t->n_names; i++)
		free(t->names[i]);
	free(t->names);
	free(t);
}

static int target_attach(struct agent_gpu *g, struct gpu_target *t)
{
	static const char *const probe[N_LINKS] = { "step__seqs", "kernel__name", "state", "stats",
						    "activity__batch" };
	struct bpf_program *prog[N_LINKS] = {
		g->skel->progs.kpi_step_seqs, g->skel->progs.kpi_cupti_kernel_name,
		g->skel->progs.kpi_cupti_state, g->skel->progs.kpi_cupti_stats,
		g->skel->progs.kpi_cupti_activity_batch,
	};
	char exe[PATH_MAX];

	if (target_exe_path(t->pid, exe, sizeof(exe)))
		return -1;
	for (int i = 0; i < N_LINKS; i++) {
		const char *bin = i == L_STEP_SEQS ? exe : t->lib;
		t->links[i] = bpf_program__attach_usdt(prog[i], t->pid, bin,
						       i == L_STEP_SEQS ? "kpi" : "kpi_cupti", probe[i], NULL);
		if (t->links[i])
			continue;
		if (i == L_STEP_SEQS) {
			/* an older daemon: kernels are still stored, not split per request */
			fprintf(stderr, "kpi-agent: pid %d (%s) has no kpi:step__seqs probe: its GPU time "
				"is stored per step but not split per request; rebuild kpi-infer\n",
				t->pid, exe);
			continue;
		}
		fprintf(stderr, "kpi-agent: pid %d: cannot attach to kpi_cupti:%s in %s (%s); its GPU "
			"kernels are not recorded: is %s from this build (abi/kpi_cupti_probes.d)?\n",
			t->pid, probe[i], t->lib, strerror(errno), GPU_LIB_NAME);
		target_unlink(t);
		return -1;
	}
	printf("collecting GPU activity of pid %d (%s)\n", t->pid, t->lib);
	return 0;
}

void agent_gpu_sync(struct agent_gpu *g, const pid_t *pids, int n)
{
	if (!g)
		return;
	for (int i = 0; i < g->n_t; i++) {
		struct gpu_target *t = g->t[i];
		bool listed = false;
		for (int k = 0; k < n && !listed; k++)
			listed = pids[k] == t->pid;
		if (!t->gone && (!listed || target_start_time(t->pid) != t->start_time)) {
			/* freed after the next flush, which still needs its names */
			t->gone = true;
			target_unlink(t);
			gpu_attr_forget_pid(g->attr, (uint32_t)t->pid);
		}
	}
	for (int k = 0; k < n; k++) {
		if (target_find(g, (uint32_t)pids[k]))
			continue;
		char lib[PATH_MAX];
		if (target_lib_path(pids[k], GPU_LIB_NAME, lib, sizeof(lib)))
			continue; /* no library (yet): looked for again at the next rescan */
		if (g->n_t == GPU_MAX_TARGETS)
			return;
		struct gpu_target *t = calloc(1, sizeof(*t));
		if (!t)
			abort();
		t->pid = pids[k];
		t->start_time = target_start_time(t->pid);
		t->state = 2;
		snprintf(t->lib, sizeof(t->lib), "%s", lib);
		g->t[g->n_t++] = t;
		t->failed = target_attach(g, t) != 0;
		t->attached = !t->failed;
		g->n_attached += t->attached;
	}
}

/* ---- events ---------------------------------------------------------------- */

static void on_batch(struct agent_gpu *g, struct gpu_target *t, const struct kpi_gpu_ev_batch *e)
{
	uint64_t now = mono_ns();

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

static int on_event(void *ctx, void *data, size_t size)
{
	struct agent_gpu *g = ctx;
	const struct kpi_gpu_ev_hdr *h = data;

	if (size < sizeof(*h))
		return 0;
	struct gpu_target *t = target_find(g, h->pid);
	if (!t)
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
	case KPI_GEV_STEP_SEQS:
		if (size >= sizeof(struct kpi_gpu_ev_step_seqs)) {
			const struct kpi_gpu_ev_step_seqs *s = data;
			gpu_attr_step_seqs(g->attr, h->pid, s->step, s->n_total, s->first, s->entries,
					   s->n < KPI_STEP_SEQS_CHUNK ? s->n : KPI_STEP_SEQS_CHUNK, mono_ns());
		}
		break;
	}
	return 0;
}

/* ---- open / close ---------------------------------------------------------- */

struct agent_gpu *agent_gpu_open(const char *db, int64_t run_id, bool verbose, char *err,
				 size_t errlen)
{
	struct agent_gpu *g = calloc(1, sizeof(*g));
	int r;

	if (!g)
		abort();
	g->verbose = verbose;
	g->n_cpus = libbpf_num_possible_cpus();
	g->attr = gpu_attr_new();
	g->skel = kpi_cupti_bpf__open();
	if (!g->skel) {
		snprintf(err, errlen, "cannot open the GPU BPF object: %s", strerror(errno));
		goto fail;
	}
	r = kpi_cupti_bpf__load(g->skel);
	if (r) {
		snprintf(err, errlen, "loading the GPU BPF programs failed (%s); run with -v for the "
			 "verifier's log", strerror(-r));
		goto fail;
	}
	g->store = gpu_store_open(db, run_id, err, errlen);
	if (!g->store)
		goto fail;
	return g;
fail:
	agent_gpu_close(g);
	return NULL;
}

int agent_gpu_add_ring(struct agent_gpu *g, struct ring_buffer *rb, char *err, size_t errlen)
{
	int r = ring_buffer__add(rb, bpf_map__fd(g->skel->maps.gpu_events), on_event, g);
	if (r) {
		snprintf(err, errlen, "cannot add the GPU ring buffer: %s", strerror(-r));
		return -1;
	}
	return 0;
}

void agent_gpu_close(struct agent_gpu *g)
{
	if (!g)
		return;
	for (int i = 0; i < g->n_t; i++)
		target_free(g->t[i]);
	gpu_store_close(g->store);
	kpi_cupti_bpf__destroy(g->skel);
	gpu_attr_free(g->attr);
	free(g->q);
	free(g);
}

/* ---- flush ------------------------------------------------------------------ */

static uint64_t counter(struct agent_gpu *g, uint32_t idx)
{
	return losses_percpu_sum(g->skel->maps.gpu_counters, idx, g->n_cpus);
}

static const char *kernel_name(struct agent_gpu *g, const struct gpu_store_row *q)
{
	struct gpu_target *t = target_find(g, q->pid);

	if (!t) /* exited since: its names are kept until this flush ends */
		for (int i = 0; i < g->n_t && !t; i++)
			if ((uint32_t)g->t[i]->pid == q->pid)
				t = g->t[i];
	if (t && q->r.kind == KPI_GPU_REC_KERNEL && q->r.name_id && q->r.name_id < t->n_names)
		return t->names[q->r.name_id];
	return NULL;
}

int agent_gpu_flush(struct agent_gpu *g, uint64_t now, char *err, size_t errlen)
{
	if (!g || (!g->n_t && !g->n_q))
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
	if (gpu_store_flush(g->store, g->attr, now, g->q, g->n_q, err, errlen))
		return -1;
	g->kernels_written += g->n_q;
	g->n_q = 0;
	for (int k = g->n_t - 1; k >= 0; k--) {
		if (g->t[k]->gone) {
			g->lost_gone += g->t[k]->lost_batches;
			g->cupti_dropped_gone += g->t[k]->cupti_dropped;
			target_free(g->t[k]);
			g->t[k] = g->t[--g->n_t];
		}
	}
	return 0;
}

void agent_gpu_summary(struct agent_gpu *g, char *buf, size_t len)
{
	struct gpu_attr_stats st;
	uint64_t lost, cupti_dropped;

	buf[0] = 0;
	if (!g)
		return;
	lost = g->lost_gone;
	cupti_dropped = g->cupti_dropped_gone;
	gpu_attr_stats(g->attr, &st);
	for (int i = 0; i < g->n_t; i++) {
		lost += g->t[i]->lost_batches;
		cupti_dropped += g->t[i]->cupti_dropped;
	}
	if (!g->n_attached)
		return;
	snprintf(buf, len, "GPU: %llu records stored, %llu step lists (%llu sequences), %.3f ms "
		 "attributed to requests, %llu batches lost (%llu ring-buffer drops), %llu records "
		 "dropped by CUPTI, %llu shed by the agent", (unsigned long long)g->kernels_written,
		 (unsigned long long)st.step_lists, (unsigned long long)st.seq_entries,
		 st.attributed_ns / 1e6,
		 (unsigned long long)lost, (unsigned long long)counter(g, KPI_GCNT_DROPS),
		 (unsigned long long)cupti_dropped, (unsigned long long)g->dropped_rows);
}
