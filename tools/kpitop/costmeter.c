/* costmeter.c - kpitop's cost meter: $ per 1M output tokens and J per token
 * over the window, idle included, with the method beside them (docs/cost.md). */
#include "tools/kpitop/kpitop.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

struct costmeter {
	struct kt_widget base;
	int have;
	struct trace_cost_window w;
};

static int cost_height(int width) { return 1; }

static void cost_fill(struct kt_widget *w, const struct kt_data *d, const struct kt_view *v)
{
	struct costmeter *m = (struct costmeter *)w;
	m->have = d->have_cost;
	m->w = d->cost;
}

/* label, then the value or a dim "-" when it is not known */
static int field(struct canvas *c, int y, int x, const char *label, const char *fmt, double v)
{
	x += canvas_text(c, y, x, -1, CC_LABEL, 0, "%s ", label);
	if (isnan(v) || isinf(v))
		x += canvas_text(c, y, x, -1, CC_DIM, 0, "-");
	else
		x += canvas_text(c, y, x, -1, CC_VALUE, CF_BOLD, fmt, v);
	return x + 3;
}

static void cost_draw(const struct kt_widget *w, struct canvas *c, int y, int width, int h)
{
	const struct costmeter *m = (const struct costmeter *)w;
	const struct trace_cost_window *cw = &m->w;
	char price[48];
	int x = 1;

	if (!m->have) {
		canvas_text(c, y, x, width - x, CC_DIM, 0, "cost: not in this window (the agent writes it from "
			    "schema version 5 on, a sample or two late; docs/cost.md)");
		return;
	}
	x = field(c, y, x, "$/1M tok", "%.4g", cw->usd_per_mtok_out);
	x = field(c, y, x, "J/tok", "%.4g", cw->j_per_tok);
	x = field(c, y, x, "W", "%.1f", cw->interval_s > 0 ? cw->energy_j / cw->interval_s : NAN);
	x = field(c, y, x, "idle", "%.0f%%", cw->idle_share * 100);
	if (cw->price >= 0)
		snprintf(price, sizeof(price), "$%.4g/h%s", cw->price, cw->price_overridden ? "" : " agent's");
	else
		snprintf(price, sizeof(price), "no price: --price-per-hour");
	canvas_text(c, y, x, width - x, CC_DIM, 0, "(%s; %s)", price, trace_cost_method(cw));
}

const struct kt_widget_class kt_cost_class = {
	"cost", sizeof(struct costmeter), cost_height, cost_fill, cost_draw,
};
