/* targets.c - /proc scanning for kpi-agent: which processes are kpi-infer,
 * their listening TCP ports (to filter tcp_probe in BPF) and their threads. */
#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "targets.h"

static bool is_number(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!isdigit((unsigned char)*s))
			return false;
	return true;
}

int target_exe_path(pid_t pid, char *buf, size_t len)
{
	char link[64];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/%d/exe", pid);
	n = readlink(link, buf, len - 1);
	if (n < 0)
		return -1;
	buf[n] = 0;
	/* a rebuilt binary: the running image is only reachable via the link */
	if (n > 10 && !strcmp(buf + n - 10, " (deleted)"))
		snprintf(buf, len, "%s", link);
	return 0;
}

static bool matches(pid_t pid, const char *exe)
{
	char path[PATH_MAX], comm[64] = "", f[64];
	FILE *fp;

	if (target_exe_path(pid, path, sizeof(path)) == 0) {
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
	snprintf(f, sizeof(f), "/proc/%d/comm", pid);
	fp = fopen(f, "r");
	if (!fp)
		return false;
	if (!fgets(comm, sizeof(comm), fp))
		comm[0] = 0;
	fclose(fp);
	comm[strcspn(comm, "\n")] = 0;
	return !strcmp(comm, TARGET_DEFAULT_NAME);
}

int targets_scan(const char *exe, pid_t *out, int max)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	int n = 0;
	pid_t self = getpid();

	if (!d)
		return 0;
	while ((de = readdir(d)) && n < max) {
		if (!is_number(de->d_name))
			continue;
		pid_t pid = atoi(de->d_name);
		if (pid != self && matches(pid, exe))
			out[n++] = pid;
	}
	closedir(d);
	return n;
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

/* Socket inodes open in pid. */
static int socket_inodes(pid_t pid, unsigned long *ino, int max)
{
	char dir[64], link[PATH_MAX], target[128];
	DIR *d;
	struct dirent *de;
	int n = 0;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
	d = opendir(dir);
	if (!d)
		return 0;
	while ((de = readdir(d)) && n < max) {
		ssize_t len;
		if (!is_number(de->d_name))
			continue;
		snprintf(link, sizeof(link), "%s/%s", dir, de->d_name);
		len = readlink(link, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = 0;
		if (!strncmp(target, "socket:[", 8))
			ino[n++] = strtoul(target + 8, NULL, 10);
	}
	closedir(d);
	return n;
}

int target_listen_ports(pid_t pid, uint16_t *ports, int max)
{
	static unsigned long ino[4096];
	int n_ino = socket_inodes(pid, ino, 4096), n = 0;
	const char *files[] = { "tcp", "tcp6" };

	for (int f = 0; f < 2 && n_ino; f++) {
		char path[64], line[512];
		FILE *fp;

		snprintf(path, sizeof(path), "/proc/%d/net/%s", pid, files[f]);
		fp = fopen(path, "r");
		if (!fp)
			continue;
		while (fgets(line, sizeof(line), fp) && n < max) {
			char local[128];
			unsigned st, port;
			unsigned long inode;
			char *colon;
			/* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
			if (sscanf(line, " %*d: %127s %*s %x %*s %*s %*s %*u %*u %lu", local, &st, &inode) != 3)
				continue;
			if (st != 0x0A)     /* TCP_LISTEN */
				continue;
			colon = strrchr(local, ':');
			if (!colon || sscanf(colon + 1, "%x", &port) != 1)
				continue;
			for (int i = 0; i < n_ino; i++)
				if (ino[i] == inode) {
					bool dup = false;
					for (int k = 0; k < n; k++)
						dup |= ports[k] == port;
					if (!dup)
						ports[n++] = (uint16_t)port;
					break;
				}
		}
		fclose(fp);
	}
	return n;
}

int target_threads(pid_t pid, pid_t *tids, int max)
{
	char dir[64];
	DIR *d;
	struct dirent *de;
	int n = 0;

	snprintf(dir, sizeof(dir), "/proc/%d/task", pid);
	d = opendir(dir);
	if (!d)
		return 0;
	while ((de = readdir(d)) && n < max)
		if (is_number(de->d_name))
			tids[n++] = atoi(de->d_name);
	closedir(d);
	return n;
}
