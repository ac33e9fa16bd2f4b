/* overlay.c - the layer file behind a path a process sees through an overlay
 * mount, read from its /proc/PID/mountinfo: the mount that holds the path
 * (the longest mount point that is a prefix of it, the last one listed when
 * several are stacked), and, when it is an overlay, its upper directory and
 * then its lower ones in order, the first holding the name being the file
 * the overlay shows (docs/security.md lists the reads). */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "agent/host/overlay.h"

#define MAX_FIELDS 64
#define MAX_LAYERS 512

/* mountinfo's octal escapes (\040 a space, \054 a comma in an option's
 * value, \134 a backslash), undone in place. */
static void unescape(char *s)
{
	char *o = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

/* How much of rel mount point mp covers (mp "/" covers everything, by 1);
 * 0: rel is not below mp. */
static size_t covers(const char *mp, const char *rel)
{
	size_t n = strlen(mp);

	if (!strcmp(mp, "/"))
		return 1;
	if (strncmp(mp, rel, n) || (rel[n] && rel[n] != '/'))
		return 0;
	return n;
}

struct mount {
	char *line;             /* the mountinfo line, cut into the fields below */
	const char *root, *point, *fstype;
	char *opts;
};

/* Cuts line into its fields (space separated; the optional ones end at "-"). */
static bool mount_parse(char *line, struct mount *m)
{
	char *f[MAX_FIELDS], *save = NULL;
	int n = 0, sep = -1;

	line[strcspn(line, "\n")] = '\0';
	for (char *t = strtok_r(line, " ", &save); t && n < MAX_FIELDS; t = strtok_r(NULL, " ", &save))
		f[n++] = t;
	for (int i = 6; i < n; i++)
		if (!strcmp(f[i], "-")) {
			sep = i;
			break;
		}
	if (sep < 0 || sep + 3 >= n)
		return false;
	unescape(f[3]);
	unescape(f[4]);
	m->root = f[3];
	m->point = f[4];
	m->fstype = f[sep + 1];
	m->opts = f[sep + 3];
	return true;
}

/* The mount of rel in mountinfo (its line owned by the caller), or false. */
static bool mount_of(const char *mountinfo, const char *rel, struct mount *best)
{
	FILE *f = fopen(mountinfo, "re");
	char *line = NULL;
	size_t cap = 0, best_n = 0;

	if (!f)
		return false;
	best->line = NULL;
	while (getline(&line, &cap, f) > 0) {
		char *copy = strdup(line);
		struct mount m;
		size_t n;

		if (!copy)
			break;
		m.line = copy;
		if (!mount_parse(copy, &m) || !(n = covers(m.point, rel)) || n < best_n) {
			free(copy);
			continue;
		}
		free(best->line);
		*best = m;
		best_n = n;
	}
	free(line);
	fclose(f);
	return best->line != NULL;
}

/* The overlay's directories in the order a name is looked up: upperdir, then
 * lowerdir's colon-separated entries (or lowerdir+= ones, one each); a
 * data-only layer (datadir+=, or after "::") holds no names of its own.
 * Each is cut out of opts in place. */
static int layers_of(char *opts, char **dirs, int max)
{
	char *save = NULL, *upper = NULL;
	int n = 1;

	for (char *t = strtok_r(opts, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (!strncmp(t, "upperdir=", 9)) {
			upper = t + 9;
		} else if (!strncmp(t, "lowerdir+=", 10)) {
			if (n < max)
				dirs[n++] = t + 10;
		} else if (!strncmp(t, "lowerdir=", 9)) {
			char *p = t + 9;
			while (p && *p && n < max) {
				char *colon = strchr(p, ':');
				if (colon)
					*colon = '\0';
				dirs[n++] = p;
				/* "::": the data-only layers that follow hold no names */
				if (colon && colon[1] == ':')
					break;
				p = colon ? colon + 1 : NULL;
			}
		}
	}
	dirs[0] = upper;
	for (int i = 0; i < n; i++)
		if (dirs[i])
			unescape(dirs[i]);
	return n;
}

int overlay_find(const char *mountinfo, const char *rel, unsigned long ino, char *real, size_t len)
{
	struct mount m;
	char *dirs[MAX_LAYERS], inner[PATH_MAX];
	int rc = -1;

	if (rel[0] != '/' || !mount_of(mountinfo, rel, &m))
		return -1;
	if (strcmp(m.fstype, "overlay"))
		goto out;
	/* rel inside the mount, then inside the file system the mount shows */
	const char *rest = strcmp(m.point, "/") ? rel + strlen(m.point) : rel;
	if ((size_t)snprintf(inner, sizeof(inner), "%s%s", strcmp(m.root, "/") ? m.root : "",
			     *rest ? rest : "/") >= sizeof(inner))
		goto out;
	int n = layers_of(m.opts, dirs, MAX_LAYERS);
	for (int i = 0; i < n; i++) {
		char cand[PATH_MAX];
		struct stat st;

		if (!dirs[i])
			continue;
		/* a layer this agent cannot see: whatever it holds, the lookup
		 * below it could pick the wrong file */
		if (stat(dirs[i], &st) || !S_ISDIR(st.st_mode))
			goto out;
		if ((size_t)snprintf(cand, sizeof(cand), "%s%s", dirs[i], inner) >= sizeof(cand))
			goto out;
		if (lstat(cand, &st))
			continue;
		/* the first layer that has the name decides: a whiteout (a 0:0
		 * character device) hides it, a file is it if the overlay shows
		 * its inode number (one file system under the overlay) */
		if (S_ISREG(st.st_mode) && st.st_ino == ino && (size_t)snprintf(real, len, "%s", cand) < len)
			rc = 0;
		goto out;
	}
out:
	free(m.line);
	return rc;
}

int overlay_real_path(const char *path, char *real, size_t len)
{
	char mountinfo[64];
	struct stat st;
	int pid, n = 0;

	if (sscanf(path, "/proc/%d/root%n", &pid, &n) != 1 || n == 0 || path[n] != '/')
		return -1;
	if (stat(path, &st) || !S_ISREG(st.st_mode))
		return -1;
	snprintf(mountinfo, sizeof(mountinfo), "/proc/%d/mountinfo", pid);
	return overlay_find(mountinfo, path + n, (unsigned long)st.st_ino, real, len);
}
