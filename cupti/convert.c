/* convert.c - CUPTI activity records to kpi_gpu_rec (see convert.h). Reads only
 * the fields whose offsets every record version since CUDA 11 shares. */
#include "cupti/convert.h"

#include <string.h>

static uint16_t clamp16(int32_t v)
{
	return v < 0 ? 0 : v > 0xffff ? 0xffff : (uint16_t)v;
}

static void set_step(struct kpi_cupti_conv *cv, struct kpi_gpu_rec *out)
{
	if (!cv->have_step_source) {
		out->flags |= KPI_GPU_REC_F_NO_STEP_SOURCE;
		return;
	}
	if (!kpi_steplog_lookup(cv->steps, out->correlation_id, &out->step)) {
		out->step = 0;
		out->flags |= KPI_GPU_REC_F_STEP_UNKNOWN;
		cv->step_unknown++;
	}
}

static int set_times(struct kpi_cupti_conv *cv, struct kpi_gpu_rec *out, uint64_t start,
		     uint64_t end)
{
	if (start == 0 && end == 0) {
		cv->no_timestamp++;
		return 0;
	}
	out->start_ns = kpi_clock_to_mono(cv->clock, start);
	out->end_ns = end >= start ? kpi_clock_to_mono(cv->clock, end) : out->start_ns;
	return 1;
}

/* Every activity kind names where it ran the same way; CUPTI's record
 * structs differ, so this is a macro over their common field names. */
#define SET_IDS(out, r) do { \
	(out)->correlation_id = (r)->correlationId; \
	(out)->device_id = (r)->deviceId; \
	(out)->context_id = (r)->contextId; \
	(out)->stream_id = (r)->streamId; \
} while (0)

int kpi_cupti_convert(struct kpi_cupti_conv *cv, const CUpti_Activity *rec,
		      struct kpi_gpu_rec *out, uint32_t *new_name_id)
{
	memset(out, 0, sizeof(*out));
	*new_name_id = 0;

	switch (rec->kind) {
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
		const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
		if (!set_times(cv, out, k->start, k->end))
			return 0;
		out->kind = KPI_GPU_REC_KERNEL;
		SET_IDS(out, k);
		out->grid_x = (uint32_t)k->gridX;
		out->grid_y = (uint32_t)k->gridY;
		out->grid_z = (uint32_t)k->gridZ;
		out->block_x = clamp16(k->blockX);
		out->block_y = clamp16(k->blockY);
		out->block_z = clamp16(k->blockZ);
		int is_new;
		out->name_id = kpi_names_intern(cv->names, k->name ? k->name : "?", &is_new);
		if (!out->name_id) {
			out->flags |= KPI_GPU_REC_F_NAME_UNKNOWN;
			cv->names_full++;
		} else if (is_new) {
			*new_name_id = out->name_id;
		}
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMCPY: {
		const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
		if (!set_times(cv, out, m->start, m->end))
			return 0;
		out->kind = KPI_GPU_REC_MEMCPY;
		out->copy_kind = m->copyKind;
		out->bytes = m->bytes;
		SET_IDS(out, m);
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMSET: {
		const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
		if (!set_times(cv, out, m->start, m->end))
			return 0;
		out->kind = KPI_GPU_REC_MEMSET;
		out->bytes = m->bytes;
		SET_IDS(out, m);
		break;
	}
	default:
		return 0;
	}
	set_step(cv, out);
	return 1;
}
