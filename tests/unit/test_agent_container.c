/* test_agent_container.c - container identity (agent/host/container.c): every
 * cgroup v2 shape of the runtimes as a table (path -> runtime, id, pod uid),
 * then names from the runtimes' state files in a made-up root. */
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "check.h"
#include "agent/host/container.h"

#define ID  "3f1c5e0a9b7d4c2e8f6a1b3c5d7e9f0a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e"
#define ID2 "aa11bb22cc33dd44ee55ff6677889900aa11bb22cc33dd44ee55ff6677889900"
#define UID "0b6f4a3c-2d1e-4f5a-9b8c-7d6e5f4a3b2c"
#define UID_ "0b6f4a3c_2d1e_4f5a_9b8c_7d6e5f4a3b2c"

static const struct {
	const char *path;
	enum container_path_kind kind;
	const char *runtime, *id, *pod_uid;
} shapes[] = {
	/* Kubernetes, systemd cgroup driver */
	{ "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID_ ".slice/cri-containerd-" ID ".scope",
	  CONTAINER_PATH_CONTAINER, "containerd", ID, UID },
	{ "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" UID_ ".slice/crio-" ID ".scope",
	  CONTAINER_PATH_CONTAINER, "cri-o", ID, UID },
	{ "/kubepods.slice/kubepods-pod" UID_ ".slice/cri-containerd-" ID ".scope",      /* guaranteed */
	  CONTAINER_PATH_CONTAINER, "containerd", ID, UID },
	{ "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID_ ".slice/docker-" ID ".scope",
	  CONTAINER_PATH_CONTAINER, "docker", ID, UID },
	/* Kubernetes, cgroupfs driver */
	{ "/kubepods/burstable/pod" UID "/" ID, CONTAINER_PATH_CONTAINER, NULL, ID, UID },
	{ "/kubepods/pod" UID "/" ID, CONTAINER_PATH_CONTAINER, NULL, ID, UID },
	{ "/kubepods/besteffort/pod" UID "/crio-" ID, CONTAINER_PATH_CONTAINER, "cri-o", ID, UID },
	/* kind: the pod's container inside the node's docker container */
	{ "/system.slice/docker-" ID2 ".scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
	  "kubelet-kubepods-besteffort-pod" UID_ ".slice/cri-containerd-" ID ".scope",
	  CONTAINER_PATH_CONTAINER, "containerd", ID, UID },
	/* the kind node itself (its systemd, kubelet) */
	{ "/system.slice/docker-" ID2 ".scope/init.scope", CONTAINER_PATH_CONTAINER, "docker", ID2, "" },
	/* podman: crun's "container" leaf, a pod's slice, rootless, cgroupfs */
	{ "/machine.slice/libpod-" ID ".scope/container", CONTAINER_PATH_CONTAINER, "podman", ID, "" },
	{ "/machine.slice/libpod-" ID ".scope", CONTAINER_PATH_CONTAINER, "podman", ID, "" },
	{ "/machine.slice/machine-libpod_pod_" ID2 ".slice/libpod-" ID ".scope/container",
	  CONTAINER_PATH_CONTAINER, "podman", ID, "" },
	{ "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" ID ".scope/container",
	  CONTAINER_PATH_CONTAINER, "podman", ID, "" },
	{ "/libpod_parent/libpod-" ID, CONTAINER_PATH_CONTAINER, "podman", ID, "" },
	{ "/libpod_parent/" ID, CONTAINER_PATH_CONTAINER, "podman", ID, "" },
	/* docker */
	{ "/system.slice/docker-" ID ".scope", CONTAINER_PATH_CONTAINER, "docker", ID, "" },
	{ "/docker/" ID, CONTAINER_PATH_CONTAINER, "docker", ID, "" },
	/* the host */
	{ "/", CONTAINER_PATH_HOST, NULL, "", "" },
	{ "/user.slice/user-0.slice/session-3.scope", CONTAINER_PATH_HOST, NULL, "", "" },
	{ "/system.slice/docker.service", CONTAINER_PATH_HOST, NULL, "", "" },
	{ "/system.slice/containerd.service", CONTAINER_PATH_HOST, NULL, "", "" },
	{ "/machine.slice/libpod-conmon-" ID ".scope", CONTAINER_PATH_HOST, NULL, "", "" },
	{ "/init.scope", CONTAINER_PATH_HOST, NULL, "", "" },
	/* marked, but no shape known here: no id, never a guess */
	{ "/kubepods.slice/kubepods-burstable.slice", CONTAINER_PATH_UNKNOWN, NULL, "", "" },
	{ "/machine.slice/libpod-" "3f1c5e0a9b" ".scope", CONTAINER_PATH_UNKNOWN, NULL, "", "" },
	{ "/weird/" ID "-x", CONTAINER_PATH_UNKNOWN, NULL, "", "" },
	{ "/system.slice/docker-" "3F1C5E0A9B7D4C2E8F6A1B3C5D7E9F0A2B4C6D8E0F1A3B5C7D9E1F2A4B6C8D0E" ".scope",
	  CONTAINER_PATH_UNKNOWN, NULL, "", "" },
	{ "/somewhere/" ID, CONTAINER_PATH_UNKNOWN, NULL, "", "" },
	/* a pod uid of the wrong length is not taken */
	{ "/kubepods/burstable/pod1234/" ID, CONTAINER_PATH_CONTAINER, NULL, ID, "" },
};

static void test_every_cgroup_shape(void)
{
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		struct container_shape sh;
		enum container_path_kind k = container_parse_path(shapes[i].path, &sh);
		CHECK(k == shapes[i].kind, "%s: kind %d, want %d", shapes[i].path, k, shapes[i].kind);
		CHECK((sh.runtime == NULL) == (shapes[i].runtime == NULL) &&
		      (!sh.runtime || !strcmp(sh.runtime, shapes[i].runtime)),
		      "%s: runtime %s, want %s", shapes[i].path, sh.runtime ? sh.runtime : "NULL",
		      shapes[i].runtime ? shapes[i].runtime : "NULL");
		CHECK(!strcmp(sh.id, shapes[i].id), "%s: id %s", shapes[i].path, sh.id);
		CHECK(!strcmp(sh.pod_uid, shapes[i].pod_uid), "%s: pod uid %s", shapes[i].path, sh.pod_uid);
	}
}

/* Hostile or odd paths: nothing read out of bounds, never an id made up. */
static void test_odd_paths(void)
{
	struct container_shape sh;
	char deep[4096] = "";

	CHECK(container_parse_path("", &sh) == CONTAINER_PATH_HOST && !sh.id[0], "empty");
	CHECK(container_parse_path("////", &sh) == CONTAINER_PATH_HOST, "slashes");
	CHECK(container_parse_path("/system.slice/docker-" ID ".scope\n0::/x", &sh) ==
	      CONTAINER_PATH_CONTAINER && !strcmp(sh.id, ID), "stops at the line's end");
	CHECK(container_parse_path("system.slice/docker-" ID ".scope", &sh) == CONTAINER_PATH_CONTAINER,
	      "no leading slash");
	CHECK(container_parse_path("/docker-" ID "0.scope", &sh) == CONTAINER_PATH_UNKNOWN && !sh.id[0],
	      "65 hex digits");
	CHECK(container_parse_path("/cri-containerd-.scope", &sh) == CONTAINER_PATH_UNKNOWN, "no id");
	CHECK(container_parse_path("/kubepods/burstable/pod" UID, &sh) == CONTAINER_PATH_UNKNOWN,
	      "a pod's own cgroup");
	/* deeper than the parser looks: unknown (counted), not a guess */
	for (int i = 0; i < 40; i++)
		strcat(deep, "/a");
	strcat(deep, "/docker-" ID ".scope");
	CHECK(container_parse_path(deep, &sh) == CONTAINER_PATH_UNKNOWN && !sh.id[0], "deep");
}

static void test_cgroup2_line(void)
{
	char p[256];

	CHECK(!container_cgroup2_path("0::/system.slice/docker-" ID ".scope\n", p, sizeof(p)) &&
	      !strcmp(p, "/system.slice/docker-" ID ".scope"), "%s", p);
	CHECK(!container_cgroup2_path("12:memory:/x\n1:name=systemd:/y\n0::/z\n", p, sizeof(p)) &&
	      !strcmp(p, "/z"), "%s", p);
	CHECK(container_cgroup2_path("4:memory:/x\n", p, sizeof(p)) == -1, "v1 only");
}

static void test_config_annotations(void)
{
	const char *crio = "{\"ociVersion\":\"1.0.2\",\"annotations\":{"
		"\"io.kubernetes.pod.name\":\"llm-0\",\"io.kubernetes.pod.namespace\":\"serving\","
		"\"io.kubernetes.pod.uid\":\"" UID "\",\"io.kubernetes.container.name\":\"engine\"}}";
	const char *ctrd = "{\"annotations\":{\"io.kubernetes.cri.sandbox-name\":\"llm-1\","
		"\"io.kubernetes.cri.sandbox-namespace\":\"prod\",\"io.kubernetes.cri.sandbox-uid\":\"" UID "\","
		"\"io.kubernetes.cri.container-name\":\"vllm\",\"io.kubernetes.cri.container-type\":\"container\"}}";
	struct container_info a = { 0 }, b = { 0 }, c = { 0 }, d = { 0 };

	CHECK(!container_parse_config(crio, strlen(crio), &a), "cri-o");
	CHECK(!strcmp(a.pod_name, "llm-0") && !strcmp(a.pod_namespace, "serving") &&
	      !strcmp(a.pod_uid, UID) && !strcmp(a.name, "engine"), "%s %s %s %s", a.pod_name,
	      a.pod_namespace, a.pod_uid, a.name);
	CHECK(!container_parse_config(ctrd, strlen(ctrd), &b), "containerd");
	CHECK(!strcmp(b.pod_name, "llm-1") && !strcmp(b.pod_namespace, "prod") &&
	      !strcmp(b.pod_uid, UID) && !strcmp(b.name, "vllm"), "%s %s %s", b.pod_name, b.pod_namespace, b.name);
	/* no annotations (a plain podman or ctr container): nothing, no error */
	CHECK(!container_parse_config("{\"ociVersion\":\"1.0\"}", 20, &c) && !c.name[0] && !c.pod_name[0], "plain");
	/* control characters never reach a label */
	const char *evil = "{\"annotations\":{\"io.kubernetes.container.name\":\"a\\nb\\\"c\"}}";
	CHECK(!container_parse_config(evil, strlen(evil), &d) && !strcmp(d.name, "a_b_c"), "%s", d.name);
	/* malformed */
	CHECK(container_parse_config("{\"annotations\":{", 16, &d) == -1, "truncated");
	CHECK(container_parse_config("[1,2]", 5, &d) == -1, "not an object");
	CHECK(container_parse_config("", 0, &d) == -1, "empty");
}

static void test_storage_list(void)
{
	const char *list = "[{\"id\":\"" ID2 "\",\"names\":[\"other\"]},{\"id\":\"" ID "\",\"names\":[\"kpi-a\",\"x\"]}]";
	char name[64] = "";

	CHECK(!container_parse_storage_list(list, strlen(list), ID, name, sizeof(name)) &&
	      !strcmp(name, "kpi-a"), "%s", name);
	CHECK(container_parse_storage_list(list, strlen(list), "ff", name, sizeof(name)) == 1, "absent");
	CHECK(container_parse_storage_list("{", 1, ID, name, sizeof(name)) == -1, "malformed");
}

/* ---- a made-up host root: the state files as the runtimes write them ---- */

static char rootdir[] = "/tmp/kpi-container-XXXXXX";

static void put(const char *rel, const char *text, size_t pad)
{
	char path[512], cmd[700];
	FILE *f;

	snprintf(path, sizeof(path), "%s%s", rootdir, rel);
	snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
	CHECK(system(cmd) == 0, "%s", cmd);
	f = fopen(path, "w");
	CHECK(f, "%s", path);
	fputs(text, f);
	for (size_t i = 0; i < pad; i++)
		fputc(' ', f);
	fclose(f);
}

static void test_state_dirs(void)
{
	const struct container_info *ci;
	struct container_counts c0, c1;
	char huge_id[80], bad_id[80];

	CHECK(mkdtemp(rootdir), "mkdtemp");
	container_set_root(rootdir);
	container_counts(&c0);

	/* containerd's CRI: k8s.io bundle */
	put("/run/containerd/io.containerd.runtime.v2.task/k8s.io/" ID "/config.json",
	    "{\"annotations\":{\"io.kubernetes.cri.sandbox-name\":\"p\",\"io.kubernetes.cri.sandbox-namespace\":\"ns\","
	    "\"io.kubernetes.cri.sandbox-uid\":\"" UID "\",\"io.kubernetes.cri.container-name\":\"c\"}}", 0);
	ci = container_of_cgroup(101, "/kubepods/burstable/pod" UID "/" ID);
	CHECK(ci && !strcmp(ci->runtime, "containerd") && !strcmp(ci->id, ID) && !strcmp(ci->name, "c") &&
	      !strcmp(ci->pod_name, "p") && !strcmp(ci->pod_namespace, "ns") && !strcmp(ci->pod_uid, UID) &&
	      ci->cgroup_id == 101, "containerd %s", ci ? ci->name : "NULL");

	/* a containerd namespace of its own (found by listing the bundles) */
#define ID3 "dd00dd00dd00dd00dd00dd00dd00dd00dd00dd00dd00dd00dd00dd00dd00dd00"
	put("/run/containerd/io.containerd.runtime.v2.task/custom-ns/" ID3 "/config.json",
	    "{\"annotations\":{\"io.kubernetes.cri.container-name\":\"side\"}}", 0);
	ci = container_of_cgroup(107, "/kubepods/pod" UID "/" ID3);
	CHECK(ci && !strcmp(ci->runtime, "containerd") && !strcmp(ci->name, "side"), "listed namespace");

	/* containerd's own shape, "/NAMESPACE/ID" (ctr run): a container only
	 * where containerd holds that bundle; a name as id; the same shape
	 * without a bundle is the host, or unknown when it has a 64-hex run */
	put("/run/containerd/io.containerd.runtime.v2.task/default/" ID2 "/config.json",
	    "{\"annotations\":{\"io.kubernetes.cri.container-name\":\"ctr1\"}}", 0);
	put("/run/containerd/io.containerd.runtime.v2.task/default/my-ctr/config.json", "{}", 0);
	ci = container_of_cgroup(108, "/default/" ID2);
	CHECK(ci && !strcmp(ci->runtime, "containerd") && !strcmp(ci->id, ID2) && !strcmp(ci->name, "ctr1") &&
	      ci->cgroup_id == 108, "ctr shape %s", ci ? ci->name : "NULL");
	ci = container_of_cgroup(109, "/default/my-ctr");
	CHECK(ci && !strcmp(ci->id, "my-ctr") && !ci->name[0], "ctr name as id");
	CHECK(!container_of_cgroup(110, "/default/other"), "no bundle: host");
	CHECK(!container_of_cgroup(111, "/default/../default/my-ctr"), "dot-dot");

	/* podman: config.json without names, the name from containers.json */
	put("/var/lib/containers/storage/overlay-containers/" ID2 "/userdata/config.json",
	    "{\"annotations\":{\"io.container.manager\":\"libpod\"}}", 0);
	put("/var/lib/containers/storage/overlay-containers/containers.json",
	    "[{\"id\":\"" ID2 "\",\"names\":[\"kpi-ns1\"]}]", 0);
	ci = container_of_cgroup(102, "/machine.slice/libpod-" ID2 ".scope/container");
	CHECK(ci && !strcmp(ci->runtime, "podman") && !strcmp(ci->name, "kpi-ns1") && !ci->pod_name[0],
	      "podman %s", ci ? ci->name : "NULL");

	/* a malformed and a huge config.json: the id alone, each counted */
	snprintf(bad_id, sizeof(bad_id), "%.64s", "b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0");
	snprintf(huge_id, sizeof(huge_id), "%.64s", "c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0");
	char rel[256];
	snprintf(rel, sizeof(rel), "/run/containers/storage/overlay-containers/%s/userdata/config.json", bad_id);
	put(rel, "{\"annotations\": {\"io.kubernetes.pod.name\": ", 0);
	snprintf(rel, sizeof(rel), "/run/containers/storage/overlay-containers/%s/userdata/config.json", huge_id);
	put(rel, "{\"annotations\":{\"io.kubernetes.pod.name\":\"big\"}}", CONTAINER_CONFIG_MAX);
	char path[256];
	snprintf(path, sizeof(path), "/kubepods.slice/kubepods-pod" UID_ ".slice/crio-%s.scope", bad_id);
	ci = container_of_cgroup(103, path);
	CHECK(ci && !strcmp(ci->id, bad_id) && !ci->pod_name[0] && !strcmp(ci->pod_uid, UID), "malformed");
	snprintf(path, sizeof(path), "/kubepods.slice/kubepods-pod" UID_ ".slice/crio-%s.scope", huge_id);
	ci = container_of_cgroup(104, path);
	CHECK(ci && !strcmp(ci->id, huge_id) && !ci->pod_name[0], "huge");
	container_counts(&c1);
	CHECK(c1.bad_config == c0.bad_config + 1 && c1.huge_config == c0.huge_config + 1,
	      "bad %llu huge %llu", (unsigned long long)(c1.bad_config - c0.bad_config),
	      (unsigned long long)(c1.huge_config - c0.huge_config));

	/* an unknown shape: NULL, counted once per cgroup */
	CHECK(!container_of_cgroup(105, "/kubepods.slice/odd"), "unknown");
	CHECK(!container_of_cgroup(105, "/kubepods.slice/odd"), "unknown again");
	container_counts(&c1);
	CHECK(c1.unknown_shape == c0.unknown_shape + 1, "unknown counted %llu",
	      (unsigned long long)(c1.unknown_shape - c0.unknown_shape));
	/* the host: NULL, not counted */
	CHECK(!container_of_cgroup(106, "/user.slice/user-0.slice/session-1.scope"), "host");
	container_counts(&c1);
	CHECK(c1.unknown_shape == c0.unknown_shape + 1, "host counted");
	/* cached by cgroup id: the state is read once */
	snprintf(rel, sizeof(rel), "rm -rf '%s/run/containerd'", rootdir);
	CHECK(system(rel) == 0, "rm");
	ci = container_of_cgroup(101, "/kubepods/burstable/pod" UID "/" ID);
	CHECK(ci && !strcmp(ci->name, "c"), "cached");

	snprintf(rel, sizeof(rel), "rm -rf '%s'", rootdir);
	system(rel);
	container_set_root("");
}

/* This process, on the host: no container (or, run inside one, its id). */
static void test_self(void)
{
	const struct container_info *ci = container_of_pid(getpid());
	CHECK(!ci || strlen(ci->id) == CONTAINER_ID_LEN, "self");
}

/* --container and --pod: what they take, refuse and match. */
static void test_selectors(void)
{
	struct container_info ci = { .runtime = "podman", .id = ID, .name = "srv-a", .pod_name = "vllm-0",
				     .pod_namespace = "prod" };
	struct container_sel sel;
	char why[512], desc[512];
	static const char *bad_pods[] = { "", "/", "prod/", "/vllm-0", "a/b/c", "Prod/vllm-0", "vllm_0",
					  "-vllm", "prod/vllm-0.", "my.ns/vllm-0" };
	static const char *bad_ctrs[] = { "", "srv a", "srv/a", "\"x\"" };

	memset(&sel, 0, sizeof(sel));
	CHECK(!container_sel_any(&sel) && container_sel_match(&sel, NULL) && container_sel_match(&sel, &ci),
	      "no selector takes all");
	for (size_t i = 0; i < sizeof(bad_pods) / sizeof(bad_pods[0]); i++) {
		memset(&sel, 0, sizeof(sel));
		CHECK(container_sel_pod(&sel, bad_pods[i], why, sizeof(why)) == -1 &&
		      strstr(why, "--pod wants [NAMESPACE/]NAME") && !sel.pod_name[0], "pod '%s'", bad_pods[i]);
	}
	for (size_t i = 0; i < sizeof(bad_ctrs) / sizeof(bad_ctrs[0]); i++) {
		memset(&sel, 0, sizeof(sel));
		CHECK(container_sel_container(&sel, bad_ctrs[i], why, sizeof(why)) == -1 &&
		      strstr(why, "--container wants"), "container '%s'", bad_ctrs[i]);
	}
	memset(&sel, 0, sizeof(sel));
	CHECK(!container_sel_pod(&sel, "vllm-0", why, sizeof(why)), "%s", why);
	CHECK(container_sel_match(&sel, &ci) && !container_sel_match(&sel, NULL), "pod in any namespace");
	CHECK(container_sel_pod(&sel, "vllm-1", why, sizeof(why)) == -1 && strstr(why, "once"), "twice");
	memset(&sel, 0, sizeof(sel));
	CHECK(!container_sel_pod(&sel, "prod/vllm-0", why, sizeof(why)), "%s", why);
	CHECK(container_sel_match(&sel, &ci), "pod in its namespace");
	snprintf(ci.pod_namespace, sizeof(ci.pod_namespace), "staging");
	CHECK(!container_sel_match(&sel, &ci), "another namespace");
	snprintf(ci.pod_namespace, sizeof(ci.pod_namespace), "prod");
	CHECK(!container_sel_container(&sel, "srv-b", why, sizeof(why)), "%s", why);
	CHECK(!container_sel_match(&sel, &ci), "pod and another container");
	container_sel_describe(&sel, desc, sizeof(desc));
	CHECK(!strcmp(desc, "container srv-b of pod prod/vllm-0"), "%s", desc);
	memset(&sel, 0, sizeof(sel));
	CHECK(!container_sel_container(&sel, "srv-a", why, sizeof(why)) && container_sel_match(&sel, &ci),
	      "by name");
	memset(&sel, 0, sizeof(sel));
	CHECK(!container_sel_container(&sel, "3f1c5e0a9b", why, sizeof(why)) && container_sel_match(&sel, &ci),
	      "by id prefix");
	memset(&sel, 0, sizeof(sel));
	CHECK(!container_sel_container(&sel, "bb00", why, sizeof(why)) && !container_sel_match(&sel, &ci) &&
	      !container_sel_match(&sel, NULL), "another id");
	container_sel_describe(&sel, desc, sizeof(desc));
	CHECK(!strcmp(desc, "container bb00"), "%s", desc);
}

int main(void)
{
	RUN(test_every_cgroup_shape);
	RUN(test_odd_paths);
	RUN(test_cgroup2_line);
	RUN(test_config_annotations);
	RUN(test_storage_list);
	RUN(test_state_dirs);
	RUN(test_self);
	RUN(test_selectors);
	return CHECK_DONE();
}
