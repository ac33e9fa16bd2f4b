/* convert.h - one CUPTI activity record (kernel, memcpy, memset) to the
 * struct kpi_gpu_rec that leaves the process: CLOCK_MONOTONIC times, the host
 * step of its launch, an interned kernel name. */
#ifndef KPI_CUPTI_CONVERT_H
#define KPI_CUPTI_CONVERT_H

#include <cupti_activity.h>

#include "cupti/clock.h"
#include "abi/kpi_cupti_abi.h"
#include "cupti/names.h"
#include "cupti/steplog.h"

struct kpi_cupti_conv {
	const struct kpi_clock *clock;
	struct kpi_steplog *steps;
	struct kpi_names *names;
	int have_step_source;   /* the host exports kpi_cupti_step_slot */
	uint64_t step_unknown;  /* records whose launch fell out of the step log */
	uint64_t names_full;    /* kernel records left without a name id */
	uint64_t no_timestamp;  /* records CUPTI could not time (skipped) */
};

/* Fills *out from rec. Returns 1 when filled, 0 for a kind it does not carry
 * or a record without timestamps. *new_name_id is the kernel's name id when
 * this record interned it (announce it), else 0. */
int kpi_cupti_convert(struct kpi_cupti_conv *cv, const CUpti_Activity *rec,
		      struct kpi_gpu_rec *out, uint32_t *new_name_id);

#endif
