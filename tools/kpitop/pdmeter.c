/* pdmeter.c - kpitop's disaggregation meter: the window's disaggregated
 * requests (router -> decode worker <- prefill worker) by phase across the
 * three processes, the KV transfer's rate and why requests waited for a
 * decode slot (docs/disaggregation.md). */
#include "tools/kpitop/kpitop.h"

#include <stdio.h>
#include <string.h>

struct pdmeter {
	struct kt_widget base;
	int have;
	struct trace_disagg_window w;
};

static int pd_height(int width) { return 1; }

static void pd_fill(struct kt_widget *w, const struct kt_data *d, const struct kt_view *v)
{
	struct pdmeter *m = (struct pdmeter *)w;
	m->have = d->have_pd;
	m->w = d->pd;
}

/* The short names the line has room for, in the phases' order (the help
 * screen spells them out). */
static const char *const short_name[TD_N] = { "in", "rt", "pq", "pf", "KV", "dq", "dec", "out" };

static void pd_draw(const struct kt_widget *w, struct canvas *c, int y, int width, int h)
{
	const struct pdmeter *m = (const struct pdmeter *)w;
	const struct trace_disagg_window *pw = &m->w;
	char a[16];
	int x = 1;

	if (!m->have || !pw->requests) {
		canvas_text(c, y, x, width - x, CC_DIM, 0, "P/D: no disaggregated request in this window%s",
			    m->have ? "" : " (the trace has no such columns: schema version 10 on)");
		return;
	}
	x += canvas_text(c, y, x, -1, CC_LABEL, 0, "P/D ");
	x += canvas_text(c, y, x, -1, CC_VALUE, CF_BOLD, "%d", pw->requests);
	x += canvas_text(c, y, x, -1, CC_LABEL, 0, " KV stream ");
	if (pw->rate >= 0)
		x += canvas_text(c, y, x, -1, CC_VALUE, CF_BOLD, "%.1fMB/s", pw->rate / 1e6);
	else
		x += canvas_text(c, y, x, -1, CC_DIM, 0, "-");
	if (pw->failed)
		x += canvas_text(c, y, x, -1, CC_BAD, CF_BOLD, " %d failed", pw->failed);
	x += canvas_text(c, y, x, -1, CC_LABEL, 0, "  p99 ");
	for (int k = 0; k < TD_N && x < width - 12; k++) {
		if (!pw->ph[k].n)
			continue;
		x += canvas_text(c, y, x, -1, CC_DIM, 0, "%s ", short_name[k]);
		x += canvas_text(c, y, x, -1, CC_VALUE, 0, "%s ", timefmt_dur(a, sizeof(a), pw->ph[k].p99));
	}
	int waited = pw->slot[TD_SLOT_SLOTS] + pw->slot[TD_SLOT_BLOCKS];
	if (waited && x < width - 16)
		canvas_text(c, y, x, width - x, CC_WARN, 0, " slot waits: %d full, %d blocks",
			    pw->slot[TD_SLOT_SLOTS], pw->slot[TD_SLOT_BLOCKS]);
}

const struct kt_widget_class kt_pd_class = {
	"disaggregation", sizeof(struct pdmeter), pd_height, pd_fill, pd_draw,
};
