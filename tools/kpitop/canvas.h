/* canvas.h - a grid of cells kpitop's widgets draw into; blitted to ncurses
 * for the live screen or printed as plain text for --once, so both paths
 * draw the same frame. */
#ifndef KPITOP_CANVAS_H
#define KPITOP_CANVAS_H

#include <stdint.h>
#include <wchar.h>

enum canvas_color {
	CC_DEFAULT, CC_LABEL, CC_VALUE, CC_GOOD, CC_WARN, CC_BAD, CC_TITLE, CC_SEL, CC_DIM,
	CC_PH0,     /* + phase index: net-in, queue, prefill, decode, net-out */
	CC_N = CC_PH0 + 5
};

enum { CF_BOLD = 1, CF_REVERSE = 2 };

struct cell {
	wchar_t ch;
	uint8_t color, flags;
};

struct canvas {
	int w, h;
	struct cell *cells;
	int utf8;                   /* block glyphs allowed (the locale is UTF-8) */
};

int canvas_resize(struct canvas *c, int w, int h);
void canvas_free(struct canvas *c);
void canvas_clear(struct canvas *c);
/* Puts printf-formatted UTF-8 text at (y, x), clipped at width cols;
 * returns the columns written. */
int canvas_text(struct canvas *c, int y, int x, int width, int color, int flags, const char *fmt, ...)
	__attribute__((format(printf, 7, 8)));
/* Text right-aligned in the columns [x, x + width), by display width. */
int canvas_rtext(struct canvas *c, int y, int x, int width, int color, int flags, const char *s);
void canvas_fill(struct canvas *c, int y, int x, int len, wchar_t ch, int color, int flags);
/* One sparkline of n values scaled to [0, max] at (y, x). */
void canvas_spark(struct canvas *c, int y, int x, const double *v, int n, double max, int color);
/* Prints rows [0, h) as text, trailing blanks trimmed, to stdout. */
void canvas_print(const struct canvas *c, int h);

#endif
