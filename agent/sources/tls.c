/* tls.c - kpi-agent's TLS side: loads bpf/kpi_tls.bpf.c on the main object's maps,
 * attaches its uprobes to each HTTP-mode target's libssl (or the OpenSSL linked into
 * its executable, as Node's, or Go's crypto/tls inside a Go executable), names the
 * targets it cannot read. */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "kpi.skel.h"
#include "kpi_tls.skel.h"
#include "agent/host/elf.h"
#include "agent/host/gobin.h"
#include "agent/host/host.h"
#include "agent/host/targets.h"
#include "loader.h"
#include "losses.h"
#include "tls.h"

/* SSL_read, SSL_write, SSL_read_ex, SSL_write_ex: entry and return each */
#define N_FUNCS 4
_Static_assert(2 * N_FUNCS <= SIDE_MAX_LINKS, "a TLS target's links fit a side_target");
/* Go: crypto/tls.(*Conn).Read and Write, an entry and each RET */
#define N_GO_FUNCS 2
_Static_assert(N_GO_FUNCS * (1 + GO_MAX_RETS) <= SIDE_MAX_LINKS, "a Go target's links fit");

enum tls_state {
	TLS_PROBED,             /* its libssl's (or executable's) SSL_read/SSL_write are probed */
	TLS_PROBED_GO,          /* its executable's Go crypto/tls Read/Write are probed */
	TLS_NO_LIB,             /* it maps no libssl (yet), its executable has none */
	TLS_FAILED,             /* the uprobes could not be attached */
};

/* Per target (side_target.data). */
struct tls_target {
	enum tls_state state;
	bool reported;                  /* 'TLS not readable' said */
	bool exe_checked;               /* its executable was looked at for OpenSSL and Go */
	char lib[PATH_MAX];             /* the file probed: its libssl, or its executable */
	char why[256];                  /* a Go executable not probed: why ("has no ...") */
};

struct agent_tls {
	struct kpi_tls_bpf *skel;
	struct side side;               /* the object and its targets (loader.h) */
	bool verbose;
	unsigned n_probed, n_probed_go, n_unreadable;   /* processes, in all */
};

/* The entry and return probes of each function; SSL_read and SSL_write are
 * needed, the _ex pair (OpenSSL 1.1.1 on) is taken where it is. */
static int target_attach(struct agent_tls *g, struct side_target *st, struct tls_target *t)
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
		st->links[2 * i] = bpf_program__attach_uprobe_opts(entry[i], st->pid, t->lib, 0, &o);
		if (st->links[2 * i])
			st->links[2 * i + 1] = bpf_program__attach_uprobe_opts(ret[i], st->pid, t->lib, 0, &r);
		if (st->links[2 * i] && st->links[2 * i + 1]) {
			n_ex += i >= 2;
			continue;
		}
		bpf_link__destroy(st->links[2 * i]);
		st->links[2 * i] = NULL;
		if (i >= 2)
			continue;
		fprintf(stderr, "kpi-agent: pid %d: cannot attach to %s in %s (%s): its TLS "
			"exchanges are not readable\n", st->pid, fn[i], t->lib, strerror(errno));
		side_unlink(st);
		return -1;
	}
	printf("TLS: pid %d: SSL_read/SSL_write%s uprobes on %s (%.1f ms)\n", st->pid,
	       n_ex == 2 ? " (and their _ex)" : "", t->lib, (double)(host_mono_ns() - t0) / 1e6);
	return 0;
}

/* Says once why pid's TLS is not read. */
static void say_unreadable(struct agent_tls *g, struct side_target *st, const char *why)
{
	struct tls_target *t = st->data;
	char comm[32];

	if (t->reported)
		return;
	t->reported = true;
	g->n_unreadable++;
	target_comm(st->pid, comm, sizeof(comm));
	printf("TLS not readable: pid %d (%s) %s; its TLS connections are counted as "
	       "tls_unreadable and have no rows\n", st->pid, comm, why);
}

/* Go's crypto/tls in a Go executable (t->lib): an entry uprobe on
 * (*Conn).Read and Write and one on each of their RETs (gobin.h says why
 * not a uretprobe).  -1 with t->why when it has none, or they cannot be
 * found or probed. */
static int go_attach(struct agent_tls *g, struct side_target *st, struct tls_target *t,
		     const char *ver)
{
	static const char *const fn[N_GO_FUNCS] = { "crypto/tls.(*Conn).Read", "crypto/tls.(*Conn).Write" };
	struct bpf_program *entry[N_GO_FUNCS] = { g->skel->progs.kpi_go_tls_read,
						  g->skel->progs.kpi_go_tls_write };
	struct go_func f[N_GO_FUNCS];
	uint64_t t0 = host_mono_ns();
	char why[160];
	int n = 0, n_ret = 0, n_jump = 0;

	if (go_funcs(t->lib, fn, f, N_GO_FUNCS, why, sizeof(why))) {
		snprintf(t->why, sizeof(t->why), "is a Go executable (%s) that %s", *ver ? ver : "its "
			 "version not recorded", why);
		return -1;
	}
	for (int i = 0; i < N_GO_FUNCS; i++) {
		for (int r = -1; r < f[i].n_ret; r++) {
			struct bpf_program *p = r < 0 ? entry[i] : g->skel->progs.kpi_go_tls_ret;
			uint64_t off = r < 0 ? f[i].off : f[i].ret_off[r];
			st->links[n] = bpf_program__attach_uprobe_opts(p, st->pid, t->lib, off, NULL);
			if (!st->links[n++]) {
				snprintf(t->why, sizeof(t->why), "is a Go executable whose %s could not be "
					 "probed at %#llx (%s)", fn[i], (unsigned long long)off, strerror(errno));
				side_unlink(st);
				return -1;
			}
		}
		n_ret += f[i].n_ret;
		n_jump += f[i].off != f[i].entry;
	}
	printf("TLS: pid %d: Go crypto/tls (%s) Read/Write uprobes, at their entries (%d of 2 at "
	       "the stack check's jump) and %d RETs, on %s (%.1f ms)\n", st->pid,
	       *ver ? ver : "version not recorded", n_jump, n_ret, t->lib,
	       (double)(host_mono_ns() - t0) / 1e6);
	return 0;
}

/* Its executable, looked at once: OpenSSL (or BoringSSL) linked in with
 * SSL_read and SSL_write exported, as Node's, probed as a libssl is; Go's
 * crypto/tls.  The state it leaves; TLS_NO_LIB when neither. */
static enum tls_state exe_check(struct agent_tls *g, struct side_target *st, struct tls_target *t)
{
	char ver[32];

	if (t->exe_checked || target_exe_path(st->pid, t->lib, sizeof(t->lib)))
		return TLS_NO_LIB;
	t->exe_checked = true;
	if (elf_defines(t->lib, "SSL_read") && elf_defines(t->lib, "SSL_write"))
		return target_attach(g, st, t) ? TLS_FAILED : TLS_PROBED;
	if (go_exe(t->lib, ver, sizeof(ver)))
		return go_attach(g, st, t, ver) ? TLS_NO_LIB : TLS_PROBED_GO;
	return TLS_NO_LIB;
}

/* Looks for libssl in its maps, or OpenSSL or Go's TLS in its executable,
 * and attaches the uprobes to whichever file holds them. */
static void target_check(struct agent_tls *g, struct side_target *st)
{
	struct tls_target *t = st->data;

	if (!target_lib_path(st->pid, TLS_LIB_NAME, t->lib, sizeof(t->lib)))
		t->state = target_attach(g, st, t) ? TLS_FAILED : TLS_PROBED;
	else
		t->state = exe_check(g, st, t);
	g->n_probed += t->state == TLS_PROBED;
	g->n_probed_go += t->state == TLS_PROBED_GO;
}

/* Every HTTP-mode target is followed, with a libssl or without one (yet). */
static bool target_add(void *ctx, struct side_target *st)
{
	struct tls_target *t = calloc(1, sizeof(*t));

	if (!t)
		abort();
	st->data = t;
	target_check(ctx, st);
	return true;
}

/* A library opened since the last look (Python's ssl module, at its import). */
static void target_recheck(void *ctx, struct side_target *st)
{
	if (((struct tls_target *)st->data)->state == TLS_NO_LIB)
		target_check(ctx, st);
}

static void target_drop(void *ctx, struct side_target *st)
{
	free(st->data);
	st->data = NULL;
}

bool agent_tls_readable(void *ctx, uint32_t pid)
{
	struct agent_tls *g = ctx;
	struct side_target *st;
	struct tls_target *t;

	if (!g)
		return false;
	/* a connection before the sync got to the process: look now */
	st = side_find(&g->side, (pid_t)pid);
	if (!st)
		st = side_add(&g->side, (pid_t)pid, true);
	if (!st)
		return false;
	t = st->data;
	if (t->state == TLS_NO_LIB && !t->reported)
		target_check(g, st);    /* a libssl opened since the last look */
	if (t->state == TLS_PROBED || t->state == TLS_PROBED_GO)
		return true;
	say_unreadable(g, st, t->why[0] ? t->why : t->state == TLS_NO_LIB ? "has TLS connections but "
		       "maps no libssl and its executable exports no SSL_read and is not Go's (another "
		       "TLS library, or one linked in without its symbols)" : "could not be probed in "
		       "its libssl");
	return false;
}

void agent_tls_summary(const struct agent_tls *g, char *buf, size_t len)
{
	buf[0] = 0;
	if (g && (g->n_probed || g->n_probed_go || g->n_unreadable))
		snprintf(buf, len, "TLS: %u processes read through OpenSSL, %u through Go's crypto/tls "
			 "(%llu calls returned after their socket closed, not read), %u not readable",
			 g->n_probed, g->n_probed_go,
			 (unsigned long long)losses_percpu_sum(g->skel->maps.counters, KPI_CNT_GO_TLS_CLOSED,
								libbpf_num_possible_cpus()),
			 g->n_unreadable);
}

struct agent_tls *agent_tls_open(struct kpi_bpf *main_skel, bool verbose, char *err, size_t errlen)
{
	struct agent_tls *g = calloc(1, sizeof(*g));

	if (!g)
		abort();
	g->verbose = verbose;
	g->skel = kpi_tls_bpf__open();
	if (side_open(&g->side, "TLS", g->skel, g->skel ? g->skel->skeleton : NULL, err, errlen))
		goto fail;
	/* one ring, one target list, one set of counters for both objects */
	struct bpf_map *mine[] = { g->skel->maps.events, g->skel->maps.counters,
				   g->skel->maps.targets, g->skel->maps.tls_calls,
				   g->skel->maps.tls_last_read, g->skel->maps.tls_last_write,
				   g->skel->maps.conns };
	struct bpf_map *theirs[] = { main_skel->maps.events, main_skel->maps.counters,
				     main_skel->maps.targets, main_skel->maps.tls_calls,
				     main_skel->maps.tls_last_read, main_skel->maps.tls_last_write,
				     main_skel->maps.conns };
	if (side_share_maps(&g->side, mine, theirs, 7, err, errlen))
		goto fail;
	g->skel->rodata->wakeup_bytes = main_skel->rodata->wakeup_bytes;
	if (side_load(&g->side, err, errlen))
		goto fail;
	side_follow(&g->side, true, &(struct side_ops){ .add = target_add, .recheck = target_recheck,
							.drop = target_drop }, g);
	return g;
fail:
	agent_tls_close(g);
	return NULL;
}

struct side *agent_tls_side(struct agent_tls *g)
{
	return g ? &g->side : NULL;
}

void agent_tls_close(struct agent_tls *g)
{
	if (!g)
		return;
	side_close(&g->side);
	free(g);
}
