/* canvas.c - cell grid drawing and the plain-text printer of --once. */
#include "tools/kpitop/canvas.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int canvas_resize(struct canvas *c, int w, int h)
{
	if (w < 1) w = 1;
	if (h < 1) h = 1;
	if (w * h > c->w * c->h || !c->cells) {
		struct cell *n = realloc(c->cells, sizeof(*n) * (size_t)w * (size_t)h);
		if (!n) return -1;
		c->cells = n;
	}
	c->w = w;
	c->h = h;
	canvas_clear(c);
	return 0;
}

void canvas_free(struct canvas *c)
{
	free(c->cells);
	c->cells = NULL;
	c->w = c->h = 0;
}

void canvas_clear(struct canvas *c)
{
	for (int i = 0; i < c->w * c->h; i++) c->cells[i] = (struct cell){ L' ', CC_DEFAULT, 0 };
}

void canvas_fill(struct canvas *c, int y, int x, int len, wchar_t ch, int color, int flags)
{
	if (y < 0 || y >= c->h) return;
	for (int i = 0; i < len; i++)
		if (x + i >= 0 && x + i < c->w)
			c->cells[y * c->w + x + i] = (struct cell){ ch, (uint8_t)color, (uint8_t)flags };
}

int canvas_text(struct canvas *c, int y, int x, int width, int color, int flags, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (y < 0 || y >= c->h) return 0;
	if (width < 0 || x + width > c->w) width = c->w - x;
	mbstate_t st;
	memset(&st, 0, sizeof(st));
	const char *s = buf;
	int col = 0;
	while (*s && col < width) {
		wchar_t wc;
		size_t k = mbrtowc(&wc, s, strlen(s), &st);
		if (k == (size_t)-1 || k == (size_t)-2) {
			/* not valid in this locale: show a placeholder, move on a byte */
			wc = L'?';
			k = 1;
			memset(&st, 0, sizeof(st));
		}
		if (k == 0) break;
		s += k;
		if (x + col >= 0) c->cells[y * c->w + x + col] = (struct cell){ wc, (uint8_t)color, (uint8_t)flags };
		col++;
	}
	return col;
}

int canvas_rtext(struct canvas *c, int y, int x, int width, int color, int flags, const char *s)
{
	size_t cols = mbstowcs(NULL, s, 0);
	if (cols == (size_t)-1) cols = strlen(s);
	int pad = width - (int)cols;
	if (pad < 0) pad = 0;
	return pad + canvas_text(c, y, x + pad, width - pad, color, flags, "%s", s);
}

void canvas_spark(struct canvas *c, int y, int x, const double *v, int n, double max, int color)
{
	static const wchar_t blocks[] = L"▁▂▃▄▅▆▇█";
	static const wchar_t ascii[] = L"_.,-=+*#";
	const wchar_t *g = c->utf8 ? blocks : ascii;
	for (int i = 0; i < n; i++) {
		int lvl = 0;
		if (max > 0 && v[i] > 0) {
			lvl = (int)(v[i] / max * 7.999);
			if (lvl > 7) lvl = 7;
			if (lvl < 0) lvl = 0;
		}
		canvas_fill(c, y, x + i, 1, v[i] > 0 || !c->utf8 ? g[lvl] : L' ', color, 0);
		if (v[i] <= 0 && c->utf8) canvas_fill(c, y, x + i, 1, g[0], CC_DIM, 0);
	}
}

void canvas_print(const struct canvas *c, int h)
{
	char out[16];
	if (h > c->h) h = c->h;
	/* trailing blank rows are not part of the frame */
	while (h > 0) {
		int blank = 1;
		for (int x = 0; x < c->w && blank; x++) blank = c->cells[(h - 1) * c->w + x].ch == L' ';
		if (!blank) break;
		h--;
	}
	for (int y = 0; y < h; y++) {
		int last = c->w - 1;
		while (last >= 0 && c->cells[y * c->w + last].ch == L' ') last--;
		for (int x = 0; x <= last; x++) {
			mbstate_t st;
			memset(&st, 0, sizeof(st));
			size_t k = wcrtomb(out, c->cells[y * c->w + x].ch, &st);
			if (k == (size_t)-1) {
				putchar('?');
				continue;
			}
			fwrite(out, 1, k, stdout);
		}
		putchar('\n');
	}
}
