/* kpitop.h - kpitop's data layer (what one frame shows, filled from the
 * trace reader), its view state (keys), and the widget table. Widgets read
 * struct kt_data only; they never touch the store. */
#ifndef KPITOP_H
#define KPITOP_H

#include "tools/common/trace.h"
#include "tools/kpitop/canvas.h"

#define KT_MAX_REQS 400
#define KT_SPARK 60

struct kt_data {
	struct trace *tr;
	const char *path;
	int live;                   /* following the end of the trace */
	int64_t window_ns;
	int64_t to_ns;              /* window end, monotonic ns */
	int64_t first_ns, last_ns;  /* data in the store */
	int have_data;
	struct trace_window win;
	int64_t spark_from_ns, spark_to_ns;
	struct trace_point spark[KT_SPARK];
	struct trace_req reqs[KT_MAX_REQS];
	int nreqs, ninflight;
	double sample_ms;           /* what the last sample took */
};

/* Reads one frame's data for the window ending at d->to_ns (or at the end of
 * the trace when live). Returns 0, or -1 with the store's error. */
int kt_sample(struct kt_data *d);

enum kt_sort { KS_ARRIVAL, KS_AGE, KS_TTFT, KS_E2E, KS_TPOT, KS_N };
extern const char *const kt_sort_name[KS_N];

struct kt_view {
	int paused, help, editing;
	enum kt_sort sort;
	char filter[64];            /* applied: id or state contains it */
	char edit[64];              /* being typed after '/' */
	int sel, top;               /* panel selection and first row shown */
	int panel_rows;             /* rows the panel had in the last frame */
	char message[160];          /* one-shot status line note */
};

struct kt_widget {
	const char *name;
	int (*height)(int width);   /* rows wanted; 0 = the rest */
	void (*fill)(const struct kt_data *d, const struct kt_view *v);
	void (*draw)(struct canvas *c, int y, int width, int height);
};

extern const struct kt_widget *const kt_widgets[];
extern const int kt_nwidgets;

/* Draws the whole frame into c (sized to the terminal or to --once's text).
 * Returns the rows used. */
int kt_render(struct canvas *c, const struct kt_data *d, struct kt_view *v, int once);

/* The panel's rows after filter and sort, as indexes into d->reqs. */
int kt_panel_rows(const struct kt_data *d, const struct kt_view *v, int *idx);

#define KT_MIN_W 72
#define KT_MIN_H 20

#endif
