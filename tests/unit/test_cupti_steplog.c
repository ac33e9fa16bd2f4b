/* test_cupti_steplog.c - correlation id -> host step, as the launch callback
 * notes it and the buffer thread looks it up. */
#include <stdint.h>

#include "tests/unit/check.h"
#include "cupti/steplog.h"

static struct kpi_steplog l;

static uint64_t step_of(uint32_t corr)
{
	uint64_t s = 0xdead;
	CHECK(kpi_steplog_lookup(&l, corr, &s), "corr %u not found", corr);
	return s;
}

/* The daemon's pattern: step N begins, launches, ends (0), next step. */
static void test_steps_and_gaps(void)
{
	kpi_steplog_init(&l);
	uint64_t s = 0xdead;
	CHECK(!kpi_steplog_lookup(&l, 5, &s), "empty log must not find");
	uint32_t corr = 100;
	for (uint64_t step = 1; step <= 50; step++) {
		/* the callback notes only on change */
		if (kpi_steplog_changed(&l, step))
			kpi_steplog_note(&l, corr, step);
		corr += 10; /* ten launches in the step */
		CHECK(!kpi_steplog_changed(&l, step), "no change within a step");
		kpi_steplog_note(&l, corr, 0); /* a launch between steps */
		corr += 2;
	}
	CHECK(step_of(100) == 1, "first launch");
	CHECK(step_of(109) == 1, "last launch of step 1");
	CHECK(step_of(110) == 0, "between steps");
	CHECK(step_of(112) == 2, "step 2");
	CHECK(step_of(100 + 12 * 49 + 9) == 50, "last step");
	CHECK(step_of(4000000000u) == 0, "after the last note: the newest run");
	CHECK(!kpi_steplog_lookup(&l, 99, &s), "before the first note: unknown");
}

/* Runtime and driver callbacks of one launch note the same id: one entry. */
static void test_repeated_note_same_id(void)
{
	kpi_steplog_init(&l);
	kpi_steplog_note(&l, 10, 1);
	kpi_steplog_note(&l, 10, 1);
	kpi_steplog_note(&l, 20, 2);
	kpi_steplog_note(&l, 20, 3);
	CHECK(l.n == 2, "n=%d", l.n);
	CHECK(step_of(25) == 3, "the later note of one id wins");
	CHECK(step_of(15) == 1, "earlier run intact");
}

/* Two launching threads race: an older id noted late lands in order. */
static void test_out_of_order_note(void)
{
	kpi_steplog_init(&l);
	kpi_steplog_note(&l, 10, 1);
	kpi_steplog_note(&l, 30, 3);
	kpi_steplog_note(&l, 20, 2);
	CHECK(step_of(15) == 1, "15");
	CHECK(step_of(25) == 2, "25");
	CHECK(step_of(35) == 3, "35");
}

/* Past the capacity the oldest steps fall out: their launches are unknown,
 * recent ones still resolve. */
static void test_overflow_forgets_oldest(void)
{
	kpi_steplog_init(&l);
	int total = KPI_STEPLOG_CAP + 100;
	for (int i = 0; i < total; i++)
		kpi_steplog_note(&l, (uint32_t)(1000 + i * 4), (uint64_t)i + 1);
	CHECK(l.n == KPI_STEPLOG_CAP, "n=%d", l.n);
	uint64_t s;
	CHECK(!kpi_steplog_lookup(&l, 1000 + 50 * 4, &s), "forgotten step still found");
	CHECK(step_of((uint32_t)(1000 + (total - 1) * 4 + 3)) == (uint64_t)total, "newest");
	CHECK(step_of((uint32_t)(1000 + 200 * 4 + 1)) == 201, "oldest kept");
}

int main(void)
{
	RUN(test_steps_and_gaps);
	RUN(test_repeated_note_same_id);
	RUN(test_out_of_order_note);
	RUN(test_overflow_forgets_oldest);
	return CHECK_DONE();
}
