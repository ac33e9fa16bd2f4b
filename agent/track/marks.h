/* marks.h - the arithmetic every record's times go through, whichever path
 * made it (USDT, HTTP, llama.cpp): marks put in order, the phases between them,
 * inter-token latencies by the trace's one percentile definition. */
#ifndef KPI_MARKS_H
#define KPI_MARKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "agent/record.h"

/* Raises each of the n marks (0: not reached) to the last reached one before
 * it (events from different CPUs can be a few ns out of order); true when
 * one moved. */
bool marks_clamp(uint64_t *m, int n);
/* n marks, the last the end (reached): n - 1 phases, *ph[i] from mark i
 * (when reached; phase 0 always) to the next mark reached, else KPI_NULL,
 * so the non-null ones sum to m[n-1] - m[0]. */
void marks_phases(const uint64_t *m, int n, int64_t *const *ph);
/* rec's itl_p50/p99/max from n_tok (> 1) token write times (schema/pct.h). */
void marks_itl(struct kpi_request_record *rec, const uint64_t *tok, size_t n_tok);

#endif
