/* gpu_store.h - kpi-agent's writes of GPU data into the trace store
 * (schema/002_gpu.sql): gpu_kernels rows, steps.gpu_busy_ns and the
 * requests' prefill_gpu_ns / decode_gpu_ns, on a connection of its own. */
#ifndef KPI_GPU_STORE_H
#define KPI_GPU_STORE_H

#include <stddef.h>
#include <stdint.h>
#include "agent/track/gpu_attr.h"

struct gpu_store;

/* Opens path, already migrated to version >= 2 by trace_store_open; rows
 * carry run_id. Returns NULL with the reason in err. */
struct gpu_store *gpu_store_open(const char *path, int64_t run_id, char *err, size_t errlen);
void gpu_store_close(struct gpu_store *s);

int gpu_store_begin(struct gpu_store *s);
int gpu_store_commit(struct gpu_store *s);
void gpu_store_rollback(struct gpu_store *s);
/* name: the kernel's name, NULL when unknown or not a kernel. Returns 0 or -1. */
int gpu_store_kernel(struct gpu_store *s, uint32_t pid, const struct kpi_gpu_rec *r, const char *name);
/* Returns 1 when the row was updated, 0 when it is not in the store yet, -1 on error. */
int gpu_store_step_busy(struct gpu_store *s, const struct gpu_attr_step *x);
int gpu_store_request_gpu(struct gpu_store *s, const struct gpu_attr_req *x);
const char *gpu_store_errmsg(struct gpu_store *s);

/* A GPU record waiting for the next flush, with its kernel's name (NULL:
 * unknown, or not a kernel), valid during gpu_store_flush. */
struct gpu_store_row {
	uint32_t pid;
	struct kpi_gpu_rec r;
	const char *name;
};

/* One transaction: rows into gpu_kernels, then every step and request that
 * gpu_attr_drain offers (settle a first). Rows whose step or request is not
 * in the store yet stay dirty in a for the next flush. Returns 0, or -1 with
 * the error in err, everything rolled back (the caller keeps rows). */
int gpu_store_flush(struct gpu_store *s, struct gpu_attr *a, uint64_t now,
		    const struct gpu_store_row *rows, size_t n, char *err, size_t errlen);

#endif
