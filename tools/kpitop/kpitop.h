/* kpitop.h - kpitop's data layer (what one frame shows, filled from the
 * trace reader, or for a fleet from ClickHouse), its view state (keys), and
 * its widgets. Widgets read struct kt_data only; they never touch a store. */
#ifndef KPITOP_H
#define KPITOP_H

#include "tools/common/fleet_window.h"
#include "tools/common/timefmt.h"
#include "tools/common/trace.h"
#include "tools/common/trace_agents.h"
#include "tools/common/trace_cost.h"
#include "tools/common/trace_disagg.h"
#include "tools/common/trace_hops.h"
#include "tools/common/trace_pods.h"
#include "tools/common/trace_reuse.h"
#include "tools/kpitop/canvas.h"

#define KT_MAX_REQS 400
#define KT_SPARK 60
#define KT_MAX_HOPS 32
#define KT_MAX_TASKS 200
#define KT_MAX_PODS 100
/* the fleet view lists the hosts with a sample this long before the
 * window's end (an agent writes one a second), even with no request in it */
#define KT_FLEET_LOOKBACK_NS (15 * 60 * NS_PER_S)
#define KT_MAX_ROWS (KT_MAX_REQS > FLEET_MAX_HOSTS ? KT_MAX_REQS : FLEET_MAX_HOSTS)

/* ---- data layer (data.c, the one file that calls tools/common/trace.h) ---- */
struct kt_source;                   /* the open trace and the rows kept between frames */

struct kt_data {
	struct kt_source *src;
	const char *path;
	/* path is a fleet in ClickHouse (clickhouse://...): a frame fills fw
	 * (every host of the window) instead of the trace's fields, and the
	 * times below are all Unix ns */
	int fleet;
	struct fleet_window fw;
	int live;                   /* following the end of the trace */
	int64_t window_ns;
	int64_t to_ns;              /* window end, monotonic ns */
	int64_t first_ns, last_ns;  /* data in the store */
	int have_data;
	/* the same instants on the wall clock (Unix ns), for display */
	int64_t from_wall_ns, to_wall_ns, first_wall_ns, last_wall_ns;
	struct trace_window win;
	int culprit;                /* win.runq_by index of trace_runq_culprit(); -1: none */
	int64_t spark_from_ns, spark_to_ns;
	struct trace_point spark[KT_SPARK];
	struct trace_req reqs[KT_MAX_REQS];
	int nreqs, ninflight;
	/* prefix-cache reuse of a llama.cpp engine's requests in the window
	 * (schema version 7; trace_reuse.h): requests 0 when none */
	struct trace_reuse reuse;
	/* cost and energy over the window (schema version 5; trace_cost.h) */
	int have_cost;
	struct trace_cost_window cost;
	/* disaggregated requests in the window (schema version 10;
	 * trace_disagg.h): have_pd 0 when the trace has no such columns */
	int have_pd;
	struct trace_disagg_window pd;
	double sample_ms;           /* what the last sample took */
	long rows_read;             /* request rows it read from the store */
	/* the hops view: every hop of the selected request's trace (schema
	 * version 8), read when the selection changes; hops_why says why none */
	char hops_of[64];
	struct trace_hop hops[KT_MAX_HOPS];
	int nhops;
	char hops_why[160];
	/* the tasks view: the agent tasks that started before the window's end,
	 * newest first (schema version 11); tasks_why says why none */
	struct trace_task tasks[KT_MAX_TASKS];
	int ntasks;
	char tasks_why[160];
	/* the pods view: the window's requests by pod (schema version 13),
	 * the busiest first; pods_why says why none */
	struct trace_pod pods[KT_MAX_PODS];
	int npods;
	char pods_why[160];
};

/* Opens the trace at path for d (live, the window given), or the fleet when
 * path is clickhouse://HOST[:PORT][/DB]. Returns 0, or -1 with a message
 * that says what to do in err. */
int kt_open(struct kt_data *d, const char *path, int64_t window_ns, char *err, size_t errlen);
void kt_close(struct kt_data *d);
/* A fleet's query may take this long (default 60 s; --once waits longer). */
void kt_set_fleet_timeout(struct kt_data *d, long timeout_ms);
/* The price the cost meter uses instead of the agent's (--price-per-hour).
 * Returns 0, or -1 with err when the trace has no cost tables. */
int kt_set_price(struct kt_data *d, double price_per_hour, char *err, size_t errlen);
/* Replay: the window ends at TIME (--at's forms). Returns 0 or -1 with err. */
int kt_seek(struct kt_data *d, const char *time, char *err, size_t errlen);
/* Reads one frame's data for the window ending at d->to_ns (or at the end of
 * the trace when live). Returns 0, or -1 (kt_errmsg says why). */
int kt_sample(struct kt_data *d);
const char *kt_errmsg(const struct kt_data *d);
/* The hops view's rows for request r (kept until another is asked for). */
void kt_hops(struct kt_data *d, const struct trace_req *r);
/* The tasks view's rows, up to the window's end. */
void kt_tasks(struct kt_data *d);
/* The pods view: d->pods of the window (d->pods_why when none). */
void kt_pods(struct kt_data *d);

/* ---- view state (keys) ------------------------------------------------------ */
enum kt_sort { KS_ARRIVAL, KS_AGE, KS_TTFT, KS_E2E, KS_TPOT, KS_N };
extern const char *const kt_sort_name[KS_N];
/* the fleet view's host rows: worst first, or by name */
enum kt_fleet_sort { KF_TTFT_P99, KF_TTFT_P50, KF_TPOT_P99, KF_RATE, KF_ERRORS, KF_LOST, KF_HOST, KF_N };
extern const char *const kt_fleet_sort_name[KF_N];

struct kt_view {
	int paused, help, editing;
	int hops;                   /* the panel shows the selected request's hops */
	int tasks;                  /* the panel shows the agent tasks */
	int pods;                   /* the panel shows the window's pods */
	enum kt_sort sort;
	enum kt_fleet_sort fleet_sort;
	char filter[64];            /* applied: id or state (a fleet: host) contains it */
	char edit[64];              /* being typed after '/' */
	int sel, top;               /* panel selection and first row shown */
	int panel_rows;             /* rows the panel had in the last frame */
	char message[160];          /* one-shot status line note */
};

/* The panel's rows after filter and sort, as indexes into d->reqs (a
 * fleet: d->fw.host); idx holds KT_MAX_ROWS. */
int kt_panel_rows(const struct kt_data *d, const struct kt_view *v, int *idx);
int kt_fleet_rows(const struct kt_data *d, const struct kt_view *v, int *idx);

/* ---- widgets (widgets.c), as htop's meters ---------------------------------- */
/* An instance: its class, then the class's own state (size bytes in all).
 * fill copies what the widget shows from the data layer into the instance;
 * draw puts the instance on the canvas. */
struct kt_widget;
struct kt_widget_class {
	const char *name;
	size_t size;
	int (*height)(int width);   /* rows wanted; 0 = the rest */
	void (*fill)(struct kt_widget *w, const struct kt_data *d, const struct kt_view *v);
	void (*draw)(const struct kt_widget *w, struct canvas *c, int y, int width, int height);
};
struct kt_widget {
	const struct kt_widget_class *cls;
};

/* The widgets of the screen, top to bottom: a trace's, or a fleet's. */
#define KT_NWIDGETS 9
extern const struct kt_widget_class kt_cost_class;          /* costmeter.c */
extern const struct kt_widget_class kt_pd_class;            /* pdmeter.c */
extern const struct kt_widget_class kt_fleet_meters_class;  /* fleetview.c */
extern const struct kt_widget_class kt_fleet_hosts_class;
struct kt_screen {
	struct kt_widget *w[KT_NWIDGETS];
	int n;
};
int kt_screen_init(struct kt_screen *s, int fleet);
void kt_screen_free(struct kt_screen *s);
/* Rows the widgets of fixed height take at this width. */
int kt_screen_fixed_rows(const struct kt_screen *s, int width);

/* Fills and draws every widget into c (sized to the terminal or to --once's
 * text). Returns the rows used. */
int kt_render(struct kt_screen *s, struct canvas *c, const struct kt_data *d, struct kt_view *v, int once);

#define KT_MIN_W 72
#define KT_MIN_H 20

#endif
