/* test_cupti_convert.c - CUPTI activity records, built here with CUPTI's own
 * CUDA 13 structs, converted to kpi_gpu_rec: clock, step, name, geometry. */
#include <stddef.h>
#include <stdint.h>

#include "tests/unit/check.h"
#include "cupti/convert.h"

#define S 1000000000ull
#define EPOCH (1764670000ull * S)

static struct kpi_clock clk;
static struct kpi_steplog steps;
static struct kpi_names names;
static struct kpi_cupti_conv cv;

static void setup(int have_step_source)
{
	kpi_clock_init(&clk);
	kpi_clock_add(&clk, EPOCH, 50 * S); /* CUPTI EPOCH+x is monotonic 50 s + x */
	kpi_clock_add(&clk, EPOCH + 10 * S, 60 * S);
	kpi_steplog_init(&steps);
	kpi_steplog_note(&steps, 1000, 7); /* step 7 launches from corr 1000 */
	kpi_steplog_note(&steps, 1040, 0);
	kpi_steplog_note(&steps, 1050, 8);
	if (names.slot)
		kpi_names_free(&names);
	CHECK(kpi_names_init(&names) == 0, "names");
	cv = (struct kpi_cupti_conv){ .clock = &clk, .steps = &steps, .names = &names,
				      .have_step_source = have_step_source };
}

static CUpti_ActivityKernel10 kernel(uint32_t corr, const char *name)
{
	CUpti_ActivityKernel10 k;
	memset(&k, 0, sizeof(k));
	k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
	k.start = EPOCH + 2 * S + 100;
	k.end = EPOCH + 2 * S + 5100;
	k.completed = k.end;
	k.deviceId = 1;
	k.contextId = 3;
	k.streamId = 13;
	k.gridX = 128, k.gridY = 8, k.gridZ = 1;
	k.blockX = 256, k.blockY = 1, k.blockZ = 1;
	k.correlationId = corr;
	k.name = name;
	return k;
}

static void test_kernel_record(void)
{
	setup(1);
	CUpti_ActivityKernel10 k = kernel(1003, "paged_attention_decode<16, 128, __half>");
	struct kpi_gpu_rec r;
	uint32_t new_name;
	CHECK(kpi_cupti_convert(&cv, (CUpti_Activity *)&k, &r, &new_name) == 1, "not converted");
	CHECK(r.kind == KPI_GPU_REC_KERNEL, "kind %u", r.kind);
	CHECK(r.start_ns == 52 * S + 100 && r.end_ns == 52 * S + 5100, "times %llu..%llu",
	      (unsigned long long)r.start_ns, (unsigned long long)r.end_ns);
	CHECK(r.step == 7 && r.flags == 0, "step %llu flags %u", (unsigned long long)r.step, r.flags);
	CHECK(r.correlation_id == 1003 && r.device_id == 1 && r.context_id == 3 && r.stream_id == 13,
	      "ids");
	CHECK(r.grid_x == 128 && r.grid_y == 8 && r.grid_z == 1, "grid");
	CHECK(r.block_x == 256 && r.block_y == 1 && r.block_z == 1, "block");
	CHECK(r.bytes == 0, "kernel bytes");
	CHECK(new_name == r.name_id && r.name_id == 1, "first name: id %u new %u", r.name_id, new_name);
	CHECK(!strcmp(kpi_names_get(&names, r.name_id), "paged_attention_decode<16, 128, __half>"), "name");

	/* the same name from another module's copy: same id, not announced again */
	char other[] = "paged_attention_decode<16, 128, __half>";
	k = kernel(1055, other);
	CHECK(kpi_cupti_convert(&cv, (CUpti_Activity *)&k, &r, &new_name) == 1, "second");
	CHECK(r.name_id == 1 && new_name == 0, "id %u new %u", r.name_id, new_name);
	CHECK(r.step == 8, "step %llu", (unsigned long long)r.step);
	k = kernel(1041, "rmsnorm_kernel");
	CHECK(kpi_cupti_convert(&cv, (CUpti_Activity *)&k, &r, &new_name) == 1, "third");
	CHECK(r.name_id == 2 && new_name == 2 && r.step == 0 && r.flags == 0, "between steps");
}

static void test_memcpy_and_memset(void)
{
	setup(1);
	CUpti_ActivityMemcpy6 m;
	memset(&m, 0, sizeof(m));
	m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
	m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
	m.bytes = 4 * 32000;
	m.start = EPOCH + 3 * S;
	m.end = EPOCH + 3 * S + 900;
	m.deviceId = 0, m.contextId = 1, m.streamId = 7, m.correlationId = 1039;
	struct kpi_gpu_rec r;
	uint32_t nn;
	CHECK(kpi_cupti_convert(&cv, (CUpti_Activity *)&m, &r, &nn) == 1, "memcpy");
	CHECK(r.kind == KPI_GPU_REC_MEMCPY && r.copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, "kind");
	CHECK(r.bytes == 128000 && r.step == 7 && r.stream_id == 7 && r.name_id == 0 && nn == 0, "fields");
	CHECK(r.start_ns == 53 * S && r.end_ns == 53 * S + 900, "times");

	CUpti_ActivityMemset4 z;
	memset(&z, 0, sizeof(z));
	z.kind = CUPTI_ACTIVITY_KIND_MEMSET;
	z.bytes = 1 << 20;
	z.start = EPOCH + 4 * S;
	z.end = EPOCH + 4 * S + 10;
	z.streamId = 9, z.correlationId = 2000;
	CHECK(kpi_cupti_convert(&cv, (CUpti_Activity *)&z, &r, &nn) == 1, "memset");
	CHECK(r.kind == KPI_GPU_REC_MEMSET && r.bytes == 1 << 20 && r.step == 8 && r.stream_id == 9, "fields");
}

static void test_skips_and_flags(void)
{
	setup(1);
	struct kpi_gpu_rec r;
	uint32_t nn;
	CUpti_ActivityAPI api;
	memset(&api, 0, sizeof(api));
	api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
	CHECK(kpi_cupti_convert(&cv, (CUpti_Activity *)&api, &r, &nn) == 0, "API records are not carried");

	CUpti_ActivityKernel10 k = kernel(1003, "k");
	k.start = k.end = 0; /* CUPTI could not time it */
	CHECK(kpi_cupti_convert(&cv, (CUpti_Activity *)&k, &r, &nn) == 0, "untimed kernel");
	CHECK(cv.no_timestamp == 1, "counted");

	k = kernel(999, "k"); /* launched before the oldest step change kept */
	CHECK(kpi_cupti_convert(&cv, (CUpti_Activity *)&k, &r, &nn) == 1, "converted");
	CHECK(r.step == 0 && (r.flags & KPI_GPU_REC_F_STEP_UNKNOWN) && cv.step_unknown == 1, "unknown step");

	setup(0); /* a host that publishes no step */
	k = kernel(1003, "k");
	CHECK(kpi_cupti_convert(&cv, (CUpti_Activity *)&k, &r, &nn) == 1, "converted");
	CHECK(r.step == 0 && r.flags == KPI_GPU_REC_F_NO_STEP_SOURCE, "flags %u", r.flags);

	k = kernel(1003, "k");
	k.blockX = 70000; /* not a real block, but must not wrap */
	k.end = k.start - 1;
	CHECK(kpi_cupti_convert(&cv, (CUpti_Activity *)&k, &r, &nn) == 1, "converted");
	CHECK(r.block_x == 0xffff && r.end_ns == r.start_ns, "clamped");
}

/* The record layout is the BPF side's ABI: pin the offsets it reads. */
static void test_abi_layout(void)
{
	CHECK(sizeof(struct kpi_gpu_rec) == 80, "size");
	CHECK(offsetof(struct kpi_gpu_rec, step) == 0, "step");
	CHECK(offsetof(struct kpi_gpu_rec, start_ns) == 8 && offsetof(struct kpi_gpu_rec, end_ns) == 16, "times");
	CHECK(offsetof(struct kpi_gpu_rec, correlation_id) == 32, "corr");
	CHECK(offsetof(struct kpi_gpu_rec, grid_x) == 52 && offsetof(struct kpi_gpu_rec, block_x) == 64, "geometry");
	CHECK(offsetof(struct kpi_gpu_rec, kind) == 70 && offsetof(struct kpi_gpu_rec, flags) == 72, "kind, flags");
	/* the CUPTI fields convert.c reads sit where every CUDA 11-13 kernel record has them */
	CHECK(offsetof(CUpti_ActivityKernel10, start) == 16 && offsetof(CUpti_ActivityKernel10, correlationId) == 92,
	      "CUPTI kernel record moved: start@%zu corr@%zu", offsetof(CUpti_ActivityKernel10, start),
	      offsetof(CUpti_ActivityKernel10, correlationId));
}

int main(void)
{
	RUN(test_kernel_record);
	RUN(test_memcpy_and_memset);
	RUN(test_skips_and_flags);
	RUN(test_abi_layout);
	return CHECK_DONE();
}
