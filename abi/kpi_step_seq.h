/* kpi_step_seq.h - one entry of the kpi:step__seqs USDT probe: which sequences
 * a batch step ran and how many tokens each had. Shared by the daemon, bpf/ and
 * agent/; fixed-size plain types, the layout is an ABI (docs/probes.md). */
#ifndef KPI_STEP_SEQ_H
#define KPI_STEP_SEQ_H

#ifndef __VMLINUX_H__ /* BPF programs get the fixed-width types from vmlinux.h */
#include <stdint.h>
#endif

struct kpi_step_seq {
	uint64_t id;        /* the daemon's numeric request id */
	int32_t n_tokens;   /* tokens the sequence put into this step (prompt chunk, or 1) */
	int32_t is_prefill; /* 1: the request has no output token yet (its prefill phase) */
};

_Static_assert(sizeof(struct kpi_step_seq) == 16, "kpi_step_seq is ABI: 16 bytes");

#endif
