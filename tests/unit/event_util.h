/* event_util.h - one synthetic ring-buffer record for the assembler tests, as
 * bpf/kpi.bpf.c would send it, from the probe's arguments in declaration order:
 * mkev(pid, type, ts, id, fd, x, y, rid) puts x and y where that type keeps its
 * first two integer arguments (ADMIT prompt/max tokens, REJECT status/reason,
 * FINISH output tokens/reason, STEP_BEGIN prefill tokens/decode seqs, RESP_END
 * status, ARRIVE the arrival source, RUNQ_BY the other tgid, rid its comm); a
 * WRITE carries the one write time ts. */
#ifndef KPI_TEST_EVENT_UTIL_H
#define KPI_TEST_EVENT_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "bpf/kpi_event.h"

static union kpi_event mkev(unsigned pid, int type, uint64_t ts, uint64_t id, int fd, int x, int y,
			    const char *rid)
{
	union kpi_event e = { .h = { .type = (unsigned)type, .pid = pid, .ts = ts } };

	switch (type) {
	case KPI_EV_ARRIVE:
		e.arrive.fd = fd;
		e.arrive.src = (unsigned)x;
		break;
	case KPI_EV_ADMIT:
		e.admit.id = id;
		e.admit.fd = fd;
		e.admit.prompt_tokens = x;
		e.admit.max_tokens = y;
		if (rid)
			snprintf(e.admit.reqid, sizeof(e.admit.reqid), "%s", rid);
		break;
	case KPI_EV_REJECT:
		e.reject.fd = fd;
		e.reject.http_status = x;
		e.reject.reason = y;
		if (rid)
			snprintf(e.reject.reqid, sizeof(e.reject.reqid), "%s", rid);
		break;
	case KPI_EV_FINISH:
		e.finish.id = id;
		e.finish.output_tokens = x;
		e.finish.finish_reason = y;
		break;
	case KPI_EV_STEP_BEGIN:
		e.step_begin.step = id;
		e.step_begin.prefill_tokens = x;
		e.step_begin.decode_seqs = y;
		break;
	case KPI_EV_STEP_END:
		e.step_end.step = id;
		break;
	case KPI_EV_RESP_END:
		e.resp_end.id = id;
		e.resp_end.fd = fd;
		e.resp_end.http_status = x;
		break;
	case KPI_EV_WRITE: {    /* one write a batch, built as the kernel builds it */
		struct kpi_conn c = { .n_writes = 1, .writes = { ts } };
		kpi_write_event_fill(&e.write, pid, fd, &c, 1);
		break;
	}
	case KPI_EV_CLOSE:
		e.close.fd = fd;
		break;
	case KPI_EV_RUNQ_BY:
		e.runq_by.by_tgid = (unsigned)x;
		if (rid)
			memcpy(e.runq_by.comm, rid, strnlen(rid, sizeof(e.runq_by.comm)));
		break;
	default:        /* SCHED, FIRST, PREEMPT, CANCEL */
		e.req.id = id;
		break;
	}
	return e;
}

/* Feeds e to the assembler at the size the ring would carry it. */
#define assemble_ev(a, e) assemble_event((a), &(e), kpi_event_size((e).h.type))

#endif
