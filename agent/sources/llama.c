/* llama.c - kpi-agent's llama.cpp side: finds llama_decode in the HTTP-mode
 * targets' mapped files, attaches bpf/kpi_llama.bpf.c there, and hands its
 * calls to llama_join (steps out now, requests held until they can be joined). */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "kpi_llama.skel.h"
#include "agent/host/elf.h"
#include "agent/host/targets.h"
#include "agent/track/bus.h"
#include "agent/track/llama_join.h"
#include "llama.h"
#include "loader.h"
#include "losses.h"

/* A symbol llama.cpp has exported since January 2025, three months after
 * llama_batch lost its all_pos_0 / all_pos_1 / all_seq_id fields and took the
 * 56-byte layout bpf/kpi_llama_event.h reads: its presence dates the library. */
#define LLAMA_ABI_MARKER "llama_model_load_from_file"
enum { L_ENTRY, L_RETURN };

/* Per target (side_target.data): NULL when refused or failed, not retried. */
struct llama_target {
	char lib[PATH_MAX];
	struct llama_join *j;
};

struct agent_llama {
	struct kpi_llama_bpf *skel;
	struct side side;               /* the object and its targets (loader.h) */
	struct bus *bus;
	int n_attached;
	struct llama_join_stats gone;   /* sums of the targets freed */
	int n_cpus;
};

/* ---- finding llama_decode ---------------------------------------------------- */

/* Files whose name says llama (libllama*.so*, llama-addon.node, llama-server,
 * ollama): the first of them that defines llama_decode. */
int llama_lib_path(pid_t pid, char *buf, size_t len)
{
	char maps[64], line[PATH_MAX + 256], last[PATH_MAX] = "";
	int rc = -1;

	snprintf(maps, sizeof(maps), "/proc/%d/maps", pid);
	FILE *f = fopen(maps, "re");
	if (!f)
		return -1;
	while (rc && fgets(line, sizeof(line), f)) {
		char *path = strchr(line, '/');
		char open_path[PATH_MAX + 64];
		if (!path)
			continue;
		path[strcspn(path, "\n")] = 0;
		if (!strcmp(path, last) || strstr(path, " (deleted)") ||
		    !strcasestr(strrchr(path, '/') + 1, "llama"))
			continue;
		snprintf(last, sizeof(last), "%s", path);
		/* the target may live in another mount namespace */
		if (target_path(pid, path, open_path, sizeof(open_path)))
			continue;
		if (elf_defines(open_path, "llama_decode"))
			rc = snprintf(buf, len, "%s", open_path) < (int)len ? 0 : -1;
	}
	fclose(f);
	return rc;
}

/* "v0.5.0" of libllama.v0.5.0.so, "0.0.7000" of libllama.so.0.0.7000, else "". */
static void lib_version(const char *path, char *buf, size_t len)
{
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	const char *so = strstr(base, ".so");
	const char *dot = strchr(base, '.');

	buf[0] = 0;
	if (so && so[3] == '.')
		snprintf(buf, len, "%s", so + 4);
	else if (so && dot && dot < so)
		snprintf(buf, len, "%.*s", (int)(so - dot - 1), dot + 1);
}

/* ---- targets ------------------------------------------------------------------- */

/* The ABI check, then the uprobe pair. */
static bool target_attach(struct agent_llama *L, struct side_target *st, const char *lib)
{
	LIBBPF_OPTS(bpf_uprobe_opts, opts, .func_name = "llama_decode");
	char ver[64];

	lib_version(lib, ver, sizeof(ver));
	if (!elf_is_x86_64(lib)) {
		fprintf(stderr, "kpi-agent: pid %d: %s is not an x86-64 ELF: llama_decode's batch is read "
			"as the x86-64 SysV ABI passes it, so its engine split is off (HTTP only)\n",
			st->pid, lib);
		return false;
	}
	if (!elf_defines(lib, LLAMA_ABI_MARKER)) {
		fprintf(stderr, "kpi-agent: pid %d: %s defines llama_decode but not %s: a llama.cpp "
			"older than January 2025, whose llama_batch may not be the 56-byte layout "
			"kpi-agent reads (docs/agent.md); its engine split is off (HTTP only)\n",
			st->pid, lib, LLAMA_ABI_MARKER);
		return false;
	}
	st->links[L_ENTRY] = bpf_program__attach_uprobe_opts(L->skel->progs.kpi_llama_decode_entry,
							     st->pid, lib, 0, &opts);
	opts.retprobe = true;
	if (st->links[L_ENTRY])
		st->links[L_RETURN] = bpf_program__attach_uprobe_opts(L->skel->progs.kpi_llama_decode_return,
								      st->pid, lib, 0, &opts);
	if (!st->links[L_ENTRY] || !st->links[L_RETURN]) {
		fprintf(stderr, "kpi-agent: pid %d: cannot attach to llama_decode in %s (%s); its engine "
			"split is off (HTTP only)\n", st->pid, lib, strerror(errno));
		side_unlink(st);
		return false;
	}
	printf("tracing llama_decode of pid %d in %s (llama.cpp %s)\n", st->pid, lib,
	       ver[0] ? ver : "of unknown version");
	return true;
}

static void request_out(void *ctx, const struct kpi_request_record *rec)
{
	struct agent_llama *L = ctx;

	if (L->bus)     /* closing: the sinks may be gone (finish() released everything first) */
		bus_request(L->bus, rec);
}

static void stats_add(struct llama_join_stats *to, const struct llama_join_stats *s)
{
	to->calls += s->calls;
	to->failed_calls += s->failed_calls;
	to->partial += s->partial;
	to->generations += s->generations;
	to->joined += s->joined;
	to->ties += s->ties;
	to->check_failed += s->check_failed;
	to->no_generation += s->no_generation;
	to->forgotten += s->forgotten;
}

/* An HTTP-mode target: attached when it maps llama.cpp (a Node server loads
 * it late: until then it is looked for again at every sync). */
static bool target_add(void *ctx, struct side_target *st)
{
	struct agent_llama *L = ctx;
	char lib[PATH_MAX];

	if (llama_lib_path(st->pid, lib, sizeof(lib)))
		return false;
	if (target_attach(L, st, lib)) {
		struct llama_target *t = calloc(1, sizeof(*t));
		if (!t)
			abort();
		snprintf(t->lib, sizeof(t->lib), "%s", lib);
		t->j = llama_join_new((uint32_t)st->pid);
		st->data = t;
		L->n_attached++;
	}
	return true;    /* refused or failed: kept, not retried */
}

/* Hands out what is held of it, then forgets it. */
static void target_drop(void *ctx, struct side_target *st)
{
	struct agent_llama *L = ctx;
	struct llama_target *t = st->data;

	if (!t)
		return;
	llama_join_release(t->j, 0, true, request_out, L);
	stats_add(&L->gone, llama_join_stats(t->j));
	llama_join_free(t->j);
	free(t);
	st->data = NULL;
}

static struct llama_join *join_of(struct agent_llama *L, uint32_t pid)
{
	struct side_target *st = side_find(&L->side, (pid_t)pid);

	return st && st->data ? ((struct llama_target *)st->data)->j : NULL;
}

/* ---- events and records ------------------------------------------------------- */

static int on_event(void *ctx, void *data, size_t size)
{
	struct agent_llama *L = ctx;
	const struct kpi_llama_ev *e = data;
	struct kpi_step_record step;

	if (size < sizeof(*e))
		return 0;
	struct llama_join *j = join_of(L, e->pid);
	if (!j)
		return 0;
	llama_join_call(j, e, &step);
	bus_step(L->bus, &step);
	return 0;
}

static bool hold(void *ctx, const struct kpi_request_record *rec)
{
	struct llama_join *j = join_of(ctx, rec->pid);

	if (!j)
		return false;
	llama_join_hold(j, rec);
	return true;
}

void agent_llama_flush(struct agent_llama *L, uint64_t now, bool final)
{
	if (!L)
		return;
	for (int i = 0; i < L->side.n_t; i++) {
		struct llama_target *t = L->side.t[i].data;
		if (t)
			llama_join_release(t->j, now, final, request_out, L);
	}
}

/* ---- open / close ----------------------------------------------------------------- */

struct agent_llama *agent_llama_open(char *err, size_t errlen)
{
	struct agent_llama *L = calloc(1, sizeof(*L));

	if (!L)
		abort();
	L->n_cpus = libbpf_num_possible_cpus();
	L->skel = kpi_llama_bpf__open();
	if (side_open(&L->side, "llama.cpp", L->skel, L->skel ? L->skel->skeleton : NULL, err, errlen) ||
	    side_load(&L->side, err, errlen))
		goto fail;
	side_follow(&L->side, true, &(struct side_ops){ .add = target_add, .drop = target_drop }, L);
	return L;
fail:
	agent_llama_close(L);
	return NULL;
}

struct side *agent_llama_side(struct agent_llama *L)
{
	return L ? &L->side : NULL;
}

int agent_llama_connect(struct agent_llama *L, struct bus *bus, struct ring_buffer *rb,
			char *err, size_t errlen)
{
	if (side_add_ring(&L->side, rb, L->skel->maps.llama_events, on_event, L, err, errlen))
		return -1;
	L->bus = bus;
	bus_set_hold(bus, hold, L);
	return 0;
}

void agent_llama_close(struct agent_llama *L)
{
	if (!L)
		return;
	if (L->bus)
		bus_set_hold(L->bus, NULL, NULL);
	L->bus = NULL;
	side_close(&L->side);
	free(L);
}

static uint64_t counter(struct agent_llama *L, uint32_t idx)
{
	return losses_percpu_sum(L->skel->maps.llama_counters, idx, L->n_cpus);
}

void agent_llama_summary(struct agent_llama *L, char *buf, size_t len)
{
	struct llama_join_stats s;

	buf[0] = 0;
	if (!L || !L->n_attached)
		return;
	s = L->gone;
	for (int i = 0; i < L->side.n_t; i++) {
		struct llama_target *t = L->side.t[i].data;
		if (t)
			stats_add(&s, llama_join_stats(t->j));
	}
	snprintf(buf, len, "libllama: %llu llama_decode calls (%llu failed, %llu summarised in part, "
		 "%llu not read as a llama_batch, %llu ring-buffer drops), %llu generations; %llu "
		 "requests joined (%llu among equals), %llu failed the check (no engine marks), %llu found no generation",
		 (unsigned long long)s.calls, (unsigned long long)s.failed_calls,
		 (unsigned long long)s.partial, (unsigned long long)counter(L, KPI_LCNT_BAD),
		 (unsigned long long)counter(L, KPI_LCNT_DROPS), (unsigned long long)s.generations,
		 (unsigned long long)s.joined, (unsigned long long)s.ties, (unsigned long long)s.check_failed,
		 (unsigned long long)s.no_generation);
}
