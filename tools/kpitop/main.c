/* main.c - kpitop: live terminal view of every KPI in a kpi-agent trace,
 * htop-style; main loop sample -> draw -> key with timeout; --once prints
 * one frame as text. */
#include "tools/kpitop/kpitop.h"

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
		"Usage: kpitop [--db PATH] [--interval MS] [--window 10s|1m|5m] [--at TIME] [--once]\n"
		"Live view of an LLM server's KPIs from the trace kpi-agent writes.\n\n"
		"  --db PATH        trace store (default %s, or $KPI_DB)\n"
		"  --interval MS    refresh period in milliseconds (default 1000, 50..60000)\n"
		"  --window DUR     statistics window: 10s, 1m, 5m or any duration (default 10s)\n"
		"  --at TIME        replay: the window ends at TIME instead of following the trace;\n"
		"                   TIME is 2026-12-02T10:31:00, 10:31:00 (local), @UNIXSECONDS,\n"
		"                   -90s (before the trace's end), +30s (after its start), start, end\n"
		"  --once           print one frame as plain text and exit (scripts, tests, bug reports)\n"
		"  --width N        columns of the --once frame (default $COLUMNS or 120)\n"
		"  --rows N         request rows of the --once frame (default 20)\n"
		"  --frames N       with --once: compute N frames, print the time per frame to stderr\n"
		"  -h, --help       this help\n\n"
		"Keys: q quit, h/F1 help, s sort, / filter, p pause, 1/2/3 window, arrows scroll,\n"
		"\u2190/\u2192 move the window through time. NO_COLOR=1 for monochrome.\n",
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
	static int idx[KT_MAX_REQS];
	int n = kt_panel_rows(d, v, idx);
	if (v->sel >= n) v->sel = n - 1;
	if (v->sel < 0) v->sel = 0;
	int rows = v->panel_rows > 0 ? v->panel_rows : 1;
	if (v->sel < v->top) v->top = v->sel;
	if (v->sel >= v->top + rows) v->top = v->sel - rows + 1;
	if (v->top < 0) v->top = 0;
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
	case 's': v->sort = (enum kt_sort)((v->sort + 1) % KS_N); return 0;
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
	case KEY_END: v->sel = KT_MAX_REQS; break;
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

static int run_live(struct kt_data *d, struct kt_view *v, int interval_ms)
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
	int quit = 0, rc = 0;
	double next = 0;
	while (!quit && !quit_signal) {
		if (!v->paused && mono_ms() >= next) {
			if (kt_sample(d)) {
				term_restore();
				fprintf(stderr, "kpitop: reading %s failed: %s\n", d->path, trace_errmsg(d->tr));
				rc = 1;
				break;
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
			kt_render(&c, d, v, 0);
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

static int run_once(struct kt_data *d, struct kt_view *v, int width, int rows, int frames)
{
	struct canvas c = { 0 };
	c.utf8 = !strcmp(nl_langinfo(CODESET), "UTF-8");
	int fixed = 0;
	for (int i = 0; i < kt_nwidgets; i++) fixed += kt_widgets[i]->height(width);
	if (canvas_resize(&c, width, fixed + rows + 1)) return 1;
	double *ms = calloc((size_t)(frames > 0 ? frames : 1), sizeof(double));
	int used = 0;
	int64_t to = d->to_ns;
	for (int f = 0; f < (frames > 0 ? frames : 1); f++) {
		double t0 = mono_ms();
		d->to_ns = to;
		if (kt_sample(d)) {
			fprintf(stderr, "kpitop: reading %s failed: %s\n", d->path, trace_errmsg(d->tr));
			free(ms);
			return 1;
		}
		used = kt_render(&c, d, v, 1);
		ms[f] = mono_ms() - t0;
	}
	canvas_print(&c, used);
	printf("window [%lld, %lld) monotonic ns; %d requests in it; frame computed in %.2f ms\n",
	       (long long)d->win.from_ns, (long long)d->win.to_ns, d->win.requests, ms[0]);
	if (frames > 0) {
		/* median and spread of the frame time, for make bench */
		for (int i = 1; i < frames; i++)
			for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) {
				double t = ms[j]; ms[j] = ms[j - 1]; ms[j - 1] = t;
			}
		fprintf(stderr, "frames %d median_ms %.3f p10_ms %.3f p90_ms %.3f max_ms %.3f requests_in_window %d\n",
			frames, ms[frames / 2], ms[frames / 10], ms[frames * 9 / 10], ms[frames - 1], d->win.requests);
	}
	free(ms);
	canvas_free(&c);
	return 0;
}

int main(int argc, char **argv)
{
	setlocale(LC_ALL, "");
	static const struct option opts[] = {
		{ "db", required_argument, 0, 'd' }, { "interval", required_argument, 0, 'i' },
		{ "window", required_argument, 0, 'w' }, { "at", required_argument, 0, 'a' },
		{ "once", no_argument, 0, 'o' }, { "width", required_argument, 0, 'W' },
		{ "rows", required_argument, 0, 'R' }, { "frames", required_argument, 0, 'F' },
		{ "help", no_argument, 0, 'h' }, { 0 },
	};
	const char *db = getenv("KPI_DB") ? getenv("KPI_DB") : TRACE_DEFAULT_DB, *at = NULL;
	int interval = 1000, once = 0, rows = 20, frames = 0, width = 0;
	int64_t window = 10 * NS_PER_S;
	char err[512];
	int o;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		char *end;
		switch (o) {
		case 'd': db = optarg; break;
		case 'i':
			interval = (int)strtol(optarg, &end, 10);
			if (*end || interval < 50 || interval > 60000) {
				fprintf(stderr, "kpitop: --interval '%s': give milliseconds from 50 to 60000\n", optarg);
				return 2;
			}
			break;
		case 'w':
			if (trace_parse_duration(optarg, &window, err, sizeof(err)) || window < NS_PER_S) {
				fprintf(stderr, "kpitop: --window: %s\n",
					window < NS_PER_S ? "the window must be at least 1s" : err);
				return 2;
			}
			break;
		case 'a': at = optarg; break;
		case 'o': once = 1; break;
		case 'W':
			width = (int)strtol(optarg, &end, 10);
			if (*end || width < KT_MIN_W || width > 1000) {
				fprintf(stderr, "kpitop: --width '%s': give columns from %d to 1000\n", optarg, KT_MIN_W);
				return 2;
			}
			break;
		case 'R':
			rows = (int)strtol(optarg, &end, 10);
			if (*end || rows < 0 || rows > KT_MAX_REQS) {
				fprintf(stderr, "kpitop: --rows '%s': give 0 to %d\n", optarg, KT_MAX_REQS);
				return 2;
			}
			break;
		case 'F':
			frames = (int)strtol(optarg, &end, 10);
			if (*end || frames < 1 || frames > 100000) {
				fprintf(stderr, "kpitop: --frames '%s': give 1 to 100000\n", optarg);
				return 2;
			}
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kpitop: unexpected argument '%s' (see kpitop --help)\n", argv[optind]);
		return 2;
	}
	if (frames && !once) {
		fprintf(stderr, "kpitop: --frames goes with --once\n");
		return 2;
	}
	struct kt_data d = { 0 };
	struct kt_view v = { 0 };
	d.path = db;
	d.window_ns = window;
	d.live = 1;
	d.tr = trace_open(db, err, sizeof(err));
	if (!d.tr) {
		fprintf(stderr, "kpitop: %s\n", err);
		return 1;
	}
	if (at) {
		if (trace_parse_time(d.tr, at, &d.to_ns, err, sizeof(err))) {
			fprintf(stderr, "kpitop: --at: %s\n", err);
			trace_close(d.tr);
			return 2;
		}
		d.live = 0;
	}
	int rc;
	if (once) {
		if (!width) {
			const char *cols = getenv("COLUMNS");
			width = cols && atoi(cols) >= KT_MIN_W ? atoi(cols) : 120;
		}
		rc = run_once(&d, &v, width, rows, frames);
	} else {
		if (!isatty(STDOUT_FILENO) || !isatty(STDIN_FILENO)) {
			fprintf(stderr, "kpitop: not a terminal: run it in one, or use --once for text\n");
			trace_close(d.tr);
			return 2;
		}
		struct sigaction sa = { 0 };
		sa.sa_handler = on_signal;  /* no SA_RESTART: getch returns at once */
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
		sigaction(SIGHUP, &sa, NULL);
		sigaction(SIGQUIT, &sa, NULL);
		atexit(term_restore);
		rc = run_live(&d, &v, interval);
	}
	trace_close(d.tr);
	return rc;
}
