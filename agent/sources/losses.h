/* losses.h - the kernel side's part of the agent's loss ledger (record.h's
 * enum kpi_loss): ring-buffer drops, untracked connections and LRU evictions,
 * read from the BPF counters and tables once a sample. */
#ifndef KPI_LOSSES_H
#define KPI_LOSSES_H

#include <stdint.h>
#include "agent/record.h"

struct kpi_bpf;
struct bpf_map;

struct loss_probe {
	struct kpi_bpf *skel;
	int n_cpus;
	uint64_t evicted[3];    /* socks, sys_args, tls_calls: the most seen (a total only grows) */
	uint64_t next_scan;     /* CLOCK_MONOTONIC ns of the next table count */
};

/* The sum over n_cpus CPUs of entry idx of a per-CPU array of u64 counters
 * (any BPF object's); 0 when it cannot be read. */
uint64_t losses_percpu_sum(const struct bpf_map *map, unsigned int idx, int n_cpus);
/* The sum over CPUs of the BPF `counters` entry idx (enum kpi_counter). */
uint64_t losses_bpf_counter(const struct loss_probe *lp, unsigned int idx);

/* Fills out's ringbuf_drops, conn_untracked and map_evictions totals. The LRU
 * tables are counted every few seconds (a walk of their keys), so evictions
 * lag by as much; the other causes are the caller's. */
void losses_collect(struct loss_probe *lp, uint64_t now, struct kpi_loss_record *out);

#endif
