/* timefmt.c - parsing and printing of durations and instants for the tools'
 * flags and cells; local time through the C library (TZ), no trace needed. */
#include "tools/common/timefmt.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int timefmt_parse_duration(const char *s, int64_t *ns, char *err, size_t errlen)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || errno || !(v >= 0)) goto bad;
	double mul = NS_PER_S;
	if (!*end || !strcmp(end, "s")) mul = NS_PER_S;
	else if (!strcmp(end, "ms")) mul = NS_PER_MS;
	else if (!strcmp(end, "us") || !strcmp(end, "µs")) mul = 1e3;
	else if (!strcmp(end, "m") || !strcmp(end, "min")) mul = 60.0 * NS_PER_S;
	else if (!strcmp(end, "h")) mul = 3600.0 * NS_PER_S;
	else goto bad;
	*ns = (int64_t)(v * mul);
	return 0;
bad:
	snprintf(err, errlen, "'%s' is not a duration: use a number with s, ms, m or h (10s, 1m, 500ms)", s);
	return -1;
}

/* The ".25" after whole seconds, in ns; rest moves past it. */
static int64_t frac_ns(const char **rest)
{
	if (**rest != '.') return 0;
	char *end;
	double frac = strtod(*rest, &end);
	*rest = end;
	return (int64_t)(frac * 1e9);
}

/* Dates and times of day, both local time. */
static int parse_clock(const char *s, struct timefmt_point *p)
{
	struct tm tm;
	memset(&tm, 0, sizeof(tm));
	const char *rest;
	if ((rest = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm)) || (rest = strptime(s, "%Y-%m-%d %H:%M:%S", &tm))) {
		int64_t frac = frac_ns(&rest);
		if (*rest) return -1;
		tm.tm_isdst = -1;
		time_t secs = mktime(&tm);
		if (secs == (time_t)-1) return -1;
		p->anchor = TF_WALL;
		p->ns = (int64_t)secs * NS_PER_S + frac;
		return 0;
	}
	if ((rest = strptime(s, "%H:%M:%S", &tm))) {
		int64_t frac = frac_ns(&rest);
		if (*rest) return -1;
		p->anchor = TF_TIME_OF_DAY;
		p->ns = ((int64_t)tm.tm_hour * 3600 + tm.tm_min * 60 + tm.tm_sec) * NS_PER_S + frac;
		return 0;
	}
	return -1;
}

int timefmt_parse_point(const char *s, struct timefmt_point *p, char *err, size_t errlen)
{
	char sub[128];
	p->ns = 0;
	if (!strcmp(s, "end") || !strcmp(s, "now") || !strcmp(s, "start")) {
		p->anchor = !strcmp(s, "start") ? TF_START : TF_END;
		return 0;
	}
	if (s[0] == '-' || s[0] == '+') {
		if (timefmt_parse_duration(s + 1, &p->ns, sub, sizeof(sub))) {
			snprintf(err, errlen, "time '%s': %s", s, sub);
			return -1;
		}
		p->anchor = s[0] == '-' ? TF_END : TF_START;
		if (s[0] == '-') p->ns = -p->ns;
		return 0;
	}
	if (s[0] == '@') {
		char *end;
		double sec = strtod(s + 1, &end);
		if (end != s + 1 && !*end) {
			p->anchor = TF_WALL;
			p->ns = (int64_t)(sec * 1e9);
			return 0;
		}
	} else if (!parse_clock(s, p)) {
		return 0;
	}
	snprintf(err, errlen, "'%s' is not a time: use 2026-12-02T10:31:00, 10:31:00 (local time), "
		 "@UNIXSECONDS, -90s (before the trace's end), +30s (after its start), start or end", s);
	return -1;
}

int64_t timefmt_on_day(int64_t day_wall_ns, int64_t time_of_day_ns)
{
	/* through the calendar, not by adding ns to midnight: a day with a DST
	 * change is not 24 hours long */
	time_t day_s = (time_t)(day_wall_ns / NS_PER_S);
	struct tm tm;
	localtime_r(&day_s, &tm);
	int64_t secs = time_of_day_ns / NS_PER_S;
	tm.tm_hour = (int)(secs / 3600);
	tm.tm_min = (int)(secs / 60 % 60);
	tm.tm_sec = (int)(secs % 60);
	tm.tm_isdst = -1;
	time_t t = mktime(&tm);
	if (t == (time_t)-1) return -1;
	return (int64_t)t * NS_PER_S + time_of_day_ns % NS_PER_S;
}

char *timefmt_dur(char *buf, size_t n, double ns)
{
	if (ns < 0 || isnan(ns)) snprintf(buf, n, "-");
	else if (ns < 1e3) snprintf(buf, n, "%.0fns", ns);
	else if (ns < 1e6) snprintf(buf, n, "%.0fµs", ns / 1e3);
	else if (ns < 1e7) snprintf(buf, n, "%.2fms", ns / 1e6);
	else if (ns < 1e9) snprintf(buf, n, "%.1fms", ns / 1e6);
	else if (ns < 60e9 && fmod(ns, 1e9) == 0) snprintf(buf, n, "%.0fs", ns / 1e9);
	else if (ns < 60e9) snprintf(buf, n, "%.2fs", ns / 1e9);
	else snprintf(buf, n, "%dm%02ds", (int)(ns / 60e9), (int)fmod(ns / 1e9, 60));
	return buf;
}

char *timefmt_wall(char *buf, size_t n, int64_t wall_ns, int with_date)
{
	time_t s = (time_t)(wall_ns / NS_PER_S);
	struct tm tm;
	localtime_r(&s, &tm);
	strftime(buf, n, with_date ? "%Y-%m-%d %H:%M:%S" : "%H:%M:%S", &tm);
	return buf;
}
