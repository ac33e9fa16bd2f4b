/* energy.h - the host's energy counters, read once a sample: RAPL zones
 * through powercap (package and dram) and each GPU's NVML total-energy counter. */
#ifndef KPI_ENERGY_H
#define KPI_ENERGY_H

#include <stddef.h>
#include <stdint.h>

#define ENERGY_POWERCAP_DEFAULT "/sys/class/powercap"
#define ENERGY_MAX_DOMAINS 32
#define ENERGY_NAME_LEN 32

struct energy_meter;

/* Finds the counters: intel-rapl:* zones under powercap_root (their package
 * and dram domains; core, uncore and psys overlap them and are left out) and
 * the GPUs NVML reports (libnvidia-ml.so.1 through dlopen; nothing happens
 * where it is absent). The files stay open, so the reads keep working after
 * the agent drops its privileges (energy_uj is root-only). Always returns a
 * meter, with no domain where nothing was found; said gets the one line that
 * tells which ("energy: measured from ..." or "energy: not measured: ..."). */
struct energy_meter *energy_open(const char *powercap_root, char *said, size_t len);
void energy_close(struct energy_meter *m);
int energy_domains(const struct energy_meter *m);
const char *energy_domain_name(const struct energy_meter *m, int i);
/* What the meter reads, for the trace's meta: "rapl:package-0,dram-0;nvml:gpu0"
 * or "none: <why>". */
const char *energy_source(const struct energy_meter *m);

/* Reads every domain: reading[i] the counter in µJ, delta[i] what it advanced
 * since the previous read (a counter below its last reading wrapped at
 * max_energy_range_uj), first[i] nonzero on a domain's first good reading
 * (delta 0). A domain whose read fails keeps its last reading and delta 0.
 * Returns the sum of the deltas. */
uint64_t energy_read(struct energy_meter *m, uint64_t *reading, uint64_t *delta, int *first);

/* The advance of a counter that counts modulo range (RAPL's
 * max_energy_range_uj; 0: it does not wrap). */
static inline uint64_t energy_delta(uint64_t last, uint64_t now, uint64_t range)
{
	if (now >= last || !range)
		return now >= last ? now - last : 0;
	return range - last + now;
}

#endif
