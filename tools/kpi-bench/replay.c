/* replay.c - recorded traffic for --replay: reads a CSV of requests (when
 * each arrived, its prompt and output lengths) into offsets and lengths. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/kpi-bench/bench.h"

#define REPLAY_MAX_COLS 64

/* The columns each input names its three values by, first match wins:
 * kpi-bench's own --csv, a `requests` export of a kpiscope trace
 * (sqlite3 -csv -header trace.db 'SELECT * FROM requests'), or a plain
 * offset_ms,prompt_len,output_len file. ns_abs: absolute nanoseconds, made
 * relative to the first request. */
static const struct {
	const char *name;
	double to_s;
	bool ns_abs;
} offset_cols[] = {
	{ "offset_ms", 1e-3, false },
	{ "t_sent_ms", 1e-3, false },
	{ "t_arrive_ns", 1e-9, true },
	{ "wall_ns", 1e-9, true },
};
static const char *const prompt_cols[] = { "prompt_len", "prompt_tokens" };
static const char *const output_cols[] = { "output_len", "max_tokens", "output_tokens", "completion_tokens" };


/* Splits one CSV line in place (RFC 4180 quotes, "" inside quotes); returns
 * the number of fields. */
static int csv_split(char *line, char **f, int max)
{
	int n = 0;
	char *p = line;
	line[strcspn(line, "\r\n")] = '\0';
	for (;;) {
		if (n == max)
			return n;
		char *out = p;
		f[n++] = out;
		if (*p == '"') {
			p++;
			while (*p && !(*p == '"' && p[1] != '"')) {
				if (*p == '"')
					p++;
				*out++ = *p++;
			}
			if (*p == '"')
				p++;
			while (*p && *p != ',')
				p++;
		} else {
			while (*p && *p != ',')
				*out++ = *p++;
		}
		char sep = *p;
		*out = '\0';
		if (sep != ',')
			return n;
		p++;
	}
}

static int find_col(char **hdr, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(hdr[i], name))
			return i;
	return -1;
}

static int first_col(char **hdr, int n, const char *const *names, size_t n_names)
{
	for (size_t k = 0; k < n_names; k++) {
		int i = find_col(hdr, n, names[k]);
		if (i >= 0)
			return i;
	}
	return -1;
}

struct cols {
	int off, prompt, output;
	double to_s;
	bool ns_abs;
};

static int header_cols(char *line, struct cols *c, struct replay *rp, const char *path,
		       char *err, size_t len)
{
	char *hdr[REPLAY_MAX_COLS];
	int n = csv_split(line, hdr, REPLAY_MAX_COLS);
	c->off = -1;
	for (size_t k = 0; k < sizeof(offset_cols) / sizeof(offset_cols[0]) && c->off < 0; k++) {
		c->off = find_col(hdr, n, offset_cols[k].name);
		c->to_s = offset_cols[k].to_s;
		c->ns_abs = offset_cols[k].ns_abs;
		rp->offset_col = offset_cols[k].name;
	}
	c->prompt = first_col(hdr, n, prompt_cols, 2);
	c->output = first_col(hdr, n, output_cols, 4);
	if (c->off < 0 || c->prompt < 0 || c->output < 0)
		return bench_fail(err, len, "%s: the header names no %s column; expected a kpi-bench --csv, "
			    "a trace's requests table exported with sqlite3 -csv -header, or "
			    "offset_ms,prompt_len,output_len", path,
			    c->off < 0 ? "offset (offset_ms, t_sent_ms, t_arrive_ns or wall_ns)" :
			    c->prompt < 0 ? "prompt length (prompt_len or prompt_tokens)" :
			    "output length (output_len, max_tokens, output_tokens or completion_tokens)");
	return 0;
}

/* A positive whole number, or false (empty: a request that never ran). */
static bool pos_long(const char *s, long *v)
{
	char *end;
	errno = 0;
	double x = strtod(s, &end);
	if (!*s || *end || errno || !(x >= 1) || x > 1e9 || x != floor(x))
		return false;
	*v = (long)x;
	return true;
}

static int push_row(struct replay *rp, size_t *cap, double off, long pl, long ol)
{
	if (rp->n == *cap) {
		*cap = *cap ? *cap * 2 : 256;
		double *o = realloc(rp->offset_s, *cap * sizeof(*o));
		long *p = o ? realloc(rp->prompt_len, *cap * sizeof(*p)) : NULL;
		long *q = p ? realloc(rp->output_len, *cap * sizeof(*q)) : NULL;
		if (o)
			rp->offset_s = o;
		if (p)
			rp->prompt_len = p;
		if (!q)
			return -1;
		rp->output_len = q;
	}
	rp->offset_s[rp->n] = off;
	rp->prompt_len[rp->n] = pl;
	rp->output_len[rp->n] = ol;
	rp->n++;
	return 0;
}

static int read_rows(FILE *f, struct replay *rp, const struct cols *c, const char *path,
		     char *err, size_t len)
{
	char line[8192], *fl[REPLAY_MAX_COLS];
	size_t cap = 0, lineno = 1;
	int need = c->off > c->prompt ? c->off : c->prompt;
	need = (c->output > need ? c->output : need) + 1;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		if (line[strspn(line, " \t\r\n")] == '\0')
			continue;
		int n = csv_split(line, fl, REPLAY_MAX_COLS);
		char *end;
		long pl, ol;
		if (n < need || !*fl[c->off] || !pos_long(fl[c->prompt], &pl) || !pos_long(fl[c->output], &ol)) {
			rp->skipped++;   /* failed or rejected: no time or no lengths */
			continue;
		}
		errno = 0;
		double off = strtod(fl[c->off], &end);
		if (*end || errno || !isfinite(off) || (!c->ns_abs && off < 0))
			return bench_fail(err, len, "%s:%zu: offset '%s' is not a number >= 0", path, lineno, fl[c->off]);
		if (push_row(rp, &cap, off, pl, ol))
			return bench_fail(err, len, "out of memory reading %s", path);
	}
	return 0;
}

static int cmp_row(const void *a, const void *b, void *arg)
{
	const double *off = arg;
	double x = off[*(const size_t *)a], y = off[*(const size_t *)b];
	return (x > y) - (x < y);
}

/* Rows in offset order, offsets in seconds; an absolute clock (ns) counts
 * from the first request. */
static int sort_rows(struct replay *rp, const struct cols *c)
{
	size_t *ix = malloc(rp->n * sizeof(*ix));
	double *o = malloc(rp->n * sizeof(*o));
	long *p = malloc(rp->n * sizeof(*p)), *q = malloc(rp->n * sizeof(*q));
	if (!ix || !o || !p || !q) {
		free(ix), free(o), free(p), free(q);
		return -1;
	}
	for (size_t i = 0; i < rp->n; i++)
		ix[i] = i;
	qsort_r(ix, rp->n, sizeof(*ix), cmp_row, rp->offset_s);
	double base = c->ns_abs ? rp->offset_s[ix[0]] : 0;
	for (size_t i = 0; i < rp->n; i++) {
		o[i] = (rp->offset_s[ix[i]] - base) * c->to_s;
		p[i] = rp->prompt_len[ix[i]];
		q[i] = rp->output_len[ix[i]];
	}
	free(ix);
	free(rp->offset_s), free(rp->prompt_len), free(rp->output_len);
	rp->offset_s = o, rp->prompt_len = p, rp->output_len = q;
	return 0;
}

int replay_load(struct replay *rp, const char *path, char *err, size_t len)
{
	memset(rp, 0, sizeof(*rp));
	FILE *f = fopen(path, "r");
	if (!f)
		return bench_fail(err, len, "cannot open '%s': %s", path, strerror(errno));
	char line[8192];
	struct cols c;
	int rc = -1;
	if (!fgets(line, sizeof(line), f))
		bench_fail(err, len, "%s is empty; expected a CSV with a header line", path);
	else if (!header_cols(line, &c, rp, path, err, len) && !read_rows(f, rp, &c, path, err, len)) {
		if (!rp->n)
			bench_fail(err, len, "%s holds no request with an offset and both lengths "
			     "(%ld rows skipped)", path, rp->skipped);
		else if (sort_rows(rp, &c))
			bench_fail(err, len, "out of memory reading %s", path);
		else
			rc = 0;
	}
	fclose(f);
	if (rc)
		replay_free(rp);
	return rc;
}

void replay_free(struct replay *rp)
{
	free(rp->offset_s);
	free(rp->prompt_len);
	free(rp->output_len);
	rp->offset_s = NULL;
	rp->prompt_len = rp->output_len = NULL;
	rp->n = 0;
}
