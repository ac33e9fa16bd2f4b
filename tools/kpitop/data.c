/* data.c - kpitop's one door to its data: a frame's window statistics,
 * sparklines and request list, through tools/common/trace.h only; or, for
 * a fleet in ClickHouse, every host of the window (fleet_window.h). */
#include "tools/kpitop/kpitop.h"
#include "tools/common/clickhouse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The requests of the span a frame shows (the sparklines', which holds the
 * window), kept from frame to frame so that a frame reads only what entered
 * the span and what the agent wrote since the last one: exactly the rows
 * that arrived in [lo_ns, hi_ns) among those up to rowid last_rowid. */
struct kt_source {
	struct fleet *fleet;        /* a fleet: nothing else below but fw is used */
	struct fleet_window *fw;    /* the frame being read */
	struct trace *tr;
	struct trace_cost *cost;    /* NULL: the trace has no cost tables */
	struct trace_disagg *pd;    /* NULL: no disaggregation columns (before version 10) */
	struct trace_hops *hops;    /* opened at the hops view's first use */
	int hops_tried;
	struct trace_agents *agents;        /* opened at the tasks view's first use */
	int agents_tried;
	struct trace_pods *pods;            /* opened at the pods view's first use */
	int pods_tried;
	int hops_pid;               /* the request whose hops d->hops holds */
	int64_t hops_t;
	struct trace_stat_rows rows;
	int64_t lo_ns, hi_ns;
	int64_t last_rowid;
	char err[256];              /* why the last sample failed */
};

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int kt_open(struct kt_data *d, const char *path, int64_t window_ns, char *err, size_t errlen)
{
	memset(d, 0, sizeof(*d));
	d->src = calloc(1, sizeof(*d->src));
	if (!d->src) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	d->path = path;
	d->window_ns = window_ns;
	d->live = 1;
	d->culprit = -1;
	if (ch_is_url(path)) {
		d->fleet = 1;
		d->src->fleet = fleet_open(path, err, errlen);
		d->src->fw = malloc(sizeof(*d->src->fw));
		if (!d->src->fleet || !d->src->fw) {
			if (d->src->fleet) snprintf(err, errlen, "out of memory");
			kt_close(d);
			return -1;
		}
		d->path = fleet_url(d->src->fleet);
		return 0;
	}
	d->src->tr = trace_open(path, err, errlen);
	if (!d->src->tr) {
		kt_close(d);
		return -1;
	}
	char why[256];
	d->src->cost = trace_cost_open(d->src->tr, -1, why, sizeof(why));
	d->src->pd = trace_disagg_open(d->src->tr, why, sizeof(why));
	return 0;
}

void kt_close(struct kt_data *d)
{
	if (!d->src) return;
	fleet_close(d->src->fleet);
	free(d->src->fw);
	trace_cost_close(d->src->cost);
	trace_disagg_close(d->src->pd);
	trace_hops_close(d->src->hops);
	trace_agents_close(d->src->agents);
	trace_pods_close(d->src->pods);
	trace_close(d->src->tr);
	trace_stat_rows_free(&d->src->rows);
	free(d->src);
	d->src = NULL;
}

/* TIME on the fleet's wall clock: relative forms count from its oldest and
 * newest rows, a time of day is on the day of the newest. */
static int fleet_seek(struct kt_data *d, const char *time, char *err, size_t errlen)
{
	struct timefmt_point p;
	int64_t first, last;
	if (timefmt_parse_point(time, &p, err, errlen)) return -1;
	if (p.anchor == TF_WALL) {
		d->to_ns = p.ns;
		return 0;
	}
	int rc = fleet_span(d->src->fleet, &first, &last);
	if (rc <= 0) {
		snprintf(err, errlen, rc < 0 ? "%s" : "time '%s' is relative to the fleet's rows, but %s holds none yet",
			 rc < 0 ? fleet_errmsg(d->src->fleet) : time, d->path);
		return -1;
	}
	if (p.anchor == TF_START) d->to_ns = first + p.ns;
	else if (p.anchor == TF_END) d->to_ns = last + p.ns;
	else if ((d->to_ns = timefmt_on_day(last, p.ns)) < 0) {
		snprintf(err, errlen, "'%s' is not a time on the day of the fleet's newest row", time);
		return -1;
	}
	return 0;
}

int kt_seek(struct kt_data *d, const char *time, char *err, size_t errlen)
{
	if (d->fleet ? fleet_seek(d, time, err, errlen) : trace_parse_time(d->src->tr, time, &d->to_ns, err, errlen))
		return -1;
	d->live = 0;
	return 0;
}

int kt_set_price(struct kt_data *d, double price_per_hour, char *err, size_t errlen)
{
	if (d->fleet) {
		snprintf(err, errlen, "the fleet view has no cost meter: open one host's trace (--db PATH)");
		return -1;
	}
	trace_cost_close(d->src->cost);
	d->src->cost = trace_cost_open(d->src->tr, price_per_hour, err, errlen);
	return d->src->cost ? 0 : -1;
}

const char *kt_errmsg(const struct kt_data *d) { return d->src->err; }

void kt_set_fleet_timeout(struct kt_data *d, long timeout_ms)
{
	if (d->fleet) fleet_set_timeout(d->src->fleet, timeout_ms);
}

/* ---- the rows kept ----------------------------------------------------------- */

static void rows_keep(struct trace_stat_rows *r, int64_t from_ns, int64_t to_ns)
{
	size_t k = 0;
	for (size_t i = 0; i < r->n; i++) {
		if (r->v[i].t_arrive_ns < from_ns || r->v[i].t_arrive_ns >= to_ns) continue;
		if (k != i) r->v[k] = r->v[i];
		k++;
	}
	r->n = k;
}

/* Makes the rows kept those of [from_ns, to_ns) in the store as it is now
 * (one read snapshot); *read: how many it read. */
static int rows_update(struct kt_source *s, int64_t from_ns, int64_t to_ns, long *read)
{
	int64_t last = trace_last_rowid(s->tr);
	size_t kept;
	if (last < s->last_rowid || to_ns <= s->lo_ns || from_ns >= s->hi_ns) {
		/* no overlap, or a store that lost rows (rewritten): read it all */
		s->rows.n = kept = 0;
		s->lo_ns = s->hi_ns = from_ns;
	} else {
		rows_keep(&s->rows, from_ns, to_ns);
		kept = s->rows.n;
		if (s->lo_ns < from_ns) s->lo_ns = from_ns;
		if (s->hi_ns > to_ns) s->hi_ns = to_ns;
		/* rows are only ever added; those of the span held come by rowid */
		if (last > s->last_rowid &&
		    trace_stat_rows_since(s->tr, s->last_rowid, s->lo_ns, s->hi_ns, &s->rows))
			goto fail;
	}
	if ((from_ns < s->lo_ns && trace_stat_rows_fetch(s->tr, from_ns, s->lo_ns, &s->rows)) ||
	    (to_ns > s->hi_ns && trace_stat_rows_fetch(s->tr, s->hi_ns, to_ns, &s->rows)))
		goto fail;
	s->lo_ns = from_ns;
	s->hi_ns = to_ns;
	s->last_rowid = last;
	*read = (long)(s->rows.n - kept);
	return 0;
fail:
	/* what is held is partial: the next frame reads everything again */
	s->rows.n = 0;
	s->lo_ns = s->hi_ns = s->last_rowid = 0;
	return -1;
}

/* ---- one frame ---------------------------------------------------------------- */

static int sample_frame(struct kt_data *d)
{
	struct kt_source *s = d->src;
	d->rows_read = 0;
	d->have_data = trace_span(s->tr, &d->first_ns, &d->last_ns);
	if (!d->have_data) {
		memset(&d->win, 0, sizeof(d->win));
		memset(&d->reuse, 0, sizeof(d->reuse));
		d->have_cost = 0;
		d->have_pd = 0;
		d->culprit = -1;
		d->nreqs = d->ninflight = 0;
		return 0;
	}
	if (d->live) d->to_ns = d->last_ns + 1;
	int64_t from = d->to_ns - d->window_ns;
	/* sparklines cover a minute, or the window when it is longer */
	int64_t span = d->window_ns > 60 * NS_PER_S ? d->window_ns : 60 * NS_PER_S;
	d->spark_from_ns = d->to_ns - span;
	d->spark_to_ns = d->to_ns;
	if (rows_update(s, d->spark_from_ns, d->spark_to_ns, &d->rows_read) ||
	    trace_window_from_rows(s->tr, s->rows.v, s->rows.n, from, d->to_ns, false, &d->win) ||
	    trace_series_from_rows(s->tr, s->rows.v, s->rows.n, d->spark_from_ns, d->spark_to_ns, KT_SPARK,
				   d->spark))
		return -1;
	d->have_cost = s->cost && !trace_cost_window(s->cost, from, d->to_ns, &d->cost) && d->cost.have;
	if (trace_prefix_reuse(s->tr, from, d->to_ns, &d->reuse))
		return -1;
	d->have_pd = s->pd && !trace_disagg_window(s->pd, from, d->to_ns, &d->pd);
	const struct trace_runq_by *who = trace_runq_culprit(&d->win);
	d->culprit = who ? (int)(who - d->win.runq_by) : -1;
	d->from_wall_ns = trace_mono_to_wall(s->tr, from);
	d->to_wall_ns = trace_mono_to_wall(s->tr, d->to_ns);
	d->first_wall_ns = trace_mono_to_wall(s->tr, d->first_ns);
	d->last_wall_ns = trace_mono_to_wall(s->tr, d->last_ns);
	d->ninflight = trace_inflight(s->tr, d->to_ns, d->live, d->reqs, KT_MAX_REQS / 2);
	d->nreqs = d->ninflight + trace_recent(s->tr, d->to_ns, d->reqs + d->ninflight,
					      KT_MAX_REQS - d->ninflight);
	return 0;
}

/* A fleet's frame: the span, then the window's hosts, all on the wall clock;
 * read aside, so that a frame that fails leaves the last one whole. */
static int sample_fleet(struct kt_data *d)
{
	struct kt_source *s = d->src;
	int64_t first, last, to = d->to_ns;
	int rc = fleet_span(s->fleet, &first, &last);
	if (rc < 0) return -1;
	if (d->live) to = rc ? last + 1 : 0;
	if (!rc) memset(s->fw, 0, sizeof(*s->fw));
	else if (fleet_window_read(s->fleet, to - d->window_ns, to, KT_FLEET_LOOKBACK_NS, s->fw)) return -1;
	memcpy(&d->fw, s->fw, sizeof(d->fw));
	d->have_data = rc;
	d->first_ns = d->first_wall_ns = first;
	d->last_ns = d->last_wall_ns = last;
	d->to_ns = d->to_wall_ns = to;
	d->from_wall_ns = to - d->window_ns;
	return 0;
}

int kt_sample(struct kt_data *d)
{
	double t0 = now_ms();
	if (d->fleet) {
		int rc = sample_fleet(d);
		snprintf(d->src->err, sizeof(d->src->err), "%s", rc ? fleet_errmsg(d->src->fleet) : "");
		d->sample_ms = now_ms() - t0;
		return rc;
	}
	/* one snapshot: the rows kept, the samples and the lists agree */
	struct kt_source *s = d->src;
	int rc = trace_read_begin(s->tr) ? -1 : sample_frame(d);
	/* the store's message before ending the snapshot replaces it */
	if (rc) snprintf(s->err, sizeof(s->err), "%s", trace_errmsg(s->tr));
	if (trace_read_end(s->tr) && !rc) {
		snprintf(s->err, sizeof(s->err), "%s", trace_errmsg(s->tr));
		rc = -1;
	}
	d->sample_ms = now_ms() - t0;
	return rc;
}

void kt_hops(struct kt_data *d, const struct trace_req *r)
{
	struct kt_source *s = d->src;

	if (!r) {
		d->nhops = 0;
		d->hops_of[0] = 0;
		snprintf(d->hops_why, sizeof(d->hops_why), "no request selected");
		return;
	}
	if (s->hops_pid == r->pid && s->hops_t == r->t_arrive_ns && d->hops_of[0])
		return;
	snprintf(d->hops_of, sizeof(d->hops_of), "%s", r->id);
	s->hops_pid = r->pid;
	s->hops_t = r->t_arrive_ns;
	d->nhops = 0;
	d->hops_why[0] = 0;
	if (!s->hops && !s->hops_tried) {
		s->hops_tried = 1;
		s->hops = trace_hops_open(s->tr, d->hops_why, sizeof(d->hops_why));
	}
	if (!s->hops) {
		snprintf(d->hops_why, sizeof(d->hops_why), "this trace has no hops (written before schema "
			 "version 8)");
		return;
	}
	int n = trace_hops_of(s->hops, r->pid, r->t_arrive_ns, d->hops, KT_MAX_HOPS);
	if (n < 0)
		snprintf(d->hops_why, sizeof(d->hops_why), "reading its hops failed");
	else if (n == 0)
		snprintf(d->hops_why, sizeof(d->hops_why), "not in a trace of hops yet (in flight, or "
			 "written before the agent followed hops)");
	d->nhops = n > 0 ? n : 0;
}

void kt_tasks(struct kt_data *d)
{
	struct kt_source *s = d->src;

	d->ntasks = 0;
	d->tasks_why[0] = 0;
	if (!s->agents && !s->agents_tried) {
		s->agents_tried = 1;
		s->agents = trace_agents_open(s->tr, d->tasks_why, sizeof(d->tasks_why));
	}
	if (!s->agents) {
		snprintf(d->tasks_why, sizeof(d->tasks_why), "this trace has no tasks (written before schema "
			 "version 11)");
		return;
	}
	int n = trace_agents_tasks(s->agents, d->to_ns, d->tasks, KT_MAX_TASKS);
	if (n < 0)
		snprintf(d->tasks_why, sizeof(d->tasks_why), "reading the tasks failed");
	else if (n == 0)
		snprintf(d->tasks_why, sizeof(d->tasks_why), "no agent task before the window's end (a task: "
			 "an inbound request that made two model calls, or a model and a tool call; "
			 "docs/agent.md, Tasks)");
	d->ntasks = n > 0 ? n : 0;
}

void kt_pods(struct kt_data *d)
{
	struct kt_source *s = d->src;

	d->npods = 0;
	d->pods_why[0] = 0;
	if (!s->pods && !s->pods_tried) {
		s->pods_tried = 1;
		s->pods = trace_pods_open(s->tr, d->pods_why, sizeof(d->pods_why));
	}
	if (!s->pods)
		return;
	int n = trace_pods_window(s->pods, d->to_ns - d->window_ns, d->to_ns, d->pods, KT_MAX_PODS);
	if (n < 0)
		snprintf(d->pods_why, sizeof(d->pods_why), "reading the pods failed");
	else if (n == 0)
		snprintf(d->pods_why, sizeof(d->pods_why), "no request arrived in the window");
	d->npods = n > 0 ? n : 0;
}
