/* event_util.h - one synthetic ring-buffer event for the assembler tests, as
 * bpf/kpi.bpf.c would send it: a..b the probe's integer arguments, a WRITE
 * carrying the one write time ts. */
#ifndef KPI_TEST_EVENT_UTIL_H
#define KPI_TEST_EVENT_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include "bpf/kpi_event.h"

static struct kpi_event mkev(unsigned pid, int type, uint64_t ts, uint64_t id, int fd, int x, int y,
			     const char *rid)
{
	struct kpi_event e = { .type = (unsigned)type, .pid = pid, .ts = ts, .id = id, .fd = fd,
			       .a = x, .b = y };
	if (type == KPI_EV_WRITE) {    /* one write a batch, built as the kernel builds it */
		struct kpi_conn c = { .n_writes = 1, .writes = { ts } };
		kpi_write_event_fill(&e, pid, fd, &c, 1);
	}
	if (rid)
		snprintf(e.reqid, sizeof(e.reqid), "%s", rid);
	return e;
}

#endif
