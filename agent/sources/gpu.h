/* gpu.h - kpi-agent's GPU side: attaches to libkpi_cupti.so in every target
 * that has it mapped (and to the target's kpi:step__seqs), stores gpu_kernels,
 * steps.gpu_busy_ns and requests.prefill_gpu_ns / decode_gpu_ns. */
#ifndef KPI_AGENT_GPU_H
#define KPI_AGENT_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define GPU_LIB_NAME "libkpi_cupti.so"

struct ring_buffer;
struct agent_gpu;

/* Loads the BPF programs of bpf/kpi_cupti.bpf.c and opens db (already
 * migrated by trace_store_open) for its own writes: before privileges drop.
 * Returns NULL with the reason in err. */
struct agent_gpu *agent_gpu_open(const char *db, int64_t run_id, bool verbose, char *err,
				 size_t errlen);
/* Adds the GPU ring buffer to the agent's, so one poll drains both. */
int agent_gpu_add_ring(struct agent_gpu *g, struct ring_buffer *rb, char *err, size_t errlen);
/* The agent's current targets: attaches to those that map libkpi_cupti.so
 * and are not attached yet, forgets those no longer listed. */
void agent_gpu_sync(struct agent_gpu *g, const pid_t *pids, int n);
/* Splits new GPU time and writes what changed, one transaction. Returns 0, or
 * -1 with the error in err. */
int agent_gpu_flush(struct agent_gpu *g, uint64_t now, char *err, size_t errlen);
/* One line of totals for the agent's exit message ("" when nothing was seen). */
void agent_gpu_summary(struct agent_gpu *g, char *buf, size_t len);
void agent_gpu_close(struct agent_gpu *g);

#endif
