/* main.c - kpitop: live terminal view of every KPI in a kpi-agent trace (or
 * of every host of a fleet in ClickHouse), htop-style; main loop sample ->
 * draw -> key with timeout; --once prints one frame as text. */
#include "tools/kpitop/kpitop.h"
#include "kpi_version.h"

#include <getopt.h>
#include <langinfo.h>
#include <locale.h>
#include <math.h>
#include <ncurses.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t quit_signal;
static int curses_on;

static void on_signal(int sig) { quit_signal = sig; }

/* atexit and every return path: the terminal comes back as it was */
static void term_restore(void)
{
	if (curses_on) {
		curses_on = 0;
		endwin();
	}
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: kpitop [--db PATH|clickhouse://HOST[:PORT][/DB]] [--interval MS] [--window 10s|1m|5m]\n"
		"              [--at TIME] [--once]\n"
		"Live view of an LLM server's KPIs from the trace kpi-agent writes, or of a fleet's hosts\n"
		"from the ClickHouse kpi-ship fills.\n\n"
		"  --db PATH        trace store (default %s, or $KPI_DB)\n"
		"  --db clickhouse://HOST[:PORT][/DB]\n"
		"                   the fleet view: one row per host (req/s, p50/p99 TTFT and TPOT,\n"
		"                   errors, losses), computed by ClickHouse; TIME is on the wall clock\n"
		"  --interval MS    refresh period in milliseconds (default 1000, 50..60000)\n"
		"  --window DUR     statistics window: 10s, 1m, 5m or any duration (default 10s)\n"
		"  --at TIME        replay: the window ends at TIME instead of following the trace;\n"
		"                   TIME is 2026-12-02T10:31:00, 10:31:00 (local), @UNIXSECONDS,\n"
		"                   -90s (before the trace's end), +30s (after its start), start, end\n"
		"  --once           print one frame as plain text and exit (scripts, tests, bug reports)\n"
		"  --width N        columns of the --once frame (default $COLUMNS or 120)\n"
		"  --rows N         request rows of the --once frame (default 20)\n"
		"  --frames N       with --once: compute N frames, print the time per frame to stderr;\n"
		"                   with --at, each frame moves the window on by --interval\n"
		"  --price-per-hour USD\n"
		"                   the machine's price for the cost meter (default: the agent's\n"
		"                   --price-per-hour, from the trace); docs/cost.md\n"
		"  --hops ID        with --once: the panel shows the hops of the first request whose\n"
		"                   id contains ID (as the t key does for the selected one)\n"
		"  --tasks          with --once: the panel shows the agent tasks (as the a key does)\n"
		"  --pods           with --once: the panel shows the window's requests by pod (as the g\n"
		"                   key does): requests, errors, 429s, p50/p99 TTFT, p99 TPOT\n"
		"  -h, --help       this help\n"
		"  --version        the version and the git commit it was built from\n\n"
		"Keys: q quit, h/F1 help, s sort, / filter, p pause, 1/2/3 window, arrows scroll,\n"
		"\u2190/\u2192 move the window through time, t/Enter the selected request's hops,\n"
		"a the agent tasks, g the pods (Esc back). NO_COLOR=1 for monochrome.\n",
		TRACE_DEFAULT_DB);
}

/* ---- ncurses -------------------------------------------------------------- */
static int has_color;
static attr_t color_attr[CC_N];

static void colors_init(void)
{
	has_color = has_colors() && !getenv("NO_COLOR");
	if (has_color) {
		start_color();
		use_default_colors();
		static const short fg[CC_N] = {
			[CC_DEFAULT] = -1, [CC_LABEL] = COLOR_CYAN, [CC_VALUE] = -1, [CC_GOOD] = COLOR_GREEN,
			[CC_WARN] = COLOR_YELLOW, [CC_BAD] = COLOR_RED, [CC_TITLE] = COLOR_CYAN, [CC_SEL] = COLOR_CYAN,
			[CC_DIM] = -1, [CC_PH0 + PH_NET_IN] = COLOR_BLUE, [CC_PH0 + PH_QUEUE] = COLOR_YELLOW,
			[CC_PH0 + PH_PREFILL] = COLOR_MAGENTA, [CC_PH0 + PH_DECODE] = COLOR_GREEN,
			[CC_PH0 + PH_NET_OUT] = COLOR_CYAN,
		};
		for (int i = 1; i < CC_N; i++) {
			init_pair((short)i, fg[i], -1);
			color_attr[i] = COLOR_PAIR(i);
		}
		color_attr[CC_DIM] |= A_DIM;
	} else {
		/* monochrome: meaning through attributes; phases keep their letters */
		color_attr[CC_BAD] = A_BOLD | A_UNDERLINE;
		color_attr[CC_WARN] = A_BOLD;
		color_attr[CC_DIM] = A_DIM;
	}
}

static void blit(const struct canvas *c)
{
	for (int y = 0; y < c->h; y++) {
		int x = 0;
		while (x < c->w) {
			const struct cell *s = &c->cells[y * c->w + x];
			int n = 1;
			while (x + n < c->w && c->cells[y * c->w + x + n].color == s->color &&
			       c->cells[y * c->w + x + n].flags == s->flags)
				n++;
			wchar_t run[1024];
			int k = n < 1023 ? n : 1023;
			for (int i = 0; i < k; i++) run[i] = c->cells[y * c->w + x + i].ch;
			run[k] = 0;
			attr_t a = color_attr[s->color];
			if (s->flags & CF_BOLD) a |= A_BOLD;
			if (s->flags & CF_REVERSE) a |= A_REVERSE;
			attrset(a);
			/* the last cell of the screen would scroll it: leave it */
			if (y == c->h - 1 && x + k >= c->w) k = c->w - x - 1;
			if (k > 0) mvaddnwstr(y, x, run, k);
			x += n;
		}
	}
	attrset(A_NORMAL);
}

/* ---- keys ------------------------------------------------------------------- */
static void clamp_sel(struct kt_data *d, struct kt_view *v)
{
	int idx[KT_MAX_ROWS];
	int n = d->fleet ? kt_fleet_rows(d, v, idx) : kt_panel_rows(d, v, idx);
	if (v->sel >= n) v->sel = n - 1;
	if (v->sel < 0) v->sel = 0;
	int rows = v->panel_rows > 0 ? v->panel_rows : 1;
	if (v->sel < v->top) v->top = v->sel;
	if (v->sel >= v->top + rows) v->top = v->sel - rows + 1;
	if (v->top < 0) v->top = 0;
}

/* The panel's views read what they show, only while they show: the selected
 * request's hops, the tasks, the pods. */
static void views_read(struct kt_data *d, const struct kt_view *v)
{
	int idx[KT_MAX_REQS];

	if (d->fleet)
		return;
	if (v->hops) {
		int n = kt_panel_rows(d, v, idx);
		kt_hops(d, n && v->sel < n ? &d->reqs[idx[v->sel]] : NULL);
	}
	if (v->tasks)
		kt_tasks(d);
	if (v->pods)
		kt_pods(d);
}

/* Returns 1 when the data must be sampled again. */
static int on_key(int ch, struct kt_data *d, struct kt_view *v, int *quit)
{
	v->message[0] = 0;
	if (v->help) {
		v->help = 0;
		return 0;
	}
	if (v->editing) {
		size_t n = strlen(v->edit);
		if (ch == '\n' || ch == KEY_ENTER || ch == '\r') {
			snprintf(v->filter, sizeof(v->filter), "%s", v->edit);
			v->editing = 0;
			v->sel = v->top = 0;
		} else if (ch == 27) {
			v->filter[0] = v->edit[0] = 0;
			v->editing = 0;
		} else if ((ch == KEY_BACKSPACE || ch == 127 || ch == 8) && n) {
			v->edit[n - 1] = 0;
		} else if (ch >= 32 && ch < 127 && n + 1 < sizeof(v->edit)) {
			v->edit[n] = (char)ch;
			v->edit[n + 1] = 0;
		}
		return 0;
	}
	int64_t step = d->window_ns;
	switch (ch) {
	case 'q': case 'Q': case KEY_F(10): *quit = 1; return 0;
	case 'h': case '?': case KEY_F(1): v->help = 1; return 0;
	case 's':
		if (d->fleet) v->fleet_sort = (enum kt_fleet_sort)((v->fleet_sort + 1) % KF_N);
		else v->sort = (enum kt_sort)((v->sort + 1) % KS_N);
		return 0;
	case 't': case '\n': case '\r': case KEY_ENTER: case 'a': case 'g':
		if (d->fleet) {
			snprintf(v->message, sizeof(v->message), "a host's requests, hops, tasks and pods: kpitop --db "
				 "its trace, on that host");
			return 0;
		}
		if (ch == 'a' || ch == 'g') {
			int *view = ch == 'a' ? &v->tasks : &v->pods;
			int on = !*view;
			v->tasks = v->pods = v->hops = 0;
			*view = on;
			return on;     /* read at once */
		}
		v->hops = ch == 't' ? !v->hops : 1;
		v->tasks = v->pods = 0;
		return 0;
	case 27: v->hops = v->tasks = v->pods = 0; return 0;
	case '/': v->editing = 1; snprintf(v->edit, sizeof(v->edit), "%s", v->filter); return 0;
	case 'p': case ' ': v->paused = !v->paused; return !v->paused;
	case '1': d->window_ns = 10 * NS_PER_S; return 1;
	case '2': d->window_ns = 60 * NS_PER_S; return 1;
	case '3': d->window_ns = 300 * NS_PER_S; return 1;
	case KEY_UP: v->sel--; break;
	case KEY_DOWN: v->sel++; break;
	case KEY_PPAGE: v->sel -= v->panel_rows; break;
	case KEY_NPAGE: v->sel += v->panel_rows; break;
	case KEY_HOME: v->sel = 0; break;
	case KEY_END: v->sel = KT_MAX_ROWS; break;
	case KEY_LEFT:
		if (!d->have_data) return 0;
		if (d->live) d->live = 0;
		d->to_ns -= step;
		if (d->to_ns < d->first_ns + 1) {
			d->to_ns = d->first_ns + 1;
			snprintf(v->message, sizeof(v->message), "at the start of the trace");
		}
		return 1;
	case KEY_RIGHT:
		if (d->live || !d->have_data) return 0;
		d->to_ns += step;
		if (d->to_ns > d->last_ns + 1) {
			d->live = 1;
			snprintf(v->message, sizeof(v->message), "back to live");
		}
		return 1;
	case KEY_RESIZE: return 0;
	default: return 0;
	}
	clamp_sel(d, v);
	return 0;
}

static double mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int run_live(struct kt_screen *s, struct kt_data *d, struct kt_view *v, int interval_ms)
{
	struct canvas c = { 0 };
	c.utf8 = !strcmp(nl_langinfo(CODESET), "UTF-8");
	if (!initscr()) {
		fprintf(stderr, "kpitop: cannot initialise the terminal (TERM=%s): set TERM or use --once\n",
			getenv("TERM") ? getenv("TERM") : "");
		return 1;
	}
	curses_on = 1;
	cbreak();
	noecho();
	keypad(stdscr, TRUE);
	curs_set(0);
	set_escdelay(25);
	colors_init();
	int quit = 0, rc = 0, fleet_failing = 0;
	double next = 0;
	while (!quit && !quit_signal) {
		if (!v->paused && mono_ms() >= next) {
			if (kt_sample(d) && !d->fleet) {
				term_restore();
				fprintf(stderr, "kpitop: reading %s failed: %s\n", d->path, kt_errmsg(d));
				rc = 1;
				break;
			} else if (d->fleet && kt_errmsg(d)[0]) {
				/* a fleet's server may restart: the last frame stays, and the next try is an interval on */
				snprintf(v->message, sizeof(v->message), "showing the last frame, trying again: %s",
					 kt_errmsg(d));
				fleet_failing = 1;
			} else if (fleet_failing) {
				v->message[0] = 0;
				fleet_failing = 0;
			}
			next = mono_ms() + interval_ms;
		}
		int w = COLS, h = LINES;
		erase();
		if (w < KT_MIN_W || h < KT_MIN_H) {
			mvprintw(0, 0, "Terminal too small (%dx%d):", w, h);
			mvprintw(1, 0, "kpitop needs %dx%d. Enlarge it, or q to quit.", KT_MIN_W, KT_MIN_H);
		} else {
			if (canvas_resize(&c, w, h)) break;
			clamp_sel(d, v);
			views_read(d, v);
			kt_render(s, &c, d, v, 0);
			blit(&c);
		}
		refresh();
		int wait = v->paused ? 1000 : (int)(next - mono_ms());
		timeout(wait < 10 ? 10 : wait);
		int ch = getch();
		if (ch == ERR) continue;
		if (on_key(ch, d, v, &quit)) next = 0;
	}
	term_restore();
	canvas_free(&c);
	return rc;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* --frames: the first frame (it reads the whole span) apart, then median
 * and spread of the others, which read only what changed; for make bench. */
static void print_frame_times(double *ms, int frames, int requests)
{
	double first = ms[0];
	double *rest = frames > 1 ? ms + 1 : ms;
	int n = frames > 1 ? frames - 1 : 1;
	qsort(rest, (size_t)n, sizeof(*rest), cmp_double);
	fprintf(stderr, "frames %d first_ms %.3f median_ms %.3f p10_ms %.3f p90_ms %.3f max_ms %.3f "
		"requests_in_window %d\n", frames, first, rest[n / 2], rest[n / 10], rest[n * 9 / 10], rest[n - 1],
		requests);
}

/* One frame as text; with frames, that many, each (in replay) step_ns on
 * from the one before, as the live view follows a growing trace. */
static int run_once(struct kt_screen *s, struct kt_data *d, struct kt_view *v, int width, int rows, int frames,
		    int64_t step_ns)
{
	struct canvas c = { 0 };
	c.utf8 = !strcmp(nl_langinfo(CODESET), "UTF-8");
	int n = frames > 0 ? frames : 1, used = 0, rc = 1;
	double *ms = calloc((size_t)n, sizeof(double));
	if (!ms || canvas_resize(&c, width, kt_screen_fixed_rows(s, width) + rows + 1)) {
		fprintf(stderr, "kpitop: out of memory\n");
		goto out;
	}
	int64_t to = d->to_ns;
	for (int f = 0; f < n; f++) {
		double t0 = mono_ms();
		d->to_ns = to + f * step_ns;
		if (kt_sample(d)) {
			fprintf(stderr, "kpitop: reading %s failed: %s\n", d->path, kt_errmsg(d));
			goto out;
		}
		views_read(d, v);
		used = kt_render(s, &c, d, v, 1);
		ms[f] = mono_ms() - t0;
	}
	canvas_print(&c, used);
	if (d->fleet)
		printf("window [%lld, %lld) wall ns; %d hosts, %d requests in it; frame computed in %.2f ms; %s\n",
		       (long long)d->fw.from_wall_ns, (long long)d->fw.to_wall_ns, d->fw.n_hosts + d->fw.more_hosts,
		       d->fw.all.requests, ms[0], d->fw.from_buckets ? "percentiles from per-minute buckets, within 1 % "
		       "of the exact ones" : "percentiles exact");
	else
		printf("window [%lld, %lld) monotonic ns; %d requests in it; frame computed in %.2f ms\n",
		       (long long)d->win.from_ns, (long long)d->win.to_ns, d->win.requests, ms[0]);
	if (frames > 0) print_frame_times(ms, frames, d->fleet ? d->fw.all.requests : d->win.requests);
	rc = 0;
out:
	free(ms);
	canvas_free(&c);
	return rc;
}

/* ---- command line ------------------------------------------------------------ */
struct kt_opts {
	const char *db, *at, *hops;
	int interval, once, rows, frames, width, tasks, pods;
	int64_t window;
	double price;               /* --price-per-hour; < 0: the agent's */
};

/* A whole number in [lo, hi] from s, or -1. */
static int int_arg(const char *s, int lo, int hi, int *out)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (end == s || *end || v < lo || v > hi) return -1;
	*out = (int)v;
	return 0;
}

/* Returns -1 to go on, or the exit status (help printed, or a bad flag said). */
static int parse_args(int argc, char **argv, struct kt_opts *o)
{
	static const struct option opts[] = {
		{ "db", required_argument, 0, 'd' }, { "interval", required_argument, 0, 'i' },
		{ "window", required_argument, 0, 'w' }, { "at", required_argument, 0, 'a' },
		{ "once", no_argument, 0, 'o' }, { "width", required_argument, 0, 'W' },
		{ "rows", required_argument, 0, 'R' }, { "frames", required_argument, 0, 'F' },
		{ "price-per-hour", required_argument, 0, 'P' }, { "hops", required_argument, 0, 'H' },
		{ "tasks", no_argument, 0, 'K' }, { "pods", no_argument, 0, 'G' },
		{ "help", no_argument, 0, 'h' }, { "version", no_argument, 0, 'V' }, { 0 },
	};
	char err[512], *end;
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': o->db = optarg; break;
		case 'a': o->at = optarg; break;
		case 'o': o->once = 1; break;
		case 'H': o->hops = optarg; break;
		case 'K': o->tasks = 1; break;
		case 'G': o->pods = 1; break;
		case 'i':
			if (!int_arg(optarg, 50, 60000, &o->interval)) break;
			fprintf(stderr, "kpitop: --interval '%s': give milliseconds from 50 to 60000\n", optarg);
			return 2;
		case 'w':
			if (!timefmt_parse_duration(optarg, &o->window, err, sizeof(err)) && o->window >= NS_PER_S) break;
			fprintf(stderr, "kpitop: --window: %s\n", o->window < NS_PER_S ? "the window must be at least 1s" : err);
			return 2;
		case 'W':
			if (!int_arg(optarg, KT_MIN_W, 1000, &o->width)) break;
			fprintf(stderr, "kpitop: --width '%s': give columns from %d to 1000\n", optarg, KT_MIN_W);
			return 2;
		case 'R':
			if (!int_arg(optarg, 0, KT_MAX_REQS, &o->rows)) break;
			fprintf(stderr, "kpitop: --rows '%s': give 0 to %d\n", optarg, KT_MAX_REQS);
			return 2;
		case 'F':
			if (!int_arg(optarg, 1, 100000, &o->frames)) break;
			fprintf(stderr, "kpitop: --frames '%s': give 1 to 100000\n", optarg);
			return 2;
		case 'P':
			o->price = strtod(optarg, &end);
			if (end != optarg && !*end && o->price >= 0) break;
			fprintf(stderr, "kpitop: --price-per-hour '%s': give a price in USD, e.g. 2.5\n", optarg);
			return 2;
		case 'h': usage(stdout); return 0;
		case 'V': printf("kpitop %s\n", KPI_VERSION_STRING); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kpitop: unexpected argument '%s' (see kpitop --help)\n", argv[optind]);
		return 2;
	}
	if ((o->frames || o->hops || o->tasks || o->pods) && !o->once) {
		fprintf(stderr, "kpitop: --%s goes with --once\n",
			o->frames ? "frames" : o->hops ? "hops" : o->tasks ? "tasks" : "pods");
		return 2;
	}
	if (!!o->hops + o->tasks + o->pods > 1) {
		fprintf(stderr, "kpitop: --hops, --tasks and --pods each choose what the panel shows: give one\n");
		return 2;
	}
	return -1;
}

/* The interactive screen, in a terminal only; the signals end it cleanly. */
static int start_live(struct kt_screen *s, struct kt_data *d, struct kt_view *v, int interval_ms)
{
	if (!isatty(STDOUT_FILENO) || !isatty(STDIN_FILENO)) {
		fprintf(stderr, "kpitop: not a terminal: run it in one, or use --once for text\n");
		return 2;
	}
	struct sigaction sa = { 0 };
	sa.sa_handler = on_signal;  /* no SA_RESTART: getch returns at once */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGQUIT, &sa, NULL);
	atexit(term_restore);
	return run_live(s, d, v, interval_ms);
}

int main(int argc, char **argv)
{
	setlocale(LC_ALL, "");
	struct kt_opts o = {
		.db = getenv("KPI_DB") ? getenv("KPI_DB") : TRACE_DEFAULT_DB,
		.interval = 1000, .rows = 20, .window = 10 * NS_PER_S, .price = -1,
	};
	int rc = parse_args(argc, argv, &o);
	if (rc >= 0) return rc;
	char err[512];
	struct kt_data d;
	struct kt_view v = { 0 };
	struct kt_screen screen;
	if (kt_open(&d, o.db, o.window, err, sizeof(err))) {
		fprintf(stderr, "kpitop: %s\n", err);
		return 1;
	}
	if (d.fleet && o.hops) {
		fprintf(stderr, "kpitop: --hops reads one host's trace (--db PATH), not the fleet's ClickHouse\n");
		kt_close(&d);
		return 2;
	}
	if (o.price >= 0 && kt_set_price(&d, o.price, err, sizeof(err)))
		fprintf(stderr, "kpitop: --price-per-hour: %s\n", err);  /* the meter says what it lacks */
	if (o.at && kt_seek(&d, o.at, err, sizeof(err))) {
		fprintf(stderr, "kpitop: --at: %s\n", err);
		kt_close(&d);
		return 2;
	}
	if (kt_screen_init(&screen, d.fleet)) {
		fprintf(stderr, "kpitop: out of memory\n");
		kt_close(&d);
		return 1;
	}
	if (o.once) {
		const char *cols = getenv("COLUMNS");
		/* one frame of a large fleet window may take ClickHouse minutes */
		kt_set_fleet_timeout(&d, 600000);
		int width = o.width ? o.width : cols && atoi(cols) >= KT_MIN_W ? atoi(cols) : 120;
		if (o.hops) {
			snprintf(v.filter, sizeof(v.filter), "%s", o.hops);
			v.hops = 1;
		}
		v.tasks = o.tasks;
		v.pods = o.pods;
		rc = run_once(&screen, &d, &v, width, o.rows, o.frames, d.live ? 0 : o.interval * NS_PER_MS);
	} else {
		rc = start_live(&screen, &d, &v, o.interval);
	}
	kt_screen_free(&screen);
	kt_close(&d);
	return rc;
}
