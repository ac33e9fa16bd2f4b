/* gpu_store.h - kpi-agent's writes of GPU data into the trace store
 * (schema/002_gpu.sql): gpu_kernels rows, steps.gpu_busy_ns and the
 * requests' prefill_gpu_ns / decode_gpu_ns, on the side connection. */
#ifndef KPI_GPU_STORE_H
#define KPI_GPU_STORE_H

#include <stddef.h>
#include <stdint.h>
#include "bpf/kpi_gpu_event.h"

struct gpu_store;
struct side_store;

/* Prepares its statements on s (a trace at schema version >= 2), which must
 * outlive it. Returns NULL with the reason in err. */
struct gpu_store *gpu_store_open(struct side_store *s, char *err, size_t errlen);
void gpu_store_close(struct gpu_store *g);

/* A GPU record waiting for the next flush, with its kernel's name (NULL:
 * unknown, or not a kernel), valid during the flush. */
struct gpu_store_row {
	uint32_t pid;
	struct kpi_gpu_rec r;
	const char *name;
};

/* The side connection's transaction (side_store.h), for one flush. */
int gpu_store_begin(struct gpu_store *g);
int gpu_store_commit(struct gpu_store *g);
void gpu_store_rollback(struct gpu_store *g);
const char *gpu_store_errmsg(struct gpu_store *g);
/* One gpu_kernels row. 0 or -1. */
int gpu_store_kernel(struct gpu_store *g, const struct gpu_store_row *row);
/* A step's GPU busy time, a request's GPU time in prefill and in decode: 1
 * when the row was updated, 0 when it is not in the store yet, -1 on error. */
int gpu_store_step_busy(struct gpu_store *g, uint32_t pid, uint64_t step, uint64_t busy_ns);
int gpu_store_request_gpu(struct gpu_store *g, uint32_t pid, uint64_t seq_id, uint64_t prefill_ns,
			  uint64_t decode_ns);

#endif
