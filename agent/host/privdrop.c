/* privdrop.c - capability and user drop for kpi-agent, with the raw capget /
 * capset / prctl interfaces of linux/capability.h (no libcap).
 *
 * What attaching to a kpi-infer that starts later needs, and so is kept:
 *   CAP_BPF         bpf() map updates (the targets, ports and threads maps, the
 *                   USDT spec maps libbpf fills) and links for the new pid
 *   CAP_PERFMON     perf_event_open() of a uprobe (the USDT call sites): the
 *                   kernel refuses uprobe perf events without it
 *   CAP_SYS_PTRACE  /proc/<pid>/exe, maps and fd of a process of another user
 *                   (ptrace read access), and perf_event_open() on that pid
 *   CAP_KILL        SIGCONT to a kpi-infer of another user that the exec hold
 *                   stopped at its exec (not with --pid or --no-exec-hold)
 *   CAP_SYS_ADMIN   only where the kernel refuses a uprobe perf event with
 *                   CAP_PERFMON alone (seen on 6.18: EACCES); probed at drop
 *                   time by opening one on this process with the set above
 * Everything else (CAP_SYS_ADMIN for mounting tracefs, CAP_SYS_RESOURCE for
 * RLIMIT_MEMLOCK, CAP_DAC_* for tracefs and the DB directory, CAP_SETUID...)
 * is only needed before this point and is dropped, from the bounding set too.
 * docs/security.md keeps the same table. */
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/perf_event.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "privdrop.h"

#ifndef CAP_PERFMON
#define CAP_PERFMON 38
#endif
#ifndef CAP_BPF
#define CAP_BPF 39
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif

#define BIT(c) (1ull << (c))
#define KEEP_ATTACH (BIT(CAP_BPF) | BIT(CAP_PERFMON) | BIT(CAP_SYS_PTRACE))

static const char *const cap_name[] = {
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW",
	"CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT",
	"CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE",
	"CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
	"CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE",
	"CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ",
	"CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
};
#define N_CAP_NAMES (int)(sizeof(cap_name) / sizeof(cap_name[0]))

void privdrop_cap_names(uint64_t caps, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = 0;
	for (int c = 0; c < 64 && n < len; c++) {
		if (!(caps & BIT(c)))
			continue;
		if (c < N_CAP_NAMES)
			n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "", cap_name[c]);
		else
			n += (size_t)snprintf(buf + n, len - n, "%scap_%d", n ? ", " : "", c);
	}
	if (!n)
		snprintf(buf, len, "none");
}

static int cap_get(uint64_t *eff, uint64_t *perm)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct d[2];

	if (syscall(SYS_capget, &h, d))
		return -1;
	*eff = d[0].effective | (uint64_t)d[1].effective << 32;
	*perm = d[0].permitted | (uint64_t)d[1].permitted << 32;
	return 0;
}

static int cap_set2(uint64_t eff, uint64_t perm)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct d[2] = {
		{ .effective = (uint32_t)eff, .permitted = (uint32_t)perm, .inheritable = 0 },
		{ .effective = (uint32_t)(eff >> 32), .permitted = (uint32_t)(perm >> 32), .inheritable = 0 },
	};
	return (int)syscall(SYS_capset, &h, d);
}

static int cap_set(uint64_t caps)
{
	return cap_set2(caps, caps);
}

int privdrop_narrow(uint64_t caps)
{
	uint64_t eff, perm;

	return cap_get(&eff, &perm) ? -1 : cap_set(caps & perm);
}

/* Can this thread, with the capabilities now effective, open a uprobe perf
 * event on a process (itself)?  That is what attaching USDT probes to a
 * kpi-infer started later does.  Only EACCES/EPERM mean "not allowed": any
 * other outcome (even a refused offset) got past the permission checks. */
static bool uprobe_allowed(void)
{
	struct perf_event_attr attr;
	char buf[32] = "";
	int type, fd;
	FILE *fp = fopen("/sys/bus/event_source/devices/uprobe/type", "r");

	if (!fp)
		return true;
	type = fgets(buf, sizeof(buf), fp) ? atoi(buf) : -1;
	fclose(fp);
	if (type < 0)
		return true;
	memset(&attr, 0, sizeof(attr));
	attr.size = sizeof(attr);
	attr.type = (uint32_t)type;
	attr.uprobe_path = (uint64_t)(uintptr_t)"/proc/self/exe";
	attr.probe_offset = 0;
	fd = (int)syscall(SYS_perf_event_open, &attr, getpid(), -1, -1, PERF_FLAG_FD_CLOEXEC);
	if (fd >= 0) {
		close(fd);
		return true;
	}
	return errno != EACCES && errno != EPERM;
}

static int last_cap(void)
{
	int v = CAP_LAST_CAP;
	FILE *fp = fopen("/proc/sys/kernel/cap_last_cap", "r");

	if (fp) {
		if (fscanf(fp, "%d", &v) != 1)
			v = CAP_LAST_CAP;
		fclose(fp);
	}
	return v < 63 ? v : 63;
}

void privdrop_keep_kill(struct privdrop *pd)
{
	pd->keep |= BIT(CAP_KILL);
}

int privdrop_plan(struct privdrop *pd, const char *user, bool bind_low_port, char *err, size_t len)
{
	struct passwd *pw;
	uint64_t eff = 0, perm = 0;

	memset(pd, 0, sizeof(*pd));
	pd->keep = KEEP_ATTACH | (bind_low_port ? BIT(CAP_NET_BIND_SERVICE) : 0);
	pd->uid = geteuid();
	pd->gid = getegid();
	if (user && !strcmp(user, "root"))
		user = NULL, pd->uid = 0;
	else if (!user && geteuid() == 0 && getpwnam(PRIVDROP_DEFAULT_USER))
		user = PRIVDROP_DEFAULT_USER;
	if (!user) {
		if ((pw = getpwuid(geteuid())))
			snprintf(pd->user, sizeof(pd->user), "%s", pw->pw_name);
		else
			snprintf(pd->user, sizeof(pd->user), "uid %d", (int)geteuid());
		return 0;
	}
	errno = 0;
	pw = getpwnam(user);
	if (!pw) {
		snprintf(err, len, "--user %s: no such user%s%s; create it (useradd --system "
			 "--no-create-home --shell /usr/sbin/nologin %s) or pass --user root to keep "
			 "uid 0 (capabilities are dropped either way)", user, errno ? ": " : "",
			 errno ? strerror(errno) : "", user);
		return -1;
	}
	if (pw->pw_uid == geteuid()) {
		snprintf(pd->user, sizeof(pd->user), "%s", pw->pw_name);
		return 0;
	}
	if (cap_get(&eff, &perm) || !(perm & BIT(CAP_SETUID)) || !(perm & BIT(CAP_SETGID))) {
		snprintf(err, len, "--user %s: switching user needs root (or CAP_SETUID and "
			 "CAP_SETGID); run kpi-agent as root or leave --user out", user);
		return -1;
	}
	pd->switch_user = true;
	pd->uid = pw->pw_uid;
	pd->gid = pw->pw_gid;
	snprintf(pd->user, sizeof(pd->user), "%s", pw->pw_name);
	return 0;
}

static int give(const struct privdrop *pd, const char *path, bool must, char *err, size_t len)
{
	if (chown(path, pd->uid, pd->gid) == 0 || (!must && errno == ENOENT))
		return 0;
	snprintf(err, len, "cannot give %s to user %s: %s; chown it or pick another --db", path,
		 pd->user, strerror(errno));
	return -1;
}

int privdrop_own_db(const struct privdrop *pd, const char *db, char *err, size_t len)
{
	char path[4096], dir[4096], *slash;
	struct stat st;
	const char *sfx[] = { "-wal", "-shm" };

	if (!pd->switch_user)
		return 0;
	if (give(pd, db, true, err, len))
		return -1;
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s%s", db, sfx[i]);
		if (give(pd, path, false, err, len))
			return -1;
	}
	snprintf(dir, sizeof(dir), "%s", db);
	slash = strrchr(dir, '/');
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == dir)
		dir[1] = 0;
	else
		*slash = 0;
	if (stat(dir, &st)) {
		snprintf(err, len, "cannot stat the database directory %s: %s", dir, strerror(errno));
		return -1;
	}
	if (st.st_uid == pd->uid && (st.st_mode & 0300) == 0300)
		return 0;
	/* the agent's own directory (store.c makes it 0750): hand it over */
	if (st.st_uid == 0 && (st.st_mode & 07777) == 0750)
		return give(pd, dir, true, err, len);
	if (st.st_gid == pd->gid && (st.st_mode & 0030) == 0030)
		return 0;
	if ((st.st_mode & 0003) == 0003)
		return 0;
	snprintf(err, len, "the database directory %s is not writable by user %s (SQLite creates "
		 "and removes the -wal and -shm files there): chown %s %s, or pick another --db, "
		 "or --user root", dir, pd->user, pd->user, dir);
	return -1;
}

int privdrop_apply(const struct privdrop *pd, char *said, size_t saidlen, char *err, size_t len)
{
	uint64_t eff, perm, keep;
	char names[1024];

	if (cap_get(&eff, &perm)) {
		snprintf(err, len, "capget: %s", strerror(errno));
		return -1;
	}
	keep = pd->keep & perm;
	/* try the narrow set first; CAP_SYS_ADMIN only if the kernel insists */
	if ((perm & BIT(CAP_SYS_ADMIN)) && !(keep & BIT(CAP_SYS_ADMIN))) {
		if (cap_set2(keep, perm) == 0) {
			if (!uprobe_allowed())
				keep |= BIT(CAP_SYS_ADMIN);
			cap_set2(eff, perm);
		}
	}
	/* the bounding set first: it needs CAP_SETPCAP, which goes next */
	if (perm & BIT(CAP_SETPCAP))
		for (int c = 0; c <= last_cap(); c++)
			if (!(keep & BIT(c)) && prctl(PR_CAPBSET_DROP, c, 0, 0, 0) && errno != EINVAL) {
				snprintf(err, len, "dropping %s from the bounding set: %s",
					 c < N_CAP_NAMES ? cap_name[c] : "a capability", strerror(errno));
				return -1;
			}
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	if (pd->switch_user) {
		if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) || setgroups(1, &pd->gid) ||
		    setresgid(pd->gid, pd->gid, pd->gid) || setresuid(pd->uid, pd->uid, pd->uid)) {
			snprintf(err, len, "switching to user %s (uid %d, gid %d) failed: %s", pd->user,
				 (int)pd->uid, (int)pd->gid, strerror(errno));
			return -1;
		}
		prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0);
	}
	if (cap_set(keep)) {
		snprintf(err, len, "capset: %s", strerror(errno));
		return -1;
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) {
		snprintf(err, len, "PR_SET_NO_NEW_PRIVS: %s", strerror(errno));
		return -1;
	}
	/* check, do not trust: a switched user must not be able to come back */
	if (cap_get(&eff, &perm) || eff != keep || perm != keep ||
	    (pd->switch_user && (geteuid() != pd->uid || setuid(0) == 0))) {
		snprintf(err, len, "dropping privileges did not take (effective %llx, permitted %llx, "
			 "uid %d)", (unsigned long long)eff, (unsigned long long)perm, (int)geteuid());
		return -1;
	}
	privdrop_cap_names(keep, names, sizeof(names));
	snprintf(said, saidlen, "dropped privileges: running as %s (uid %d), keeping %s "
		 "(to attach to kpi-infer processes that start later%s)%s", pd->user, (int)geteuid(),
		 names, keep & BIT(CAP_SYS_ADMIN) ? "; CAP_SYS_ADMIN because this kernel refuses "
		 "uprobes with CAP_PERFMON alone" : "", (keep & pd->keep) == pd->keep ? "" :
		 "; the rest of what attaching needs was not held at start");
	return 0;
}
