/* gpu.h - kpi-agent's CUPTI side, the one loaded copy of bpf/kpi_cupti.bpf.c:
 * kpi:step__seqs on every target traced through its probes (each step's
 * sequences, which the GPU split and the cost split both need), and
 * libkpi_cupti.so's probes in every target that maps it: gpu_kernels,
 * steps.gpu_busy_ns and requests.prefill_gpu_ns / decode_gpu_ns. */
#ifndef KPI_AGENT_GPU_H
#define KPI_AGENT_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "abi/kpi_step_seq.h"

#define GPU_LIB_NAME "libkpi_cupti.so"

struct ring_buffer;
struct side;
struct side_store;
struct agent_gpu;

/* Who else hears each chunk of a step's sequence list (the cost side), at
 * t_probe, the probe's time. */
struct gpu_step_listener {
	void (*step_seqs)(void *ctx, uint32_t pid, uint64_t step, uint32_t n_total, uint32_t first,
			  const struct kpi_step_seq *e, uint32_t n, uint64_t t_probe);
	void *ctx;
};

/* Loads bpf/kpi_cupti.bpf.c and prepares the GPU statements on store (which
 * must outlive it): before privileges drop. NULL with the reason in err. */
struct agent_gpu *agent_gpu_open(struct side_store *store, bool verbose, char *err, size_t errlen);
void agent_gpu_listen_steps(struct agent_gpu *g, struct gpu_step_listener l);
/* Adds the CUPTI ring buffer to the agent's, so one poll drains both. */
int agent_gpu_add_ring(struct agent_gpu *g, struct ring_buffer *rb, char *err, size_t errlen);
/* Its targets follow the agent's (loader.h): step__seqs on each one traced
 * through its probes, libkpi_cupti.so's probes once it maps the library
 * (looked for again at every rescan). */
struct side *agent_gpu_side(struct agent_gpu *g);
/* Records the CUPTI ring had no room for (step lists and GPU batches). */
uint64_t agent_gpu_ring_drops(struct agent_gpu *g);
/* Splits new GPU time and writes what changed, one transaction. Returns 0, or
 * -1 with the error in err. */
int agent_gpu_flush(struct agent_gpu *g, uint64_t now, char *err, size_t errlen);
/* One line of totals for the agent's exit message ("" when no target mapped
 * the library). */
void agent_gpu_summary(struct agent_gpu *g, char *buf, size_t len);
void agent_gpu_close(struct agent_gpu *g);

#endif
