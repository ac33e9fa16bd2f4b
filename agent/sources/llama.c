/* llama.c - kpi-agent's llama.cpp side: finds llama_decode in the HTTP-mode
 * targets' mapped files, attaches bpf/kpi_llama.bpf.c there, and hands its
 * calls to llama_join (steps out now, requests held until they can be joined). */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "kpi_llama.skel.h"
#include "agent/track/bus.h"
#include "llama.h"
#include "agent/track/llama_join.h"
#include "losses.h"
#include "agent/host/targets.h"

#define LLAMA_MAX_TARGETS 64
/* A symbol llama.cpp has exported since January 2025, three months after
 * llama_batch lost its all_pos_0 / all_pos_1 / all_seq_id fields and took the
 * 56-byte layout bpf/kpi_llama_event.h reads: its presence dates the library. */
#define LLAMA_ABI_MARKER "llama_model_load_from_file"

struct llama_target {
	pid_t pid;
	unsigned long long start_time;
	char lib[PATH_MAX];
	struct bpf_link *entry, *ret;
	bool attached;                  /* false: refused or failed, not retried */
	struct llama_join *j;
};

struct agent_llama {
	struct kpi_llama_bpf *skel;
	struct bus *bus;
	struct llama_target *t[LLAMA_MAX_TARGETS];
	int n_t, n_attached;
	struct llama_join_stats gone;   /* sums of the targets freed */
	int n_cpus;
};

/* ---- finding llama_decode ---------------------------------------------------- */

bool llama_elf_defines(const char *path, const char *symbol)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	bool found = false;
	Elf_Scn *scn = NULL;
	Elf *e;

	if (fd < 0)
		return false;
	elf_version(EV_CURRENT);
	e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	while (e && !found && (scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || (sh.sh_type != SHT_DYNSYM && sh.sh_type != SHT_SYMTAB) ||
		    !sh.sh_entsize)
			continue;
		Elf_Data *d = elf_getdata(scn, NULL);
		for (size_t i = 0; d && i < sh.sh_size / sh.sh_entsize && !found; i++) {
			GElf_Sym sym;
			if (!gelf_getsym(d, (int)i, &sym) || sym.st_shndx == SHN_UNDEF ||
			    GELF_ST_TYPE(sym.st_info) != STT_FUNC)
				continue;
			const char *name = elf_strptr(e, sh.sh_link, sym.st_name);
			found = name && !strcmp(name, symbol);
		}
	}
	elf_end(e);
	close(fd);
	return found;
}

static bool elf_is_x86_64(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	GElf_Ehdr eh;
	bool ok = false;

	if (fd < 0)
		return false;
	elf_version(EV_CURRENT);
	Elf *e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	ok = e && gelf_getehdr(e, &eh) && eh.e_machine == EM_X86_64 && gelf_getclass(e) == ELFCLASS64;
	elf_end(e);
	close(fd);
	return ok;
}

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
		/* the target may live in another mount namespace: go through its root */
		if (access(path, R_OK))
			snprintf(open_path, sizeof(open_path), "/proc/%d/root%s", pid, path);
		else
			snprintf(open_path, sizeof(open_path), "%s", path);
		if (llama_elf_defines(open_path, "llama_decode"))
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

static struct llama_target *target_find(struct agent_llama *L, uint32_t pid)
{
	for (int i = 0; i < L->n_t; i++)
		if ((uint32_t)L->t[i]->pid == pid)
			return L->t[i];
	return NULL;
}

/* The ABI check, then the uprobe pair. */
static bool target_attach(struct agent_llama *L, struct llama_target *t)
{
	LIBBPF_OPTS(bpf_uprobe_opts, opts, .func_name = "llama_decode");
	char ver[64];

	lib_version(t->lib, ver, sizeof(ver));
	if (!elf_is_x86_64(t->lib)) {
		fprintf(stderr, "kpi-agent: pid %d: %s is not an x86-64 ELF: llama_decode's batch is read "
			"as the x86-64 SysV ABI passes it, so its engine split is off (HTTP only)\n",
			t->pid, t->lib);
		return false;
	}
	if (!llama_elf_defines(t->lib, LLAMA_ABI_MARKER)) {
		fprintf(stderr, "kpi-agent: pid %d: %s defines llama_decode but not %s: a llama.cpp "
			"older than January 2025, whose llama_batch may not be the 56-byte layout "
			"kpi-agent reads (docs/agent.md); its engine split is off (HTTP only)\n",
			t->pid, t->lib, LLAMA_ABI_MARKER);
		return false;
	}
	t->entry = bpf_program__attach_uprobe_opts(L->skel->progs.kpi_llama_decode_entry, t->pid,
						   t->lib, 0, &opts);
	opts.retprobe = true;
	if (t->entry)
		t->ret = bpf_program__attach_uprobe_opts(L->skel->progs.kpi_llama_decode_return,
							 t->pid, t->lib, 0, &opts);
	if (!t->entry || !t->ret) {
		fprintf(stderr, "kpi-agent: pid %d: cannot attach to llama_decode in %s (%s); its engine "
			"split is off (HTTP only)\n", t->pid, t->lib, strerror(errno));
		bpf_link__destroy(t->entry);
		t->entry = NULL;
		return false;
	}
	printf("tracing llama_decode of pid %d in %s (llama.cpp %s)\n", t->pid, t->lib,
	       ver[0] ? ver : "of unknown version");
	return true;
}

static void request_out(void *ctx, const struct kpi_request_record *rec)
{
	bus_request(((struct agent_llama *)ctx)->bus, rec);
}

static void stats_add(struct llama_join_stats *to, const struct llama_join_stats *s)
{
	to->calls += s->calls;
	to->failed_calls += s->failed_calls;
	to->partial += s->partial;
	to->generations += s->generations;
	to->joined += s->joined;
	to->check_failed += s->check_failed;
	to->no_generation += s->no_generation;
	to->forgotten += s->forgotten;
}

static void target_free(struct agent_llama *L, struct llama_target *t, uint64_t now)
{
	bpf_link__destroy(t->ret);
	bpf_link__destroy(t->entry);
	if (t->j) {
		llama_join_release(t->j, now, true, request_out, L);
		stats_add(&L->gone, llama_join_stats(t->j));
		llama_join_free(t->j);
	}
	free(t);
}

void agent_llama_sync(struct agent_llama *L, const pid_t *pids, int n)
{
	if (!L)
		return;
	for (int i = L->n_t - 1; i >= 0; i--) {
		struct llama_target *t = L->t[i];
		bool listed = false;
		for (int k = 0; k < n && !listed; k++)
			listed = pids[k] == t->pid;
		if (!listed || target_start_time(t->pid) != t->start_time) {
			target_free(L, t, 0);
			L->t[i] = L->t[--L->n_t];
		}
	}
	for (int k = 0; k < n && L->n_t < LLAMA_MAX_TARGETS; k++) {
		char lib[PATH_MAX];
		if (target_find(L, (uint32_t)pids[k]) || llama_lib_path(pids[k], lib, sizeof(lib)))
			continue; /* no llama.cpp (yet: a Node server loads it late): looked for again */
		struct llama_target *t = calloc(1, sizeof(*t));
		if (!t)
			abort();
		t->pid = pids[k];
		t->start_time = target_start_time(t->pid);
		snprintf(t->lib, sizeof(t->lib), "%s", lib);
		L->t[L->n_t++] = t;
		t->attached = target_attach(L, t);
		if (t->attached) {
			t->j = llama_join_new((uint32_t)t->pid);
			L->n_attached++;
		}
	}
}

/* ---- events and records ------------------------------------------------------- */

static int on_event(void *ctx, void *data, size_t size)
{
	struct agent_llama *L = ctx;
	const struct kpi_llama_ev *e = data;
	struct kpi_step_record step;

	if (size < sizeof(*e))
		return 0;
	struct llama_target *t = target_find(L, e->pid);
	if (!t || !t->j)
		return 0;
	llama_join_call(t->j, e, &step);
	bus_step(L->bus, &step);
	return 0;
}

static bool hold(void *ctx, const struct kpi_request_record *rec)
{
	struct llama_target *t = target_find(ctx, rec->pid);

	if (!t || !t->j)
		return false;
	llama_join_hold(t->j, rec);
	return true;
}

void agent_llama_flush(struct agent_llama *L, uint64_t now, bool final)
{
	if (!L)
		return;
	for (int i = 0; i < L->n_t; i++)
		if (L->t[i]->j)
			llama_join_release(L->t[i]->j, now, final, request_out, L);
}

/* ---- open / close ----------------------------------------------------------------- */

struct agent_llama *agent_llama_open(char *err, size_t errlen)
{
	struct agent_llama *L = calloc(1, sizeof(*L));
	int r;

	if (!L)
		abort();
	L->n_cpus = libbpf_num_possible_cpus();
	L->skel = kpi_llama_bpf__open();
	if (!L->skel) {
		snprintf(err, errlen, "cannot open the llama.cpp BPF object: %s", strerror(errno));
		goto fail;
	}
	r = kpi_llama_bpf__load(L->skel);
	if (r) {
		snprintf(err, errlen, "loading the llama.cpp BPF programs failed (%s); run with -v for "
			 "the verifier's log", strerror(-r));
		goto fail;
	}
	return L;
fail:
	agent_llama_close(L);
	return NULL;
}

int agent_llama_connect(struct agent_llama *L, struct bus *bus, struct ring_buffer *rb,
			char *err, size_t errlen)
{
	int r = ring_buffer__add(rb, bpf_map__fd(L->skel->maps.llama_events), on_event, L);
	if (r) {
		snprintf(err, errlen, "cannot add the llama.cpp ring buffer: %s", strerror(-r));
		return -1;
	}
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
	for (int i = 0; i < L->n_t; i++)
		target_free(L, L->t[i], 0);
	kpi_llama_bpf__destroy(L->skel);
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
	for (int i = 0; i < L->n_t; i++)
		if (L->t[i]->j)
			stats_add(&s, llama_join_stats(L->t[i]->j));
	snprintf(buf, len, "libllama: %llu llama_decode calls (%llu failed, %llu summarised in part, "
		 "%llu not read as a llama_batch, %llu ring-buffer drops), %llu generations; %llu "
		 "requests joined, %llu failed the check (no engine marks), %llu found no generation",
		 (unsigned long long)s.calls, (unsigned long long)s.failed_calls,
		 (unsigned long long)s.partial, (unsigned long long)counter(L, KPI_LCNT_BAD),
		 (unsigned long long)counter(L, KPI_LCNT_DROPS), (unsigned long long)s.generations,
		 (unsigned long long)s.joined, (unsigned long long)s.check_failed,
		 (unsigned long long)s.no_generation);
}
