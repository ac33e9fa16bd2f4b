/* targets.c - /proc scanning for kpi-agent: which processes are kpi-infer,
 * their listening TCP ports (to filter tcp_probe in BPF) and their threads. */
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include "targets.h"

#define TCP_LISTEN_STATE 10     /* TCP_LISTEN, include/net/tcp_states.h */

static bool is_number(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!isdigit((unsigned char)*s))
			return false;
	return true;
}

/* Calls fn(ctx, n) for every entry of dir whose name is a number (pids in
 * /proc, fds in /proc/PID/fd, tids in /proc/PID/task) until fn returns false. */
static void each_number(const char *dir, bool (*fn)(void *ctx, int n), void *ctx)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d)))
		if (is_number(de->d_name) && !fn(ctx, atoi(de->d_name)))
			break;
	closedir(d);
}

/* A list of at most max ints being filled. */
struct ints {
	int *v, n, max;
};

/* Whether pid is in the agent's own namespace of that kind ("mnt", "net"):
 * 1, 0, or -1 when it cannot be told. */
static int in_our_ns(pid_t pid, const char *kind)
{
	char mine_path[32], path[64];
	struct stat mine, theirs;

	snprintf(mine_path, sizeof(mine_path), "/proc/self/ns/%s", kind);
	snprintf(path, sizeof(path), "/proc/%d/ns/%s", pid, kind);
	if (stat(mine_path, &mine) || stat(path, &theirs))
		return -1;
	return mine.st_ino == theirs.st_ino && mine.st_dev == theirs.st_dev;
}

/* pid shares the agent's mount namespace (true too when that cannot be told:
 * the path is then tried as it is first). */
static bool same_mntns(pid_t pid)
{
	return in_our_ns(pid, "mnt") != 0;
}

int target_path(pid_t pid, const char *path, char *buf, size_t len)
{
	int n;

	/* a container's /usr/lib/libssl.so.3 is another file than the host's of
	 * that name: go through its root whenever its mount namespace is not ours */
	if (same_mntns(pid) && access(path, R_OK) == 0)
		n = snprintf(buf, len, "%s", path);
	else
		n = snprintf(buf, len, "/proc/%d/root%s", pid, path);
	return n >= 0 && (size_t)n < len ? 0 : -1;
}

/* The executable's path as pid's mount namespace names it. */
static int exe_link(pid_t pid, char *buf, size_t len)
{
	char link[64];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/%d/exe", pid);
	n = readlink(link, buf, len - 1);
	if (n < 0)
		return -1;
	buf[n] = 0;
	return 0;
}

int target_exe_path(pid_t pid, char *buf, size_t len)
{
	char path[PATH_MAX];
	size_t n;

	if (exe_link(pid, path, sizeof(path)))
		return -1;
	n = strlen(path);
	/* a rebuilt binary: the running image is only reachable via the link */
	if (n > 10 && !strcmp(path + n - 10, " (deleted)")) {
		snprintf(buf, len, "/proc/%d/exe", pid);
		return 0;
	}
	return target_path(pid, path, buf, len);
}

bool target_matches(pid_t pid, const char *exe)
{
	char path[PATH_MAX], comm[64];

	if (exe_link(pid, path, sizeof(path)) == 0) {
		char *base;
		if (exe)
			return !strcmp(path, exe);
		base = strrchr(path, '/');
		base = base ? base + 1 : path;
		return !strncmp(base, TARGET_DEFAULT_NAME, strlen(TARGET_DEFAULT_NAME)) &&
		       (base[strlen(TARGET_DEFAULT_NAME)] == 0 ||
			!strcmp(base + strlen(TARGET_DEFAULT_NAME), " (deleted)"));
	}
	if (exe)
		return false;
	target_comm(pid, comm, sizeof(comm));
	return !strcmp(comm, TARGET_DEFAULT_NAME);
}

void target_comm(pid_t pid, char *out, size_t len)
{
	char path[32];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/comm", pid);
	snprintf(out, len, "?");
	if (!(f = fopen(path, "re")))
		return;
	if (fgets(out, (int)len, f))
		out[strcspn(out, "\n")] = 0;
	fclose(f);
}

struct scan {
	struct ints out;
	const char *exe;
	pid_t self;
};

static bool scan_one(void *ctx, int pid)
{
	struct scan *sc = ctx;

	if (pid != sc->self && target_matches(pid, sc->exe))
		sc->out.v[sc->out.n++] = pid;
	return sc->out.n < sc->out.max;
}

int targets_scan(const char *exe, pid_t *out, int max)
{
	struct scan sc = { .out = { out, 0, max }, .exe = exe, .self = getpid() };

	if (max > 0)
		each_number("/proc", scan_one, &sc);
	return sc.out.n;
}

/* /proc/PID/stat's fields from the third on (after the comm, which may hold
 * spaces and parens), into buf; NULL when gone. */
static const char *stat_fields(pid_t pid, char *buf, size_t len)
{
	char f[64], *p;
	FILE *fp;

	snprintf(f, sizeof(f), "/proc/%d/stat", pid);
	if (!(fp = fopen(f, "r")))
		return NULL;
	p = fgets(buf, (int)len, fp);
	fclose(fp);
	if (!p || !(p = strrchr(buf, ')')) || p[1] != ' ')
		return NULL;
	return p + 2;
}

#define PF_EXITING_ 0x4u        /* include/linux/sched.h */
#define SIGKILL_BIT (1ull << (9 - 1))

bool target_ending(pid_t pid)
{
	char buf[1024], path[64], line[256];
	const char *p = stat_fields(pid, buf, sizeof(buf));
	unsigned long long mask;
	unsigned int flags = 0;
	bool killed = false;
	FILE *f;

	if (!p)
		return false;
	if (*p == 'Z' || *p == 'X' || *p == 'x')
		return true;
	/* state ppid pgrp session tty_nr tpgid flags */
	if (sscanf(p, "%*c %*d %*d %*d %*d %*d %u", &flags) == 1 && (flags & PF_EXITING_))
		return true;
	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	if (!(f = fopen(path, "r")))
		return false;
	while (!killed && fgets(line, sizeof(line), f))
		if ((sscanf(line, "ShdPnd: %llx", &mask) == 1 || sscanf(line, "SigPnd: %llx", &mask) == 1) &&
		    (mask & SIGKILL_BIT))
			killed = true;
	fclose(f);
	return killed;
}

unsigned long long target_start_time(pid_t pid)
{
	char f[64], buf[1024], *p;
	unsigned long long st = 0;
	FILE *fp;

	snprintf(f, sizeof(f), "/proc/%d/stat", pid);
	fp = fopen(f, "r");
	if (!fp)
		return 0;
	if (!fgets(buf, sizeof(buf), fp)) {
		fclose(fp);
		return 0;
	}
	fclose(fp);
	/* comm may hold spaces and parens: fields restart after the last ')' */
	p = strrchr(buf, ')');
	if (!p)
		return 0;
	/* field 3 (state) follows; starttime is field 22 */
	for (int field = 2; p && field < 22; field++)
		p = strchr(p + 1, ' ');
	if (p)
		st = strtoull(p + 1, NULL, 10);
	return st;
}

struct sock_inodes {
	char dir[64];
	unsigned long *ino;
	int n, max;
};

static bool sock_inode(void *ctx, int fd)
{
	struct sock_inodes *si = ctx;
	char link[96], target[128];
	ssize_t len;

	snprintf(link, sizeof(link), "%s/%d", si->dir, fd);
	len = readlink(link, target, sizeof(target) - 1);
	if (len > 0) {
		target[len] = 0;
		if (!strncmp(target, "socket:[", 8))
			si->ino[si->n++] = strtoul(target + 8, NULL, 10);
	}
	return si->n < si->max;
}

/* Socket inodes open in pid. */
static int socket_inodes(pid_t pid, unsigned long *ino, int max)
{
	struct sock_inodes si = { .ino = ino, .max = max };

	snprintf(si.dir, sizeof(si.dir), "/proc/%d/fd", pid);
	if (max > 0)
		each_number(si.dir, sock_inode, &si);
	return si.n;
}

/* Keep port if its socket inode is one of pid's; no duplicates. */
static void add_port(uint16_t *ports, int *n, int max, unsigned port, unsigned long inode,
		     const unsigned long *ino, int n_ino)
{
	for (int i = 0; i < n_ino; i++) {
		if (ino[i] != inode)
			continue;
		for (int k = 0; k < *n; k++)
			if (ports[k] == port)
				return;
		if (*n < max)
			ports[(*n)++] = (uint16_t)port;
		return;
	}
}

/* Listening TCP sockets of a network namespace, from NETLINK_SOCK_DIAG:
 * asked for TCP_LISTEN only, the kernel walks its listening hash alone.
 * (/proc/PID/net/tcp walks every bucket of the host's established table as
 * well, whatever namespace it shows: milliseconds of kernel time a read, and
 * the agent rescans every target twice a second: with 20 containers that
 * was 15% of a core.)  -1 when netlink diagnostics are not available there. */
static int diag_listen_each(pid_t pid, void (*fn)(void *ctx, unsigned port, unsigned long inode),
			    void *ctx);

struct port_list {
	uint16_t *ports;
	int n, max;
	const unsigned long *ino;
	int n_ino;
};

static void port_of_ours(void *ctx, unsigned port, unsigned long inode)
{
	struct port_list *pl = ctx;

	add_port(pl->ports, &pl->n, pl->max, port, inode, pl->ino, pl->n_ino);
}

static int diag_listen_ports(pid_t pid, uint16_t *ports, int max, const unsigned long *ino, int n_ino)
{
	struct port_list pl = { ports, 0, max, ino, n_ino };

	return diag_listen_each(pid, port_of_ours, &pl) ? -1 : pl.n;
}

struct ns_socket {
	pid_t pid;
	int fd;
};

static void *diag_socket_there(void *arg)
{
	struct ns_socket *s = arg;
	char path[64];
	int ns;

	snprintf(path, sizeof(path), "/proc/%d/ns/net", s->pid);
	ns = open(path, O_RDONLY | O_CLOEXEC);
	if (ns >= 0 && !setns(ns, CLONE_NEWNET))
		s->fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (ns >= 0)
		close(ns);
	return NULL;    /* the thread ends in that namespace */
}

/* A NETLINK_SOCK_DIAG socket of pid's network namespace.  A socket answers
 * for the namespace it was made in: for another one than the agent's, a
 * thread made for the purpose joins pid's (setns, which needs CAP_SYS_ADMIN:
 * held where the kernel wants it for uprobes, docs/security.md), makes it
 * and ends there, so no thread of the agent ever changes namespace.  -1:
 * cannot. */
static int diag_socket(pid_t pid)
{
	struct ns_socket s = { pid, -1 };
	int ours = in_our_ns(pid, "net");
	pthread_t t;

	if (ours < 0)
		return -1;
	if (ours)
		return socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (pthread_create(&t, NULL, diag_socket_there, &s))
		return -1;
	pthread_join(t, NULL);
	return s.fd;
}

/* Calls fn(ctx, port, inode) for every listening TCP socket of pid's network
 * namespace; -1 when netlink diagnostics are not available there. */
static int diag_listen_each(pid_t pid, void (*fn)(void *ctx, unsigned port, unsigned long inode),
			    void *ctx)
{
	static const int families[] = { AF_INET, AF_INET6 };
	int fd = diag_socket(pid);

	if (fd < 0)
		return -1;
	for (int f = 0; f < 2; f++) {
		struct {
			struct nlmsghdr nlh;
			struct inet_diag_req_v2 r;
		} req = {
			.nlh = { .nlmsg_len = sizeof(req), .nlmsg_type = SOCK_DIAG_BY_FAMILY,
				 .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP },
			.r = { .sdiag_family = (__u8)families[f], .sdiag_protocol = IPPROTO_TCP,
			       .idiag_states = 1u << TCP_LISTEN_STATE },
		};
		long buf[8192 / sizeof(long)];
		bool done = false;

		if (send(fd, &req, sizeof(req), 0) != (ssize_t)sizeof(req))
			goto fail;
		while (!done) {
			ssize_t len = recv(fd, buf, sizeof(buf), 0);
			struct nlmsghdr *h = (struct nlmsghdr *)buf;

			if (len <= 0)
				goto fail;
			for (; NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
				struct inet_diag_msg *m = NLMSG_DATA(h);
				if (h->nlmsg_type == NLMSG_DONE) {
					done = true;
					break;
				}
				if (h->nlmsg_type == NLMSG_ERROR)
					goto fail;
				fn(ctx, ntohs(m->id.idiag_sport), m->idiag_inode);
			}
		}
	}
	close(fd);
	return 0;
fail:
	close(fd);
	return -1;
}

/* Calls fn(ctx, port, inode) for every listening TCP socket of pid's network
 * namespace, from its /proc/PID/net/tcp{,6} (which show pid's own namespace). */
static void proc_listen_each(pid_t pid, void (*fn)(void *ctx, unsigned port, unsigned long inode),
			     void *ctx)
{
	const char *files[] = { "tcp", "tcp6" };

	for (int f = 0; f < 2; f++) {
		char path[64], line[512];
		FILE *fp;

		snprintf(path, sizeof(path), "/proc/%d/net/%s", pid, files[f]);
		fp = fopen(path, "re");
		if (!fp)
			continue;
		while (fgets(line, sizeof(line), fp)) {
			char local[128];
			unsigned st, port;
			unsigned long inode;
			char *colon;
			/* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
			if (sscanf(line, " %*d: %127s %*s %x %*s %*s %*s %*u %*u %lu", local, &st, &inode) != 3)
				continue;
			if (st != TCP_LISTEN_STATE)
				continue;
			colon = strrchr(local, ':');
			if (colon && sscanf(colon + 1, "%x", &port) == 1)
				fn(ctx, port, inode);
		}
		fclose(fp);
	}
}

static int proc_listen_ports(pid_t pid, uint16_t *ports, int max, const unsigned long *ino,
			     int n_ino)
{
	struct port_list pl = { ports, 0, max, ino, n_ino };

	proc_listen_each(pid, port_of_ours, &pl);
	return pl.n;
}

int target_listen_ports(pid_t pid, uint16_t *ports, int max)
{
	static unsigned long ino[4096];
	int n_ino = socket_inodes(pid, ino, 4096), n = -1;

	if (!n_ino)
		return 0;
	n = diag_listen_ports(pid, ports, max, ino, n_ino);
	if (n < 0)
		n = proc_listen_ports(pid, ports, max, ino, n_ino);
	return n;
}

void target_each_thread(pid_t pid, bool (*fn)(void *ctx, int tid), void *ctx)
{
	char dir[64];

	snprintf(dir, sizeof(dir), "/proc/%d/task", pid);
	each_number(dir, fn, ctx);
}

/* ---- the process behind a port ------------------------------------------ */

#define PORT_NETNS_MAX 256      /* network namespaces looked into per scan */
#define PORT_LISTENERS_MAX 16   /* listening sockets on the port per namespace */

/* The sockets listening on the port in one network namespace. */
struct netns_listeners {
	dev_t dev;
	ino_t ino;
	unsigned port;
	unsigned long ino_sock[PORT_LISTENERS_MAX];
	int n;
};

struct port_owner {
	unsigned port;
	struct netns_listeners ns[PORT_NETNS_MAX];
	int n_ns;
	pid_t *out;             /* found */
	int n, max;
	pid_t self;
};

static void listener_of_port(void *ctx, unsigned port, unsigned long inode)
{
	struct netns_listeners *nl = ctx;

	if (nl->n < PORT_LISTENERS_MAX && port == nl->port)
		nl->ino_sock[nl->n++] = inode;
}

/* Whether pid holds one of nl's listening sockets. */
static bool holds_listener(const struct netns_listeners *nl, pid_t pid)
{
	static unsigned long ino[4096];
	int n = socket_inodes(pid, ino, 4096);

	for (int i = 0; i < n; i++)
		for (int k = 0; k < nl->n; k++)
			if (ino[i] == nl->ino_sock[k])
				return true;
	return false;
}

/* The listeners on po's port in pid's network namespace, each namespace
 * read once per scan, by sock_diag (another namespace's, a container's or an
 * `ip netns`, through the first process met in it), else from that process's
 * /proc/PID/net/tcp{,6}.  NULL when pid is gone or the table is full. */
static struct netns_listeners *listeners_of(struct port_owner *po, pid_t pid)
{
	char path[64];
	struct stat ns;
	struct netns_listeners *nl;

	snprintf(path, sizeof(path), "/proc/%d/ns/net", pid);
	if (stat(path, &ns))
		return NULL;
	for (int i = 0; i < po->n_ns; i++)
		if (po->ns[i].ino == ns.st_ino && po->ns[i].dev == ns.st_dev)
			return &po->ns[i];
	if (po->n_ns == PORT_NETNS_MAX)
		return NULL;
	nl = &po->ns[po->n_ns++];
	memset(nl, 0, sizeof(*nl));
	nl->dev = ns.st_dev;
	nl->ino = ns.st_ino;
	nl->port = po->port;
	if (diag_listen_each(pid, listener_of_port, nl)) {
		nl->n = 0;
		proc_listen_each(pid, listener_of_port, nl);
	}
	return nl;
}

static bool scan_owner(void *ctx, int pid)
{
	struct port_owner *po = ctx;
	const struct netns_listeners *nl;

	if (pid == po->self)
		return true;
	nl = listeners_of(po, pid);
	if (nl && nl->n && holds_listener(nl, pid))
		po->out[po->n++] = pid;
	return po->n < po->max;
}

int target_port_owners(uint16_t port, pid_t *out, int max)
{
	static struct port_owner po;

	if (max <= 0)
		return 0;
	memset(&po, 0, sizeof(po));
	po = (struct port_owner){ .port = port, .out = out, .max = max, .self = getpid() };
	each_number("/proc", scan_owner, &po);
	return po.n;
}

int target_lib_path(pid_t pid, const char *name, char *buf, size_t len)
{
	char maps[64], line[PATH_MAX + 256];
	int rc = -1;

	snprintf(maps, sizeof(maps), "/proc/%d/maps", pid);
	FILE *f = fopen(maps, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char *path = strchr(line, '/');
		if (!path)
			continue;
		path[strcspn(path, "\n")] = 0;
		const char *base = strrchr(path, '/') + 1;
		if (strncmp(base, name, strlen(name)) || strstr(path, " (deleted)"))
			continue;
		rc = target_path(pid, path, buf, len);
		break;
	}
	fclose(f);
	return rc;
}
