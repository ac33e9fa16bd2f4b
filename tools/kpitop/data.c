/* data.c - kpitop's one door to the trace: a frame's window statistics,
 * sparkline series and request list, all through tools/common/trace.h. */
#include "tools/kpitop/kpitop.h"

#include <string.h>
#include <time.h>

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int kt_sample(struct kt_data *d)
{
	double t0 = now_ms();
	d->have_data = trace_span(d->tr, &d->first_ns, &d->last_ns);
	if (!d->have_data) {
		memset(&d->win, 0, sizeof(d->win));
		d->nreqs = d->ninflight = 0;
		d->sample_ms = now_ms() - t0;
		return 0;
	}
	if (d->live) d->to_ns = d->last_ns + 1;
	int64_t from = d->to_ns - d->window_ns;
	if (trace_window_stats(d->tr, from, d->to_ns, false, &d->win)) return -1;
	/* sparklines cover a minute, or the window when it is longer */
	int64_t span = d->window_ns > 60 * NS_PER_S ? d->window_ns : 60 * NS_PER_S;
	d->spark_from_ns = d->to_ns - span;
	d->spark_to_ns = d->to_ns;
	if (trace_series(d->tr, d->spark_from_ns, d->spark_to_ns, KT_SPARK, d->spark)) return -1;
	d->ninflight = trace_inflight(d->tr, d->to_ns, d->live, d->reqs, KT_MAX_REQS / 2);
	d->nreqs = d->ninflight + trace_recent(d->tr, d->to_ns, d->reqs + d->ninflight,
					      KT_MAX_REQS - d->ninflight);
	d->sample_ms = now_ms() - t0;
	return 0;
}
