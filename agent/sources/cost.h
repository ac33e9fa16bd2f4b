/* cost.h - kpi-agent's cost and energy per request: samples the energy
 * counters, hears each step's sequences (kpi:step__seqs, from the CUPTI side),
 * splits every sample interval by cost_attr and writes schema/005_cost.sql's
 * rows (docs/cost.md). */
#ifndef KPI_AGENT_COST_H
#define KPI_AGENT_COST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "agent/record.h"

struct agent_cost;
struct agent_gpu;
struct prom_exporter;
struct side_store;

/* Finds the energy counters (energy.h, powercap_root for RAPL) and prepares
 * its statements on store (which must outlive it): before privileges drop.
 * price_per_hour < 0: no price. Prints the one line on energy and the one on
 * cost. Returns NULL with the reason in err. */
struct agent_cost *agent_cost_open(struct side_store *store, const char *powercap_root,
				   double price_per_hour, char *err, size_t errlen);
/* Hears each step's sequence list from g (the one CUPTI object, which
 * attaches kpi:step__seqs); without it (NULL) every step is unattributed. */
void agent_cost_listen(struct agent_cost *c, struct agent_gpu *g);
/* The sink that hears steps and requests (whose rows get their figures once
 * their time has settled). */
struct kpi_sink agent_cost_sink(struct agent_cost *c);
/* in_flight(ctx): whether a request of a target traced from its HTTP
 * exchange is in flight or held before its row (assemble.h): the intervals
 * wait for their rows, as for an open step. */
void agent_cost_watch_http(struct agent_cost *c, bool (*in_flight)(void *ctx), void *ctx);
/* kpi_energy_joules_total{domain}, kpi_cost_usd_total and the idle parts in
 * p's /metrics (p NULL: nothing). */
void agent_cost_metrics(struct agent_cost *c, struct prom_exporter *p);
/* A sample at now: reads the counters, closes the interval, settles what can
 * be. pids: the targets now (the others' steps and spans are closed). */
void agent_cost_sample(struct agent_cost *c, uint64_t now, const uint32_t *pids, int n);
/* Writes what settled, one transaction; final closes the last interval,
 * settles everything and prints the run's totals. */
void agent_cost_flush(struct agent_cost *c, uint64_t now, bool final);
void agent_cost_close(struct agent_cost *c);

#endif
