/* fleetview.c - kpitop's fleet widgets: the whole fleet's meters and one row
 * per host (rate, TTFT/TPOT percentiles, errors, losses, how fresh), filled
 * from struct kt_data's fleet window like every other widget. */
#include "tools/kpitop/kpitop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const kt_fleet_sort_name[KF_N] = { "TTFT p99", "TTFT p50", "TPOT p99", "REQ/S", "ERR+429", "LOST",
					       "HOST" };

static char *dur(char *b, double ns) { return timefmt_dur(b, 16, ns); }

/* ---- the fleet's meters ------------------------------------------------------ */
struct fleet_meters {
	struct kt_widget base;
	struct fleet_host all;
	int hosts, idle, more, have_data;
	char note[120];
};

static int fm_height(int w) { return 2; }

static void fm_fill(struct kt_widget *w, const struct kt_data *d, const struct kt_view *v)
{
	struct fleet_meters *m = (struct fleet_meters *)w;
	m->all = d->fw.all;
	m->hosts = d->fw.n_hosts;
	m->more = d->fw.more_hosts;
	m->have_data = d->have_data;
	m->idle = 0;
	for (int i = 0; i < d->fw.n_hosts; i++) m->idle += !d->fw.host[i].requests;
	m->note[0] = 0;
	if (d->have_data && !d->fw.all.requests) {
		char a[32], b[32];
		snprintf(m->note, sizeof(m->note), "(no request in this window: the fleet's rows span %s to %s)",
			 timefmt_wall(a, sizeof(a), d->first_wall_ns, 0), timefmt_wall(b, sizeof(b), d->last_wall_ns, 0));
	}
}

static int fm_meter(struct canvas *c, int y, int x, const char *label, int color, const char *fmt, double v)
{
	x += canvas_text(c, y, x, -1, CC_LABEL, 0, "%s ", label);
	x += canvas_text(c, y, x, -1, color, CF_BOLD, fmt, v);
	return x + 3;
}

static int fm_dist(struct canvas *c, int y, int x, const char *label, const struct trace_dist *t)
{
	char a[16], b[16], e[16];
	x += canvas_text(c, y, x, -1, CC_LABEL, 0, "%s ", label);
	x += canvas_text(c, y, x, -1, t->n ? CC_VALUE : CC_DIM, CF_BOLD, "p50 %s  p95 %s  p99 %s", dur(a, t->n ? t->p50 : -1),
			 dur(b, t->n ? t->p95 : -1), dur(e, t->n ? t->p99 : -1));
	return x + 4;
}

static void fm_draw(const struct kt_widget *w, struct canvas *c, int y, int width, int h)
{
	const struct fleet_meters *m = (const struct fleet_meters *)w;
	const struct fleet_host *a = &m->all;
	int x = 1;
	x = fm_meter(c, y, x, "hosts", CC_VALUE, "%.0f", m->hosts + m->more);
	if (m->idle)
		x += canvas_text(c, y, x - 2, -1, CC_WARN, 0, "(%d idle)", m->idle) + 1;
	x = fm_meter(c, y, x, "req/s", CC_VALUE, "%.1f", a->req_per_s);
	x = fm_meter(c, y, x, "out tok/s", CC_VALUE, "%.0f", a->out_tok_per_s);
	x = fm_meter(c, y, x, "requests", CC_VALUE, "%.0f", a->requests);
	x = fm_meter(c, y, x, "429s", a->rejected ? CC_BAD : CC_VALUE, "%.0f", a->rejected);
	x = fm_meter(c, y, x, "errors", a->errors ? CC_BAD : CC_VALUE, "%.0f", a->errors);
	x = fm_meter(c, y, x, "lost", a->lost ? CC_BAD : CC_VALUE, "%.0f", (double)a->lost);
	if (a->loss_causes)
		canvas_text(c, y, x - 2, -1, CC_DIM, 0, "(%s%s)", a->top_loss, a->loss_causes > 1 ? ", ..." : "");
	y++;
	x = 1;
	x = fm_dist(c, y, x, "TTFT", &a->ttft);
	x = fm_dist(c, y, x, "TPOT", &a->tpot);
	if (!m->have_data)
		canvas_text(c, y, x, -1, CC_WARN, 0, "(no rows in ClickHouse yet: ship them with kpi-ship)");
	else if (m->note[0])
		canvas_text(c, y, x, -1, CC_WARN, 0, "%s", m->note);
}

const struct kt_widget_class kt_fleet_meters_class = {
	"fleet meters", sizeof(struct fleet_meters), fm_height, fm_fill, fm_draw,
};

/* ---- one row per host ------------------------------------------------------ */
static double fleet_key(const struct fleet_host *h, enum kt_fleet_sort s)
{
	switch (s) {
	case KF_TTFT_P99: return h->ttft.n ? h->ttft.p99 : -1;
	case KF_TTFT_P50: return h->ttft.n ? h->ttft.p50 : -1;
	case KF_TPOT_P99: return h->tpot.n ? h->tpot.p99 : -1;
	case KF_RATE: return h->req_per_s;
	case KF_ERRORS: return h->errors + h->rejected;
	case KF_LOST: return (double)h->lost;
	default: return 0;
	}
}

struct fleet_key {
	double key;
	const char *name;
	int idx;
};

static int cmp_fleet_keys(const void *a, const void *b)
{
	const struct fleet_key *x = a, *y = b;
	if (x->key != y->key) return x->key < y->key ? 1 : -1;  /* largest first */
	return strcmp(x->name, y->name);
}

int kt_fleet_rows(const struct kt_data *d, const struct kt_view *v, int *idx)
{
	struct fleet_key keys[FLEET_MAX_HOSTS];
	int n = 0;
	for (int i = 0; i < d->fw.n_hosts; i++) {
		const struct fleet_host *h = &d->fw.host[i];
		if (v->filter[0] && !strstr(h->name, v->filter)) continue;
		keys[n++] = (struct fleet_key){ fleet_key(h, v->fleet_sort), h->name, i };
	}
	qsort(keys, (size_t)n, sizeof(*keys), cmp_fleet_keys);
	for (int i = 0; i < n; i++) idx[i] = keys[i].idx;
	return n;
}

struct fleet_hosts {
	struct kt_widget base;
	struct fleet_host rows[FLEET_MAX_HOSTS];    /* filtered and sorted */
	int n, top, sel, more;
	int64_t to_wall_ns;
	enum kt_fleet_sort sort;
	char filter[64];
	int from_buckets;
};

static int fh_height(int w) { return 0; }

static void fh_fill(struct kt_widget *w, const struct kt_data *d, const struct kt_view *v)
{
	struct fleet_hosts *p = (struct fleet_hosts *)w;
	int idx[FLEET_MAX_HOSTS];
	p->n = kt_fleet_rows(d, v, idx);
	for (int i = 0; i < p->n; i++) p->rows[i] = d->fw.host[idx[i]];
	p->more = d->fw.more_hosts;
	p->to_wall_ns = d->to_wall_ns;
	p->sort = v->fleet_sort;
	p->from_buckets = d->fw.from_buckets;
	snprintf(p->filter, sizeof(p->filter), "%s", v->filter);
	p->top = v->top;
	p->sel = v->sel;
}

/* Columns: host, rate and count, the four percentiles, errors, 429s, losses,
 * the age of the host's newest row, the largest loss cause. */
#define FH_FMT " %-16.16s %7s %7s %8s %8s %8s %8s %5s %5s %6s %7s  "
static const int fh_width[11] = { 16, 7, 7, 8, 8, 8, 8, 5, 5, 6, 7 };

/* How long before the window's end: tenths of a second, minutes past one. */
static char *age_text(char *b, double ns)
{
	if (ns < 0) return strcpy(b, "-");
	if (ns < 60 * NS_PER_S) snprintf(b, 16, "%.1fs", (double)(int64_t)(ns / 1e8) / 10);
	else timefmt_dur(b, 16, ns);
	return b;
}

/* One row, cell by cell as the header lays them out; a value wider than its
 * column pushes the rest right rather than lose a digit. */
static void fh_row(const struct fleet_hosts *p, struct canvas *c, int y, int width, const struct fleet_host *h, int sel)
{
	int fl = sel ? CF_REVERSE : 0;
	char cell[11][24];
	const double v[4] = { h->ttft.n ? h->ttft.p50 : -1, h->ttft.n ? h->ttft.p99 : -1, h->tpot.n ? h->tpot.p50 : -1,
			      h->tpot.n ? h->tpot.p99 : -1 };
	/* how long before the window's end its newest row is: a host whose
	 * shipper or agent stopped ages here */
	double a = h->last_wall_ns ? (double)(p->to_wall_ns - h->last_wall_ns) : -1;
	snprintf(cell[0], sizeof(cell[0]), "%.16s", h->name);
	snprintf(cell[1], sizeof(cell[1]), "%.1f", h->req_per_s);
	snprintf(cell[2], sizeof(cell[2]), "%d", h->requests);
	for (int k = 0; k < 4; k++) dur(cell[3 + k], v[k]);
	snprintf(cell[7], sizeof(cell[7]), "%d", h->errors);
	snprintf(cell[8], sizeof(cell[8]), "%d", h->rejected);
	snprintf(cell[9], sizeof(cell[9]), "%lld", (long long)h->lost);
	age_text(cell[10], a);
	const int color[11] = { CC_VALUE, CC_DEFAULT, CC_DEFAULT, CC_DEFAULT, CC_DEFAULT, CC_DEFAULT, CC_DEFAULT,
				h->errors ? CC_BAD : CC_DEFAULT, h->rejected ? CC_BAD : CC_DEFAULT,
				h->lost ? CC_BAD : CC_DEFAULT,
				a > 60 * NS_PER_S ? CC_BAD : a > 5 * NS_PER_S ? CC_WARN : CC_DEFAULT };
	if (sel) canvas_fill(c, y, 0, width, L' ', CC_SEL, CF_REVERSE);
	int x = 1;
	for (int k = 0; k < 11; k++) {
		int n = 0;              /* columns: UTF-8 characters ("µs") */
		for (const char *q = cell[k]; *q; q++) n += ((unsigned char)*q & 0xC0) != 0x80;
		int w = n > fh_width[k] ? n : fh_width[k];
		int cc = sel ? CC_SEL : color[k], bold = color[k] == CC_BAD || color[k] == CC_WARN || !k ? CF_BOLD : 0;
		/* the name to the left, figures to the right of their column */
		canvas_text(c, y, k ? x + w - n : x, w, cc, fl | bold, "%s", cell[k]);
		x += w + 1;
	}
	if (h->loss_causes)
		canvas_text(c, y, x + 1, -1, sel ? CC_SEL : CC_DIM, fl, "%s%s", h->top_loss, h->loss_causes > 1 ? ", ..." : "");
}

static void fh_draw(const struct kt_widget *w, struct canvas *c, int y, int width, int h)
{
	const struct fleet_hosts *p = (const struct fleet_hosts *)w;
	canvas_fill(c, y, 0, width, L' ', CC_TITLE, CF_REVERSE);
	canvas_text(c, y, 0, width, CC_TITLE, CF_REVERSE, FH_FMT "LOSS (sort: %s%s%s%s)", "HOST", "REQ/S", "REQS",
		    "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "ERR", "429", "LOST", "LAST", kt_fleet_sort_name[p->sort],
		    p->filter[0] ? ", filter: " : "", p->filter, p->from_buckets ? "; p50/p99 from buckets, ±1 %" : "");
	if (p->n == 0) {
		char look[16];
		if (p->filter[0])
			canvas_text(c, y + 1, 1, -1, CC_DIM, 0, "no host matches the filter '%s'", p->filter);
		else
			canvas_text(c, y + 1, 1, -1, CC_DIM, 0, "no host shipped a request in the window, or a sample in "
				    "the %s before its end", dur(look, (double)KT_FLEET_LOOKBACK_NS));
		return;
	}
	int i;
	for (i = 0; i < h - 1 && p->top + i < p->n; i++)
		fh_row(p, c, y + 1 + i, width, &p->rows[p->top + i], p->top + i == p->sel);
	if (p->more && i < h - 1)
		canvas_text(c, y + 1 + i, 1, -1, CC_WARN, 0, "... and %d more hosts than kpitop lists (%d)", p->more,
			    FLEET_MAX_HOSTS);
}

const struct kt_widget_class kt_fleet_hosts_class = {
	"hosts", sizeof(struct fleet_hosts), fh_height, fh_fill, fh_draw,
};
