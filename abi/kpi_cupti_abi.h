/* kpi_cupti_abi.h - the GPU activity record libkpi_cupti.so hands out through its
 * kpi_cupti:activity__batch probe; plain fixed-size types, shared with bpf/ and agent/. */
#ifndef KPI_CUPTI_ABI_H
#define KPI_CUPTI_ABI_H

#ifndef __VMLINUX_H__ /* BPF programs get the fixed-width types from vmlinux.h */
#include <stdint.h>
#endif

#define KPI_CUPTI_BATCH_MAX 64   /* records per activity__batch probe, at most */
#define KPI_CUPTI_NAME_MAX 256   /* bytes of a kernel name worth reading (NUL included) */

enum kpi_gpu_rec_kind {
	KPI_GPU_REC_KERNEL = 1,
	KPI_GPU_REC_MEMCPY = 2,
	KPI_GPU_REC_MEMSET = 3,
};

enum kpi_gpu_rec_flags {
	/* the launch is older than the step log kept: step is 0, not "between steps" */
	KPI_GPU_REC_F_STEP_UNKNOWN = 1u << 0,
	/* the host publishes no step (no kpi_cupti_step_slot symbol): step is 0 */
	KPI_GPU_REC_F_NO_STEP_SOURCE = 1u << 1,
	/* the name table was full: name_id is 0 */
	KPI_GPU_REC_F_NAME_UNKNOWN = 1u << 2,
};

struct kpi_gpu_rec {
	uint64_t step;           /* host batch step at launch (abi/kpi_step.h); 0: none */
	uint64_t start_ns;       /* CLOCK_MONOTONIC */
	uint64_t end_ns;         /* CLOCK_MONOTONIC */
	uint64_t bytes;          /* memcpy, memset: bytes; kernel: 0 */
	uint32_t correlation_id; /* CUPTI correlation id of the launching API call */
	uint32_t name_id;        /* kernel: id from kpi_cupti:kernel__name; else 0 */
	uint32_t device_id;
	uint32_t context_id;
	uint32_t stream_id;
	uint32_t grid_x, grid_y, grid_z;
	uint16_t block_x, block_y, block_z;
	uint8_t kind;            /* enum kpi_gpu_rec_kind */
	uint8_t copy_kind;       /* memcpy: CUpti_ActivityMemcpyKind (1 HtoD, 2 DtoH, 8 DtoD) */
	uint32_t flags;          /* enum kpi_gpu_rec_flags */
	uint32_t _pad;
};

_Static_assert(sizeof(struct kpi_gpu_rec) == 80, "kpi_gpu_rec is ABI: 80 bytes");

#endif
