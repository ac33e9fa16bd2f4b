/* kpi_step.h - how a host process tells libkpi_cupti.so which batch step its GPU
 * work belongs to: one exported variable, one store per step, nothing else. */
#ifndef KPI_STEP_H
#define KPI_STEP_H

#include <stdint.h>

/* The host defines the slot once (KPI_CUPTI_STEP_DEFINE in one .c file) and
 * exports it from its executable (link with KPI_CUPTI_STEP_LDFLAGS); the
 * library finds it with dlsym(RTLD_DEFAULT, KPI_CUPTI_STEP_SYMBOL). Without the
 * library nobody reads it: the cost is one relaxed store per step. */
struct kpi_cupti_step_slot {
	uint32_t magic;   /* KPI_CUPTI_STEP_MAGIC */
	uint32_t version; /* KPI_CUPTI_STEP_VERSION */
	uint64_t step;    /* current batch step id; 0 between steps */
};

#define KPI_CUPTI_STEP_SYMBOL "kpi_cupti_step_slot"
#define KPI_CUPTI_STEP_MAGIC 0x6b706973u /* "kpis" */
#define KPI_CUPTI_STEP_VERSION 1u
#define KPI_CUPTI_STEP_LDFLAGS "-Wl,--export-dynamic-symbol=kpi_cupti_step_slot"

#ifdef __cplusplus
extern "C" {
#endif
extern struct kpi_cupti_step_slot kpi_cupti_step_slot;
#ifdef __cplusplus
}
#endif

#define KPI_CUPTI_STEP_DEFINE() \
	__attribute__((visibility("default"), used)) struct kpi_cupti_step_slot \
	kpi_cupti_step_slot = { KPI_CUPTI_STEP_MAGIC, KPI_CUPTI_STEP_VERSION, 0 }

/* Call before the step's first GPU launch or copy. Step ids start at 1. */
static inline void kpi_cupti_step_begin(uint64_t step)
{
	__atomic_store_n(&kpi_cupti_step_slot.step, step, __ATOMIC_RELEASE);
}

/* Call after the step's last GPU work is queued: later launches belong to no step. */
static inline void kpi_cupti_step_end(void)
{
	__atomic_store_n(&kpi_cupti_step_slot.step, 0, __ATOMIC_RELEASE);
}

#endif
