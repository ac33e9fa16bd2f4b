/* Minimal unit-test harness for C tests: each test prints one line that
 * tests/run.py counts (PASS name / FAIL name: where: why / SKIP name: reason). */
#ifndef KPI_CHECK_H
#define KPI_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>

static const char *check_cur;
static int check_failed_total;
static jmp_buf check_jmp;
static char check_skip_reason[256];

/* Stops the current test with a failure line. */
#define CHECK(cond, ...) do { if (!(cond)) { \
	printf("FAIL %s: %s:%d: %s: ", check_cur, __FILE__, __LINE__, #cond); \
	printf(__VA_ARGS__); printf("\n"); fflush(stdout); \
	longjmp(check_jmp, 1); } } while (0)

#define CHECK_NEAR(a, b, tol) CHECK(fabs((double)(a) - (double)(b)) <= (tol), \
	"%g vs %g (tol %g)", (double)(a), (double)(b), (double)(tol))

#define SKIP(...) do { snprintf(check_skip_reason, sizeof(check_skip_reason), __VA_ARGS__); \
	longjmp(check_jmp, 2); } while (0)

#define RUN(fn) do { check_cur = #fn; int _r = setjmp(check_jmp); \
	if (_r == 0) { fn(); printf("PASS %s\n", #fn); } \
	else if (_r == 1) check_failed_total++; \
	else printf("SKIP %s: %s\n", #fn, check_skip_reason); \
	fflush(stdout); } while (0)

#define CHECK_DONE() (check_failed_total ? 1 : 0)

#endif
