/* export_ident.c - the model and port labels of a traced process.  The model
 * name follows the daemon's own choice (GGUF general.name, else the file
 * name), read from the GGUF file the process has mapped, and so does its
 * weight type (the types of its matrices, named as kpi-infer names them:
 * abi/kpi_ggml_types.h); the port is the lowest one it listens on. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "abi/kpi_ggml_types.h"
#include "export_ident.h"
#include "agent/host/targets.h"

#define IDENT_CACHE 64

static struct export_ident_slot {
	uint32_t pid;
	unsigned long long start_time;
	time_t last_try;        /* /proc is re-read once a second at most */
	struct export_ident id;
} cache[IDENT_CACHE];
static unsigned cache_next;

/* ---- GGUF header ---------------------------------------------------------------- */

static int rd(FILE *f, void *p, size_t n)
{
	return fread(p, 1, n, f) == n ? 0 : -1;
}

static int skip(FILE *f, uint64_t n)
{
	return n > (1ull << 30) || fseeko(f, (off_t)n, SEEK_CUR) ? -1 : 0;
}

/* GGUF value types: sizes of the scalar ones (8 = string, 9 = array). */
static int scalar_size(uint32_t type)
{
	static const int sz[] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
	return type < sizeof(sz) / sizeof(sz[0]) ? sz[type] : -1;
}

static int skip_value(FILE *f, uint32_t type)
{
	uint64_t len, n;
	uint32_t et;

	if (type == 8)
		return rd(f, &len, 8) || skip(f, len);
	if (type == 9) {
		if (rd(f, &et, 4) || rd(f, &n, 8))
			return -1;
		if (et == 8) {
			for (uint64_t i = 0; i < n; i++)
				if (skip_value(f, 8))
					return -1;
			return 0;
		}
		int s = scalar_size(et);
		return s <= 0 ? -1 : skip(f, n * (uint64_t)s);
	}
	int s = scalar_size(type);
	return s <= 0 ? -1 : skip(f, (uint64_t)s);
}

int export_ident_gguf_name(const char *path, char *out, size_t len)
{
	FILE *f = fopen(path, "rb");
	uint32_t magic, version, type;
	uint64_t n_tensors, n_kv, klen, vlen;
	char key[64];
	int rc = -1;

	if (!f)
		return -1;
	if (rd(f, &magic, 4) || magic != 0x46554747u || rd(f, &version, 4) || version < 2 ||
	    rd(f, &n_tensors, 8) || rd(f, &n_kv, 8))
		goto out;
	/* general.* keys come first in every writer we know; stop early anyway */
	for (uint64_t i = 0; i < n_kv && i < 256; i++) {
		if (rd(f, &klen, 8))
			goto out;
		if (klen >= sizeof(key)) {
			if (skip(f, klen) || rd(f, &type, 4) || skip_value(f, type))
				goto out;
			continue;
		}
		if (rd(f, key, klen) || rd(f, &type, 4))
			goto out;
		key[klen] = 0;
		if (type == 8 && !strcmp(key, "general.name")) {
			if (rd(f, &vlen, 8) || vlen == 0 || vlen >= len || rd(f, out, vlen))
				goto out;
			out[vlen] = 0;
			rc = 0;
			goto out;
		}
		if (skip_value(f, type))
			goto out;
	}
out:
	fclose(f);
	return rc;
}

/* The parameters of every tensor of 2+ dimensions by type, from the tensor
 * infos after the metadata: name, n_dims, ne[n_dims], type, offset. */
int export_ident_gguf_weight_type(const char *path, char *out, size_t len)
{
	FILE *f = fopen(path, "rb");
	uint32_t magic, version, type, nd;
	uint64_t n_tensors, n_kv, n, params[KPI_GGML_TYPE_COUNT + 1] = { 0 };
	int rc = -1;

	if (!f)
		return -1;
	if (rd(f, &magic, 4) || magic != 0x46554747u || rd(f, &version, 4) || version < 2 ||
	    rd(f, &n_tensors, 8) || rd(f, &n_kv, 8) || n_tensors > (1u << 20) || n_kv > (1u << 20))
		goto out;
	for (uint64_t i = 0; i < n_kv; i++)
		if (rd(f, &n, 8) || skip(f, n) || rd(f, &type, 4) || skip_value(f, type))
			goto out;
	for (uint64_t i = 0; i < n_tensors; i++) {
		uint64_t ne, count = 1;
		if (rd(f, &n, 8) || skip(f, n) || rd(f, &nd, 4) || nd > 4)
			goto out;
		for (uint32_t d = 0; d < nd; d++) {
			if (rd(f, &ne, 8))
				goto out;
			count *= ne;
		}
		if (rd(f, &type, 4) || skip(f, 8))
			goto out;
		if (nd >= 2)
			params[type < KPI_GGML_TYPE_COUNT ? type : KPI_GGML_TYPE_COUNT] += count;
	}
	kpi_weight_type_name(params, out, len);
	rc = 0;
out:
	fclose(f);
	return rc;
}

/* ---- /proc ------------------------------------------------------------------------ */

/* The first mapped file whose name ends in .gguf, as the agent can open it
 * (through /proc/PID/root for a process in a container: its /m/model.gguf
 * is not the host's). */
static int mapped_gguf(uint32_t pid, char *path, size_t len)
{
	char fn[64], line[4096];
	FILE *f;
	int rc = -1;

	snprintf(fn, sizeof(fn), "/proc/%u/maps", pid);
	f = fopen(fn, "r");
	if (!f)
		return -1;
	while (rc && fgets(line, sizeof(line), f)) {
		char *p = strchr(line, '/');
		size_t n;
		if (!p)
			continue;
		n = strcspn(p, "\n");
		p[n] = 0;
		if (n > 5 && !strcmp(p + n - 5, ".gguf"))
			rc = target_path((pid_t)pid, p, path, len);
	}
	fclose(f);
	return rc;
}

/* Label values: printable ASCII without quotes or backslashes, like the
 * daemon's own model_name label. */
static void sanitize(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == '"' || *s == '\\' || (unsigned char)*s >= 0x7f)
			*s = '_';
}

static void lookup_model(uint32_t pid, struct export_ident *id)
{
	char path[4096], *out = id->model;
	size_t len = sizeof(id->model);

	snprintf(out, len, "unknown");
	id->weight_type[0] = 0;
	if (mapped_gguf(pid, path, sizeof(path)))
		return;
	if (export_ident_gguf_name(path, out, len)) {
		const char *base = strrchr(path, '/');
		base = base ? base + 1 : path;
		size_t n = strlen(base) < len - 1 ? strlen(base) : len - 1;
		memcpy(out, base, n);
		out[n] = 0;
	}
	sanitize(out);
	if (export_ident_gguf_weight_type(path, id->weight_type, sizeof(id->weight_type)))
		id->weight_type[0] = 0;
}

/* Its container, once a process (host/container.c caches it from the attach on). */
static void lookup_container(uint32_t pid, struct export_ident *id)
{
	const struct container_info *ci = container_of_pid((pid_t)pid);

	id->in_container = ci != NULL;
	if (ci)
		id->container = *ci;
}

static int lookup_port(uint32_t pid)
{
	uint16_t ports[64];
	int n = target_listen_ports((pid_t)pid, ports, 64), best = 0;

	for (int i = 0; i < n; i++)
		if (!best || ports[i] < best)
			best = ports[i];
	return best;
}

static time_t now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec;
}

const struct export_ident *export_ident_get(uint32_t pid)
{
	time_t now = now_s();
	unsigned long long st;
	unsigned slot = cache_next % IDENT_CACHE;
	int hit = -1;

	for (unsigned i = 0; i < IDENT_CACHE && hit < 0; i++)
		if (cache[i].pid == pid && pid)
			hit = (int)i;
	/* once a second at most per pid: /proc reads cost more than a record */
	if (hit >= 0 && cache[hit].last_try == now)
		return &cache[hit].id;
	st = target_start_time((pid_t)pid);
	if (hit >= 0) {
		struct export_ident_slot *c = &cache[hit];
		c->last_try = now;
		/* a gone process keeps its last identity: its last records still need it */
		if (!st)
			return &c->id;
		if (c->start_time == st) {
			if (!c->id.port)
				c->id.port = lookup_port(pid);
			if (!strcmp(c->id.model, "unknown"))
				lookup_model(pid, &c->id);
			return &c->id;
		}
		slot = (unsigned)hit;   /* the pid was reused */
	} else {
		cache_next++;
	}
	cache[slot].pid = pid;
	cache[slot].start_time = st;
	cache[slot].last_try = now;
	lookup_model(pid, &cache[slot].id);
	cache[slot].id.port = lookup_port(pid);
	lookup_container(pid, &cache[slot].id);
	return &cache[slot].id;
}
