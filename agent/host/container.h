/* container.h - which container and pod a process belongs to, with no API
 * server: its cgroup v2 path's shape, then the runtime's OCI state on the host.
 * The rest of the agent asks here by pid or cgroup id and never parses paths. */
#ifndef KPI_CONTAINER_H
#define KPI_CONTAINER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CONTAINER_ID_LEN 64             /* hex digits of a runtime's container id */
#define CONTAINER_CONFIG_MAX (1 << 20)  /* a bigger config.json is ignored */
#define CONTAINER_LIST_MAX (8 << 20)    /* containers/storage's containers.json */

/* What the cgroup path alone says. */
struct container_shape {
	const char *runtime;    /* "containerd" | "cri-o" | "docker" | "podman"; NULL: the
				 * path does not say (kubepods under the cgroupfs driver) */
	char id[CONTAINER_ID_LEN + 1];  /* "" when the path holds no container */
	char pod_uid[37];       /* Kubernetes pod uid, dashed; "" none */
};

/* Everything known of a container.  Strings are "" when unknown. */
struct container_info {
	uint64_t cgroup_id;     /* inode of the cgroup's directory in the cgroup2 mount */
	const char *runtime;    /* as in container_shape; the state directory may fill it */
	char id[CONTAINER_ID_LEN + 1];
	char name[128];
	char pod_name[254];
	char pod_namespace[64];
	char pod_uid[37];
};

enum container_path_kind {
	CONTAINER_PATH_HOST,    /* no runtime's mark: a host process */
	CONTAINER_PATH_CONTAINER,
	CONTAINER_PATH_UNKNOWN, /* a runtime's mark (kubepods, libpod, docker, a 64-hex
				 * name) in a shape not known here: no id, counted */
};

/* What these counters say, since start (container_counts). */
struct container_counts {
	uint64_t resolved;      /* containers whose cgroup was resolved (each once) */
	uint64_t named;         /* ... whose runtime state gave a name */
	uint64_t unknown_shape; /* cgroups of an unknown shape (container NULL) */
	uint64_t bad_config;    /* state files ignored: malformed JSON */
	uint64_t huge_config;   /* state files ignored: over their size cap */
};

/* ---- pure parsers (table-tested: tests/unit/test_agent_container.c) ---- */

/* Classifies one cgroup v2 path ("/kubepods.slice/.../cri-containerd-ID.scope")
 * and fills out for a container.  The innermost container wins (kind's pods
 * inside a node container). */
enum container_path_kind container_parse_path(const char *path, struct container_shape *out);
/* The cgroup v2 path of a /proc/PID/cgroup text (its "0::" line); 0, or -1 when
 * there is none (cgroup v1 only). */
int container_cgroup2_path(const char *text, char *path, size_t len);
/* An OCI config.json's Kubernetes annotations (CRI-O's io.kubernetes.pod.* and
 * io.kubernetes.container.name, containerd's io.kubernetes.cri.*) into ci;
 * 0, or -1 when the text is not a JSON object. */
int container_parse_config(const char *json, size_t len, struct container_info *ci);
/* The name of container id in containers/storage's containers.json (podman);
 * 0 when found, 1 when not listed, -1 when malformed. */
int container_parse_storage_list(const char *json, size_t len, const char *id, char *name,
				 size_t name_len);

/* ---- the host ---------------------------------------------------------- */

/* Where the host's files are: "" for /, a directory for tests.  Before the
 * first look-up. */
void container_set_root(const char *root);
/* The container of pid, resolved once per process (pid + start time) and
 * cached by cgroup id; NULL for a host process, an unknown cgroup shape
 * (counted) or a pid gone before its first look-up.  The pointer stays valid
 * until the next call. */
const struct container_info *container_of_pid(pid_t pid);
/* The container in the cgroup at path (relative to the cgroup2 mount) whose
 * directory has inode cgroup_id; as container_of_pid. */
const struct container_info *container_of_cgroup(uint64_t cgroup_id, const char *path);
void container_counts(struct container_counts *out);

/* ---- selectors: --container NAME|ID-PREFIX, --pod [NAMESPACE/]NAME ------ */

struct container_sel {
	char container[129];    /* a name, or the start of an id; "" any */
	char pod_namespace[64]; /* "" any namespace */
	char pod_name[254];     /* "" any pod (and any process, with no --container) */
};

/* Parse a --container / --pod value into sel: 0, or -1 with why (a line the
 * user can act on). */
int container_sel_container(struct container_sel *sel, const char *value, char *why, size_t len);
int container_sel_pod(struct container_sel *sel, const char *value, char *why, size_t len);
/* sel names something; what it names, for "waiting for a process in ..." */
bool container_sel_any(const struct container_sel *sel);
void container_sel_describe(const struct container_sel *sel, char *out, size_t len);
/* ci (NULL: a host process) is what sel asks for; an empty sel takes all. */
bool container_sel_match(const struct container_sel *sel, const struct container_info *ci);

#endif
