/* tls.c - kpi-agent's TLS side: loads bpf/kpi_tls.bpf.c on the main object's maps,
 * attaches its uprobes to each HTTP-mode target's libssl, names the targets it cannot read. */
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
#include "kpi.skel.h"
#include "kpi_tls.skel.h"
#include "bpf/kpi_event.h"
#include "agent/host/host.h"
#include "agent/host/targets.h"
#include "tls.h"

/* SSL_read, SSL_write, SSL_read_ex, SSL_write_ex: entry and return each */
#define N_FUNCS 4

enum tls_state {
	TLS_PROBED,             /* its libssl's SSL_read/SSL_write are probed */
	TLS_NO_LIB,             /* it maps no libssl (yet) */
	TLS_FAILED,             /* the uprobes could not be attached */
};

struct tls_target {
	pid_t pid;
	unsigned long long start_time;
	enum tls_state state;
	bool reported;                  /* 'TLS not readable' said */
	bool exe_checked;               /* its executable was looked at for OpenSSL */
	bool listed;                    /* in the last sync's list */
	struct bpf_link *links[2 * N_FUNCS];
	char lib[PATH_MAX];
};

struct agent_tls {
	struct kpi_tls_bpf *skel;
	struct tls_target t[KPI_MAX_TARGETS];
	int n_t;
	bool verbose;
	unsigned n_probed, n_unreadable;        /* processes, in all */
};

static void target_unlink(struct tls_target *t)
{
	for (int i = 0; i < 2 * N_FUNCS; i++) {
		bpf_link__destroy(t->links[i]);
		t->links[i] = NULL;
	}
}

/* The entry and return probes of each function; SSL_read and SSL_write are
 * needed, the _ex pair (OpenSSL 1.1.1 on) is taken where it is. */
static int target_attach(struct agent_tls *g, struct tls_target *t)
{
	static const char *const fn[N_FUNCS] = { "SSL_read", "SSL_write", "SSL_read_ex", "SSL_write_ex" };
	struct bpf_program *entry[N_FUNCS] = {
		g->skel->progs.kpi_ssl_read, g->skel->progs.kpi_ssl_write,
		g->skel->progs.kpi_ssl_read_ex, g->skel->progs.kpi_ssl_write_ex,
	};
	struct bpf_program *ret[N_FUNCS] = {
		g->skel->progs.kpi_ssl_ret, g->skel->progs.kpi_ssl_ret,
		g->skel->progs.kpi_ssl_ret_ex, g->skel->progs.kpi_ssl_ret_ex,
	};
	uint64_t t0 = host_mono_ns();
	int n_ex = 0;

	for (int i = 0; i < N_FUNCS; i++) {
		LIBBPF_OPTS(bpf_uprobe_opts, o, .func_name = fn[i]);
		LIBBPF_OPTS(bpf_uprobe_opts, r, .func_name = fn[i], .retprobe = true);
		t->links[2 * i] = bpf_program__attach_uprobe_opts(entry[i], t->pid, t->lib, 0, &o);
		if (t->links[2 * i])
			t->links[2 * i + 1] = bpf_program__attach_uprobe_opts(ret[i], t->pid, t->lib, 0, &r);
		if (t->links[2 * i] && t->links[2 * i + 1]) {
			n_ex += i >= 2;
			continue;
		}
		bpf_link__destroy(t->links[2 * i]);
		t->links[2 * i] = NULL;
		if (i >= 2)
			continue;
		fprintf(stderr, "kpi-agent: pid %d: cannot attach to %s in %s (%s): its TLS "
			"exchanges are not readable\n", t->pid, fn[i], t->lib, strerror(errno));
		target_unlink(t);
		return -1;
	}
	printf("TLS: pid %d: SSL_read/SSL_write%s uprobes on %s (%.1f ms)\n", t->pid,
	       n_ex == 2 ? " (and their _ex)" : "", t->lib, (double)(host_mono_ns() - t0) / 1e6);
	return 0;
}

/* Whether the ELF file at path has a symbol called name (in .dynsym or .symtab). */
static bool elf_has_symbol(const char *path, const char *name)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	Elf_Scn *scn = NULL;
	bool found = false;
	Elf *e;

	if (fd < 0)
		return false;
	elf_version(EV_CURRENT);
	e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	while (e && !found && (scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		Elf_Data *d;
		if (!gelf_getshdr(scn, &sh) || (sh.sh_type != SHT_DYNSYM && sh.sh_type != SHT_SYMTAB) ||
		    !sh.sh_entsize || !(d = elf_getdata(scn, NULL)))
			continue;
		for (size_t i = 0; i < sh.sh_size / sh.sh_entsize && !found; i++) {
			GElf_Sym sym;
			const char *n;
			found = gelf_getsym(d, (int)i, &sym) && sym.st_value &&
				(n = elf_strptr(e, sh.sh_link, sym.st_name)) && !strcmp(n, name);
		}
	}
	elf_end(e);
	close(fd);
	return found;
}

/* Says once why pid's TLS is not read. */
static void say_unreadable(struct agent_tls *g, struct tls_target *t, const char *why)
{
	char comm[32];

	if (t->reported)
		return;
	t->reported = true;
	g->n_unreadable++;
	target_comm(t->pid, comm, sizeof(comm));
	printf("TLS not readable: pid %d (%s) %s; its TLS connections are counted as "
	       "tls_unreadable and have no rows\n", t->pid, comm, why);
}

/* Looks for libssl in t's maps, attaches when it is there.  An executable
 * that has OpenSSL in it (Node) is named at once, before any connection. */
static void target_check(struct agent_tls *g, struct tls_target *t)
{
	char exe[64];

	if (target_lib_path(t->pid, TLS_LIB_NAME, t->lib, sizeof(t->lib))) {
		t->state = TLS_NO_LIB;
		snprintf(exe, sizeof(exe), "/proc/%d/exe", t->pid);
		if (!t->exe_checked && elf_has_symbol(exe, "SSL_read"))
			say_unreadable(g, t, "has OpenSSL linked into its executable (it has SSL_read) "
				       "and maps no libssl");
		t->exe_checked = true;
		return;
	}
	t->state = target_attach(g, t) ? TLS_FAILED : TLS_PROBED;
	g->n_probed += t->state == TLS_PROBED;
}

static struct tls_target *target_find(struct agent_tls *g, uint32_t pid)
{
	for (int i = 0; i < g->n_t; i++)
		if ((uint32_t)g->t[i].pid == pid)
			return &g->t[i];
	return NULL;
}

static struct tls_target *target_add(struct agent_tls *g, uint32_t pid)
{
	struct tls_target *t;

	if (g->n_t == KPI_MAX_TARGETS)
		return NULL;
	t = &g->t[g->n_t++];
	memset(t, 0, sizeof(*t));
	t->pid = (pid_t)pid;
	t->start_time = target_start_time(t->pid);
	target_check(g, t);
	return t;
}

void agent_tls_sync(struct agent_tls *g, const uint32_t *pids, int n, bool recheck)
{
	if (!g)
		return;
	for (int i = 0; i < g->n_t; i++)
		g->t[i].listed = false;
	/* a pid reused by another process is told by its start time, read on
	 * the rescan's clock only (a /proc read per target) */
	for (int k = 0; k < n; k++) {
		struct tls_target *t = target_find(g, pids[k]);
		if (t)
			t->listed = !recheck || target_start_time(t->pid) == t->start_time;
	}
	for (int i = g->n_t - 1; i >= 0; i--)
		if (!g->t[i].listed) {
			target_unlink(&g->t[i]);
			g->t[i] = g->t[--g->n_t];
		}
	for (int k = 0; k < n; k++) {
		struct tls_target *t = target_find(g, pids[k]);
		if (!t)
			target_add(g, pids[k]);
		else if (recheck && t->state == TLS_NO_LIB)
			target_check(g, t);
	}
}

bool agent_tls_readable(void *ctx, uint32_t pid)
{
	struct agent_tls *g = ctx;
	struct tls_target *t;

	if (!g)
		return false;
	/* a connection before the sync got to the process: look now */
	t = target_find(g, pid);
	if (!t)
		t = target_add(g, pid);
	if (!t)
		return false;
	if (t->state == TLS_NO_LIB && !t->reported)
		target_check(g, t);     /* a libssl opened since the last look */
	if (t->state == TLS_PROBED)
		return true;
	say_unreadable(g, t, t->state == TLS_NO_LIB ? "has TLS connections but maps no libssl "
		       "(TLS linked into the executable, or another TLS library)" : "could not be probed in its libssl");
	return false;
}

void agent_tls_summary(const struct agent_tls *g, char *buf, size_t len)
{
	buf[0] = 0;
	if (g && (g->n_probed || g->n_unreadable))
		snprintf(buf, len, "TLS: %u processes read through libssl, %u not readable",
			 g->n_probed, g->n_unreadable);
}

struct agent_tls *agent_tls_open(struct kpi_bpf *main_skel, bool verbose, char *err, size_t errlen)
{
	struct agent_tls *g = calloc(1, sizeof(*g));
	int r;

	if (!g)
		abort();
	g->verbose = verbose;
	g->skel = kpi_tls_bpf__open();
	if (!g->skel) {
		snprintf(err, errlen, "cannot open the TLS BPF object: %s", strerror(errno));
		goto fail;
	}
	/* one ring, one target list, one set of counters for both objects */
	struct bpf_map *mine[] = { g->skel->maps.events, g->skel->maps.counters,
				   g->skel->maps.targets, g->skel->maps.tls_calls };
	struct bpf_map *theirs[] = { main_skel->maps.events, main_skel->maps.counters,
				     main_skel->maps.targets, main_skel->maps.tls_calls };
	for (size_t i = 0; i < sizeof(mine) / sizeof(mine[0]); i++) {
		r = bpf_map__reuse_fd(mine[i], bpf_map__fd(theirs[i]));
		if (r) {
			snprintf(err, errlen, "cannot share the map %s with the TLS BPF object: %s",
				 bpf_map__name(theirs[i]), strerror(-r));
			goto fail;
		}
	}
	g->skel->rodata->wakeup_bytes = main_skel->rodata->wakeup_bytes;
	r = kpi_tls_bpf__load(g->skel);
	if (r) {
		snprintf(err, errlen, "loading the TLS BPF programs failed (%s); run with -v for the "
			 "verifier's log", strerror(-r));
		goto fail;
	}
	return g;
fail:
	agent_tls_close(g);
	return NULL;
}

void agent_tls_close(struct agent_tls *g)
{
	if (!g)
		return;
	for (int i = 0; i < g->n_t; i++)
		target_unlink(&g->t[i]);
	kpi_tls_bpf__destroy(g->skel);
	free(g);
}
