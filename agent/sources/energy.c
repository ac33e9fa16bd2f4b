/* energy.c - RAPL (powercap sysfs) and NVML energy counters as µJ totals with
 * wrap-around handled; NVML is dlopen'ed so hosts without a driver need nothing. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "energy.h"

/* The few NVML entry points used (nvml.h is not needed to build). */
typedef int nvml_ret;
typedef struct nvml_device *nvml_dev;

struct domain {
	char name[ENERGY_NAME_LEN];
	int fd;                 /* RAPL: energy_uj, open; -1 for a GPU */
	nvml_dev gpu;
	uint64_t range;         /* max_energy_range_uj; 0: no wrap (NVML) */
	uint64_t last;
	int have_last;
};

struct energy_meter {
	struct domain d[ENERGY_MAX_DOMAINS];
	int n;
	void *nvml;
	nvml_ret (*nvml_energy)(nvml_dev, unsigned long long *);
	nvml_ret (*nvml_shutdown)(void);
	char source[512];
};

static int read_u64(int fd, uint64_t *v)
{
	char buf[32];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	char *end;

	if (n <= 0)
		return -1;
	buf[n] = 0;
	errno = 0;
	*v = strtoull(buf, &end, 10);
	return errno || end == buf ? -1 : 0;
}

static int read_file_u64(const char *path, uint64_t *v)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc;
	if (fd < 0)
		return -1;
	rc = read_u64(fd, v);
	close(fd);
	return rc;
}

static void source_add(struct energy_meter *m, const char *kind, const char *name)
{
	size_t len = strlen(m->source);
	const char *k = strstr(m->source, kind);
	snprintf(m->source + len, sizeof(m->source) - len, "%s%s%s",
		 k ? "," : len ? ";" : "", k ? "" : kind, name);
}

/* ---- RAPL ---------------------------------------------------------------- */

/* One zone directory: package-N and dram domains count, the rest overlap. */
static void rapl_zone(struct energy_meter *m, const char *dir, const char *zone)
{
	char path[4200], name[ENERGY_NAME_LEN] = "";
	uint64_t range = 0, v;
	FILE *f;

	snprintf(path, sizeof(path), "%s/name", dir);
	if (!(f = fopen(path, "re")))
		return;
	if (!fgets(name, sizeof(name), f))
		name[0] = 0;
	fclose(f);
	name[strcspn(name, "\n")] = 0;
	if (strncmp(name, "package", 7) && strcmp(name, "dram"))
		return;
	if (!strcmp(name, "dram")) /* one per socket: name it after the socket's zone */
		snprintf(name, sizeof(name), "dram-%d", atoi(zone + strlen("intel-rapl:")));
	for (int i = 0; i < m->n; i++)
		if (!strcmp(m->d[i].name, name))
			return; /* the same zone seen flat and nested */
	if (m->n == ENERGY_MAX_DOMAINS)
		return;
	snprintf(path, sizeof(path), "%s/max_energy_range_uj", dir);
	read_file_u64(path, &range);
	snprintf(path, sizeof(path), "%s/energy_uj", dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || read_u64(fd, &v)) {
		if (fd >= 0)
			close(fd);
		return;
	}
	struct domain *d = &m->d[m->n++];
	snprintf(d->name, sizeof(d->name), "%s", name);
	d->fd = fd;
	d->range = range;
	source_add(m, "rapl:", name);
}

static void rapl_scan(struct energy_meter *m, const char *dir, int depth)
{
	DIR *dp = opendir(dir);
	struct dirent *e;
	char sub[4096];

	if (!dp)
		return;
	while ((e = readdir(dp))) {
		if (strncmp(e->d_name, "intel-rapl:", 11))
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
		rapl_zone(m, sub, e->d_name);
		if (depth == 0)
			rapl_scan(m, sub, 1);  /* subzones (dram) nested in their package */
	}
	closedir(dp);
}

/* ---- NVML ---------------------------------------------------------------- */

static void nvml_scan(struct energy_meter *m, char *why, size_t len)
{
	nvml_ret (*init)(void), (*count)(unsigned int *), (*handle)(unsigned int, nvml_dev *);
	unsigned int n = 0;

	m->nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!m->nvml) {
		snprintf(why, len, "no libnvidia-ml.so.1");
		return;
	}
	init = (nvml_ret (*)(void))dlsym(m->nvml, "nvmlInit_v2");
	count = (nvml_ret (*)(unsigned int *))dlsym(m->nvml, "nvmlDeviceGetCount_v2");
	handle = (nvml_ret (*)(unsigned int, nvml_dev *))dlsym(m->nvml, "nvmlDeviceGetHandleByIndex_v2");
	m->nvml_energy = (nvml_ret (*)(nvml_dev, unsigned long long *))dlsym(
		m->nvml, "nvmlDeviceGetTotalEnergyConsumption");
	m->nvml_shutdown = (nvml_ret (*)(void))dlsym(m->nvml, "nvmlShutdown");
	if (!init || !count || !handle || !m->nvml_energy || init() != 0) {
		snprintf(why, len, "libnvidia-ml.so.1 did not initialise");
		dlclose(m->nvml);
		m->nvml = NULL;
		return;
	}
	if (count(&n) != 0)
		n = 0;
	for (unsigned int i = 0; i < n && m->n < ENERGY_MAX_DOMAINS; i++) {
		nvml_dev dev;
		unsigned long long mj;
		/* pre-Volta GPUs have no energy counter: left out */
		if (handle(i, &dev) != 0 || m->nvml_energy(dev, &mj) != 0)
			continue;
		struct domain *d = &m->d[m->n++];
		snprintf(d->name, sizeof(d->name), "gpu%u", i);
		d->fd = -1;
		d->gpu = dev;
		source_add(m, "nvml:", d->name);
	}
	if (!n)
		snprintf(why, len, "NVML sees no GPU");
	else
		snprintf(why, len, "no GPU with an energy counter");
}

/* ---- the meter ----------------------------------------------------------- */

struct energy_meter *energy_open(const char *powercap_root, char *said, size_t len)
{
	struct energy_meter *m = calloc(1, sizeof(*m));
	char why[128] = "";
	int n_rapl;

	if (!m)
		abort();
	rapl_scan(m, powercap_root, 0);
	n_rapl = m->n;
	nvml_scan(m, why, sizeof(why));
	if (!m->n) {
		snprintf(m->source, sizeof(m->source), "none: no RAPL zone under %s, %s",
			 powercap_root, why);
		snprintf(said, len, "energy: not measured (no RAPL zone under %s, %s): energy "
			 "figures stay NULL", powercap_root, why);
		return m;
	}
	snprintf(said, len, "energy: measured from %s%s%s (docs/cost.md)", m->source,
		 n_rapl ? " under " : "", n_rapl ? powercap_root : "");
	return m;
}

void energy_close(struct energy_meter *m)
{
	if (!m)
		return;
	for (int i = 0; i < m->n; i++)
		if (m->d[i].fd >= 0)
			close(m->d[i].fd);
	if (m->nvml) {
		if (m->nvml_shutdown)
			m->nvml_shutdown();
		dlclose(m->nvml);
	}
	free(m);
}

int energy_domains(const struct energy_meter *m)
{
	return m ? m->n : 0;
}

const char *energy_domain_name(const struct energy_meter *m, int i)
{
	return m->d[i].name;
}

const char *energy_source(const struct energy_meter *m)
{
	return m->source;
}

uint64_t energy_read(struct energy_meter *m, uint64_t *reading, uint64_t *delta, int *first)
{
	uint64_t sum = 0;

	for (int i = 0; i < m->n; i++) {
		struct domain *d = &m->d[i];
		uint64_t v;
		unsigned long long mj;
		int ok;

		if (d->fd >= 0)
			ok = !read_u64(d->fd, &v);
		else if ((ok = m->nvml_energy(d->gpu, &mj) == 0))
			v = (uint64_t)mj * 1000; /* NVML counts mJ */
		delta[i] = 0;
		first[i] = 0;
		if (!ok) {
			reading[i] = d->last;
			continue;
		}
		if (d->have_last)
			delta[i] = energy_delta(d->last, v, d->range);
		else
			first[i] = 1;
		d->last = v;
		d->have_last = 1;
		reading[i] = v;
		sum += delta[i];
	}
	return sum;
}
