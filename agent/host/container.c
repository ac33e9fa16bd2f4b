/* container.c - container and pod identity from the cgroup v2 path's shape
 * and the runtimes' OCI state on the host (no API server, no network). */
#include "container.h"
#include "targets.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[1024];                     /* "" : the host's / */
static struct container_counts counts;

/* ---- the cgroup path ----------------------------------------------------- */

static bool is_hex_id(const char *s, size_t n)
{
	if (n != CONTAINER_ID_LEN)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i]))
			return false;
	return true;
}

static bool has_hex_run(const char *s, size_t n)
{
	size_t run = 0;
	for (size_t i = 0; i < n; i++) {
		run = isxdigit((unsigned char)s[i]) ? run + 1 : 0;
		if (run >= CONTAINER_ID_LEN)
			return true;
	}
	return false;
}

static bool ends_with(const char *s, size_t n, const char *suf)
{
	size_t k = strlen(suf);
	return n >= k && !memcmp(s + n - k, suf, k);
}

static bool starts_with(const char *s, size_t n, const char *pre)
{
	size_t k = strlen(pre);
	return n >= k && !memcmp(s, pre, k);
}

/* A path segment, not NUL-terminated. */
struct seg {
	const char *s;
	size_t n;
};

#define MAX_SEGS 32

/* Prefixed scopes: "<prefix><64 hex>[.scope]". */
static const struct {
	const char *prefix, *runtime;
} scope_prefixes[] = {
	{ "cri-containerd-", "containerd" },
	{ "crio-", "cri-o" },
	{ "docker-", "docker" },
	{ "libpod-", "podman" },
};

/* Segment i names a container: its runtime (NULL: not said) in *rt and its id. */
static bool seg_container(const struct seg *sg, int i, const char **rt, char *id)
{
	const char *s = sg[i].s;
	size_t n = sg[i].n;

	if (ends_with(s, n, ".scope"))
		n -= 6;
	for (size_t k = 0; k < sizeof(scope_prefixes) / sizeof(scope_prefixes[0]); k++) {
		size_t pl = strlen(scope_prefixes[k].prefix);
		if (starts_with(s, n, scope_prefixes[k].prefix) && is_hex_id(s + pl, n - pl)) {
			*rt = scope_prefixes[k].runtime;
			memcpy(id, s + pl, CONTAINER_ID_LEN);
			id[CONTAINER_ID_LEN] = 0;
			return true;
		}
	}
	/* a bare id: the cgroupfs drivers' "kubepods/<qos>/pod<uid>/<id>",
	 * "docker/<id>", podman's "libpod_parent/[<pod>/]libpod-<id>" */
	if (n != sg[i].n || !is_hex_id(s, n) || i == 0)
		return false;
	*rt = NULL;
	for (int k = i - 1; k >= 0; k--) {
		if (sg[k].n == 6 && !memcmp(sg[k].s, "docker", 6) && k == i - 1)
			*rt = "docker";
		else if (sg[k].n == 8 && !memcmp(sg[k].s, "kubepods", 8))
			;
		else if (sg[k].n == 13 && !memcmp(sg[k].s, "libpod_parent", 13))
			*rt = "podman";
		else
			continue;
		memcpy(id, s, CONTAINER_ID_LEN);
		id[CONTAINER_ID_LEN] = 0;
		return true;
	}
	return false;
}

/* A Kubernetes pod uid in segment s: "kubepods-<qos>-pod<uid with _>.slice"
 * (systemd driver) or "pod<uid>" (cgroupfs). */
static bool seg_pod_uid(struct seg sg, char *uid)
{
	const char *p = NULL;
	size_t n = 0;

	if (ends_with(sg.s, sg.n, ".slice")) {
		for (size_t i = 0; i + 4 <= sg.n; i++)
			if (!memcmp(sg.s + i, "-pod", 4))
				p = sg.s + i + 4;
		if (p)
			n = (size_t)(sg.s + sg.n - 6 - p);
	} else if (starts_with(sg.s, sg.n, "pod")) {
		p = sg.s + 3;
		n = sg.n - 3;
	}
	if (!p || n != 36)
		return false;
	for (size_t i = 0; i < 36; i++) {
		char c = p[i] == '_' ? '-' : p[i];
		bool dash = i == 8 || i == 13 || i == 18 || i == 23;
		if (dash ? c != '-' : !isxdigit((unsigned char)c))
			return false;
		uid[i] = (char)tolower((unsigned char)c);
	}
	uid[36] = 0;
	return true;
}

/* The runtimes' marks: a segment with one of them that names no container
 * is a shape not known here.  Their own daemons (docker.service,
 * containerd.service) and monitors (libpod-conmon-ID.scope, crio-conmon-ID.scope)
 * are host processes. */
static bool seg_marked(struct seg sg)
{
	static const char *marks[] = { "kubepods", "libpod", "docker", "crio", "containerd" };

	if (ends_with(sg.s, sg.n, ".service") || starts_with(sg.s, sg.n, "libpod-conmon-") ||
	    starts_with(sg.s, sg.n, "crio-conmon-"))
		return false;
	for (size_t k = 0; k < sizeof(marks) / sizeof(marks[0]); k++)
		for (size_t i = 0; i + strlen(marks[k]) <= sg.n; i++)
			if (!memcmp(sg.s + i, marks[k], strlen(marks[k])))
				return true;
	return has_hex_run(sg.s, sg.n);
}

enum container_path_kind container_parse_path(const char *path, struct container_shape *out)
{
	struct seg sg[MAX_SEGS];
	int n = 0;
	bool marked = false;

	memset(out, 0, sizeof(*out));
	for (const char *p = path; *p;) {
		size_t len = strcspn(p, "/\n");
		if (len) {
			if (n == MAX_SEGS)
				return CONTAINER_PATH_UNKNOWN;
			sg[n++] = (struct seg){ p, len };
		}
		p += len;
		if (*p == '\n')
			break;
		if (*p)
			p++;
	}
	for (int i = n - 1; i >= 0; i--) {
		if (!seg_container(sg, i, &out->runtime, out->id)) {
			marked |= seg_marked(sg[i]);
			continue;
		}
		/* the pod around it, up to an outer container (kind's node) */
		for (int k = i - 1; k >= 0; k--) {
			const char *rt;
			char id[CONTAINER_ID_LEN + 1];
			if (seg_container(sg, k, &rt, id))
				break;
			if (seg_pod_uid(sg[k], out->pod_uid))
				break;
		}
		return CONTAINER_PATH_CONTAINER;
	}
	return marked ? CONTAINER_PATH_UNKNOWN : CONTAINER_PATH_HOST;
}

int container_cgroup2_path(const char *text, char *path, size_t len)
{
	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (strncmp(l, "0::", 3))
			continue;
		size_t n = strcspn(l + 3, "\n");
		if (n >= len)
			return -1;
		memcpy(path, l + 3, n);
		path[n] = 0;
		return 0;
	}
	return -1;
}

/* ---- the runtimes' state ------------------------------------------------- */

/* Printable ASCII, no quotes or backslashes: the values become labels. */
static void copy_clean(char *out, size_t len, const char *in)
{
	size_t i = 0;
	for (; in[i] && i + 1 < len; i++) {
		unsigned char c = (unsigned char)in[i];
		out[i] = c < 0x20 || c >= 0x7f || c == '"' || c == '\\' ? '_' : (char)c;
	}
	out[i] = 0;
}

static void annotation(json_t *ann, const char *key, char *out, size_t len)
{
	const char *v = json_string_value(json_object_get(ann, key));
	if (v && !out[0])
		copy_clean(out, len, v);
}

int container_parse_config(const char *json, size_t len, struct container_info *ci)
{
	json_t *doc = json_loadb(json, len, JSON_REJECT_DUPLICATES, NULL), *ann;
	const char *docker_name;

	if (!json_is_object(doc)) {
		json_decref(doc);
		return -1;
	}
	ann = json_object_get(doc, "annotations");
	if (json_is_object(ann)) {
		/* CRI-O */
		annotation(ann, "io.kubernetes.pod.name", ci->pod_name, sizeof(ci->pod_name));
		annotation(ann, "io.kubernetes.pod.namespace", ci->pod_namespace, sizeof(ci->pod_namespace));
		annotation(ann, "io.kubernetes.pod.uid", ci->pod_uid, sizeof(ci->pod_uid));
		annotation(ann, "io.kubernetes.container.name", ci->name, sizeof(ci->name));
		/* containerd's CRI plugin */
		annotation(ann, "io.kubernetes.cri.sandbox-name", ci->pod_name, sizeof(ci->pod_name));
		annotation(ann, "io.kubernetes.cri.sandbox-namespace", ci->pod_namespace,
			   sizeof(ci->pod_namespace));
		annotation(ann, "io.kubernetes.cri.sandbox-uid", ci->pod_uid, sizeof(ci->pod_uid));
		annotation(ann, "io.kubernetes.cri.container-name", ci->name, sizeof(ci->name));
	}
	/* docker's own config.v2.json: "Name": "/NAME" */
	docker_name = json_string_value(json_object_get(doc, "Name"));
	if (docker_name && docker_name[0] == '/' && docker_name[1] && !ci->name[0])
		copy_clean(ci->name, sizeof(ci->name), docker_name + 1);
	json_decref(doc);
	return 0;
}

int container_parse_storage_list(const char *json, size_t len, const char *id, char *name,
				 size_t name_len)
{
	json_t *doc = json_loadb(json, len, 0, NULL), *c;
	size_t i;
	int rc = 1;

	if (!json_is_array(doc)) {
		json_decref(doc);
		return -1;
	}
	json_array_foreach(doc, i, c) {
		const char *cid = json_string_value(json_object_get(c, "id"));
		const char *nm = json_string_value(json_array_get(json_object_get(c, "names"), 0));
		if (cid && !strcmp(cid, id)) {
			if (nm)
				copy_clean(name, name_len, nm);
			rc = 0;
			break;
		}
	}
	json_decref(doc);
	return rc;
}

/* root + path, read whole when at most cap bytes: 0; -1 missing; -2 over the
 * cap (counted). */
static int read_capped(const char *path, size_t cap, char **buf, size_t *len)
{
	char full[PATH_MAX];
	struct stat st;
	size_t got = 0;
	int fd;

	if (snprintf(full, sizeof(full), "%s%s", root, path) >= (int)sizeof(full))
		return -1;
	fd = open(full, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		return -1;
	}
	if ((size_t)st.st_size > cap) {
		close(fd);
		counts.huge_config++;
		return -2;
	}
	*buf = malloc(cap + 1);
	if (!*buf) {
		close(fd);
		return -1;
	}
	for (;;) {
		ssize_t r = read(fd, *buf + got, cap + 1 - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
		if (got > cap)
			break;
	}
	close(fd);
	if (got > cap) {        /* grew while read */
		free(*buf);
		counts.huge_config++;
		return -2;
	}
	*len = got;
	return 0;
}

/* config.json at path into ci: 0 read, -1 missing or ignored. */
static int read_config(const char *path, struct container_info *ci)
{
	char *buf;
	size_t len;
	int rc = read_capped(path, CONTAINER_CONFIG_MAX, &buf, &len);

	if (rc)
		return -1;
	rc = container_parse_config(buf, len, ci);
	free(buf);
	if (rc)
		counts.bad_config++;
	return rc;
}

#define CONTAINERD_TASKS "/run/containerd/io.containerd.runtime.v2.task"

/* containerd's bundles, one directory per namespace (k8s.io for the CRI,
 * moby for docker, default for ctr). */
static bool in_containerd_ns(struct container_info *ci, const char *ns)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), CONTAINERD_TASKS "/%s/%s/config.json", ns, ci->id);
	if (read_config(path, ci))
		return false;
	if (!ci->runtime)
		ci->runtime = strcmp(ns, "moby") ? "containerd" : "docker";
	return true;
}

static bool from_containerd(struct container_info *ci)
{
	/* the namespaces every host has first: their directories are 0711, so
	 * an agent that dropped to another user still reaches them */
	static const char *known[] = { "k8s.io", "moby", "default" };
	char dir[PATH_MAX];
	struct dirent *de;
	DIR *d;
	bool found = false;

	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (in_containerd_ns(ci, known[i]))
			return true;
	snprintf(dir, sizeof(dir), "%s" CONTAINERD_TASKS, root);
	d = opendir(dir);
	if (!d)
		return false;
	while (!found && (de = readdir(d))) {
		bool tried = false;
		for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
			tried |= !strcmp(de->d_name, known[i]);
		if (de->d_name[0] != '.' && !tried)
			found = in_containerd_ns(ci, de->d_name);
	}
	closedir(d);
	return found;
}

static const char *const storage_dirs[] = { "/run/containers/storage", "/var/lib/containers/storage" };

/* containers/storage (CRI-O, podman): userdata/config.json, and podman's
 * names in the storage's container list. */
static bool from_storage(struct container_info *ci)
{
	bool found = false;

	for (size_t i = 0; i < 2 && !found; i++) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/overlay-containers/%s/userdata/config.json", storage_dirs[i],
			 ci->id);
		found = read_config(path, ci) == 0;
	}
	if (found && !ci->runtime)
		ci->runtime = ci->pod_name[0] ? "cri-o" : "podman";
	if (ci->runtime && !strcmp(ci->runtime, "podman") && !ci->name[0]) {
		static const char *lists[] = { "/var/lib/containers/storage/overlay-containers/containers.json",
					       "/run/containers/storage/overlay-containers/volatile-containers.json" };
		for (size_t i = 0; i < 2 && !ci->name[0]; i++) {
			char *buf;
			size_t len;
			if (read_capped(lists[i], CONTAINER_LIST_MAX, &buf, &len))
				continue;
			if (container_parse_storage_list(buf, len, ci->id, ci->name, sizeof(ci->name)) < 0)
				counts.bad_config++;
			free(buf);
			found = true;
		}
	}
	return found;
}

static void from_docker(struct container_info *ci)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "/var/lib/docker/containers/%s/config.v2.json", ci->id);
	read_config(path, ci);
}

/* Names from the state of the runtime the path named (every runtime's
 * when it did not). */
static void resolve_state(struct container_info *ci)
{
	const char *rt = ci->runtime;

	if (!rt || !strcmp(rt, "containerd") || !strcmp(rt, "docker"))
		if (from_containerd(ci) && ci->runtime && !strcmp(ci->runtime, "containerd"))
			return;
	if (!rt || !strcmp(rt, "cri-o") || !strcmp(rt, "podman"))
		from_storage(ci);
	if (ci->runtime && !strcmp(ci->runtime, "docker") && !ci->name[0])
		from_docker(ci);
}

/* containerd's own cgroup shape, "/NAMESPACE/ID" (ctr run, and any client
 * that leaves cgroupsPath to it): two segments that name nothing by
 * themselves, a container only when containerd holds a bundle NAMESPACE/ID. */
static bool containerd_ns_id(const char *path, struct container_info *ci)
{
	char ns[256], id[CONTAINER_ID_LEN + 1], rest;
	char bundle[PATH_MAX];

	if (sscanf(path, "/%255[A-Za-z0-9._-]/%64[A-Za-z0-9._-]%c", ns, id, &rest) != 2 ||
	    !strcmp(ns, ".") || !strcmp(ns, "..") || !strcmp(id, ".") || !strcmp(id, ".."))
		return false;
	memcpy(ci->id, id, sizeof(ci->id));
	snprintf(bundle, sizeof(bundle), CONTAINERD_TASKS "/%s/%s/config.json", ns, id);
	if (read_config(bundle, ci)) {
		memset(ci, 0, sizeof(*ci));
		return false;
	}
	ci->runtime = "containerd";
	return true;
}

/* ---- caches ---------------------------------------------------------------- */

#define CGROUP_CACHE 512
#define PID_CACHE 1024

static struct cgroup_slot {
	uint64_t cgroup_id;     /* 0: free */
	bool container;
	struct container_info ci;
} cgroups[CGROUP_CACHE];
static unsigned cgroup_next;

static struct pid_slot {
	pid_t pid;
	unsigned long long start;
	bool container;
	struct container_info ci;
} pids[PID_CACHE];
static unsigned pid_next;

static struct container_info result;    /* what the last call returned */

void container_set_root(const char *r)
{
	snprintf(root, sizeof(root), "%s", r ? r : "");
}

void container_counts(struct container_counts *out)
{
	*out = counts;
}

const struct container_info *container_of_cgroup(uint64_t cgroup_id, const char *path)
{
	struct container_shape sh;
	struct cgroup_slot *c;
	enum container_path_kind kind;

	for (unsigned i = 0; i < CGROUP_CACHE; i++)
		if (cgroups[i].cgroup_id == cgroup_id && cgroup_id) {
			if (!cgroups[i].container)
				return NULL;
			result = cgroups[i].ci;
			return &result;
		}
	c = &cgroups[cgroup_next++ % CGROUP_CACHE];
	memset(c, 0, sizeof(*c));
	c->cgroup_id = cgroup_id;
	kind = container_parse_path(path, &sh);
	if (kind != CONTAINER_PATH_CONTAINER) {
		if (containerd_ns_id(path, &c->ci))
			goto named;
		if (kind == CONTAINER_PATH_UNKNOWN)
			counts.unknown_shape++;
		return NULL;
	}
	c->ci.runtime = sh.runtime;
	memcpy(c->ci.id, sh.id, sizeof(c->ci.id));
	memcpy(c->ci.pod_uid, sh.pod_uid, sizeof(c->ci.pod_uid));
	resolve_state(&c->ci);
named:
	c->container = true;
	c->ci.cgroup_id = cgroup_id;
	counts.resolved++;
	if (c->ci.name[0] || c->ci.pod_name[0])
		counts.named++;
	result = c->ci;
	return &result;
}

/* The cgroup2 mount point, from mountinfo ("... - cgroup2 ..."). */
static const char *cgroup2_mount(void)
{
	static char mnt[1024];
	char line[4096], path[PATH_MAX];
	FILE *f;

	if (mnt[0])
		return mnt;
	snprintf(mnt, sizeof(mnt), "/sys/fs/cgroup");
	snprintf(path, sizeof(path), "%s/proc/self/mountinfo", root);
	f = fopen(path, "re");
	if (!f)
		return mnt;
	while (fgets(line, sizeof(line), f)) {
		char point[1024];
		const char *dash = strstr(line, " - ");
		if (dash && !strncmp(dash + 3, "cgroup2 ", 8) &&
		    sscanf(line, "%*s %*s %*s %*s %1023s", point) == 1) {
			snprintf(mnt, sizeof(mnt), "%s", point);
			break;
		}
	}
	fclose(f);
	return mnt;
}

/* pid's container from /proc, not cached by pid; -1 when it is gone. */
static int lookup_pid(pid_t pid, struct pid_slot *out)
{
	char fn[PATH_MAX], text[8192], path[4096], dir[PATH_MAX + 4096];
	const struct container_info *ci;
	struct stat st;
	ssize_t n;
	int fd;

	snprintf(fn, sizeof(fn), "%s/proc/%d/cgroup", root, pid);
	fd = open(fn, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	text[n] = 0;
	out->container = false;
	if (container_cgroup2_path(text, path, sizeof(path)))
		return 0;       /* cgroup v1 alone: no identity */
	snprintf(dir, sizeof(dir), "%s%s%s", root, cgroup2_mount(), path);
	if (stat(dir, &st))
		return 0;
	ci = container_of_cgroup((uint64_t)st.st_ino, path);
	if (ci) {
		out->container = true;
		out->ci = *ci;
	}
	return 0;
}

const struct container_info *container_of_pid(pid_t pid)
{
	unsigned long long start = target_start_time(pid);
	struct pid_slot *p = NULL, fresh = { .pid = pid, .start = start };

	for (unsigned i = 0; i < PID_CACHE && !p; i++)
		if (pids[i].pid == pid && pid > 0)
			p = &pids[i];
	/* a gone process keeps its last identity: its last rows still need it */
	if (p && (!start || p->start == start))
		goto hit;
	if (!start || lookup_pid(pid, &fresh))
		return NULL;
	if (!p)
		p = &pids[pid_next++ % PID_CACHE];
	*p = fresh;
hit:
	if (!p->container)
		return NULL;
	result = p->ci;
	return &result;
}

/* ---- selectors ------------------------------------------------------------- */

static bool all_of(const char *s, const char *set)
{
	return s[strspn(s, set)] == 0;
}

#define LOWER_ALNUM "abcdefghijklmnopqrstuvwxyz0123456789"

int container_sel_container(struct container_sel *sel, const char *v, char *why, size_t len)
{
	if (sel->container[0]) {
		snprintf(why, len, "--container is given once (a name or the start of an id)");
		return -1;
	}
	if (!v[0] || strlen(v) >= sizeof(sel->container) ||
	    !all_of(v, LOWER_ALNUM "ABCDEFGHIJKLMNOPQRSTUVWXYZ_.-")) {
		snprintf(why, len, "--container wants a container's name or the start of its id "
			 "(at most %zu letters, digits, '_', '.' or '-'), got '%s'",
			 sizeof(sel->container) - 1, v);
		return -1;
	}
	snprintf(sel->container, sizeof(sel->container), "%s", v);
	return 0;
}

/* Kubernetes' names: a namespace is a DNS-1123 label, a pod's name a
 * DNS-1123 subdomain (lowercase letters, digits, '-', and '.' between labels). */
static bool dns1123(const char *s, size_t max, bool dots)
{
	size_t n = strlen(s);

	return n && n <= max && all_of(s, dots ? LOWER_ALNUM "-." : LOWER_ALNUM "-") &&
	       isalnum((unsigned char)s[0]) && isalnum((unsigned char)s[n - 1]);
}

int container_sel_pod(struct container_sel *sel, const char *v, char *why, size_t len)
{
	const char *slash = strchr(v, '/');
	char ns[sizeof(sel->pod_namespace)] = "";
	const char *name = slash ? slash + 1 : v;

	if (sel->pod_name[0]) {
		snprintf(why, len, "--pod is given once ([NAMESPACE/]NAME)");
		return -1;
	}
	if (slash && (size_t)(slash - v) < sizeof(ns))
		snprintf(ns, sizeof(ns), "%.*s", (int)(slash - v), v);
	if ((slash && !dns1123(ns, 63, false)) || (slash && (size_t)(slash - v) >= sizeof(ns)) ||
	    !dns1123(name, 253, true)) {
		snprintf(why, len, "--pod wants [NAMESPACE/]NAME as Kubernetes writes them (lowercase "
			 "letters, digits and '-', a name also '.'; e.g. default/vllm-0), got '%s'", v);
		return -1;
	}
	snprintf(sel->pod_namespace, sizeof(sel->pod_namespace), "%s", ns);
	snprintf(sel->pod_name, sizeof(sel->pod_name), "%s", name);
	return 0;
}

bool container_sel_any(const struct container_sel *sel)
{
	return sel && (sel->container[0] || sel->pod_name[0]);
}

void container_sel_describe(const struct container_sel *sel, char *out, size_t len)
{
	snprintf(out, len, "%s%s%s%s%s%s", sel->container[0] ? "container " : "", sel->container,
		 sel->container[0] && sel->pod_name[0] ? " of " : "", sel->pod_name[0] ? "pod " : "",
		 sel->pod_namespace, sel->pod_namespace[0] ? "/" : "");
	snprintf(out + strlen(out), len - strlen(out), "%s", sel->pod_name);
}

bool container_sel_match(const struct container_sel *sel, const struct container_info *ci)
{
	size_t n;

	if (!container_sel_any(sel))
		return true;
	if (!ci)
		return false;
	if (sel->pod_name[0] && (strcmp(ci->pod_name, sel->pod_name) ||
				 (sel->pod_namespace[0] && strcmp(ci->pod_namespace, sel->pod_namespace))))
		return false;
	if (!sel->container[0])
		return true;
	n = strlen(sel->container);
	return !strcmp(ci->name, sel->container) || (n <= CONTAINER_ID_LEN && !strncmp(ci->id, sel->container, n));
}
