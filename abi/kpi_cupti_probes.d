/* kpi_cupti_probes.d - every USDT probe of libkpi_cupti.so (provider "kpi_cupti").
 * Records are struct kpi_gpu_rec (abi/kpi_cupti_abi.h), sent in batches of at
 * most KPI_CUPTI_BATCH_MAX; arguments are documented in docs/cupti.md. */
provider kpi_cupti {
	/* n records of rec_size bytes at recs (CLOCK_MONOTONIC times); seq counts batches */
	probe activity__batch(const void *recs, uint32_t n, uint32_t rec_size, uint64_t seq);
	/* a kernel name id first used in a batch (all of them again when a listener attaches) */
	probe kernel__name(uint32_t id, const char *name);
	/* one calibration point: cuptiGetTimestamp() read between two CLOCK_MONOTONIC reads */
	probe clock__sync(uint64_t cupti_ns, uint64_t mono_ns, uint64_t window_ns);
	/* cumulative counters, after each delivered CUPTI buffer */
	probe stats(uint64_t records, uint64_t cupti_dropped, uint64_t step_unknown, uint64_t names_full, uint64_t buffers);
	/* collection state: 1 on (listener attached), 0 paused (no listener), -1 disabled after a failure */
	probe state(int state, const char *reason);
};
