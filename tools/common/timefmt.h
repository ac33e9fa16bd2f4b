/* timefmt.h - durations and instants as the tools read and print them:
 * "5m" windows, "10:31:00" points, "12.3ms" cells; no trace store needed. */
#ifndef KPI_TIMEFMT_H
#define KPI_TIMEFMT_H

#include <stddef.h>
#include <stdint.h>

#define NS_PER_MS 1000000LL
#define NS_PER_S 1000000000LL

/* "10s", "1m", "5m", "500ms", "2h", "1.5s"; bare numbers are seconds.
 * Returns 0 or -1 with a message. */
int timefmt_parse_duration(const char *s, int64_t *ns, char *err, size_t errlen);

/* What a TIME argument names before a trace gives it a place: an offset
 * from the trace's start or end, a wall-clock instant (Unix ns), or a time
 * of day (ns since local midnight) on the day the trace ends. */
enum timefmt_anchor { TF_START, TF_END, TF_WALL, TF_TIME_OF_DAY };
struct timefmt_point {
	enum timefmt_anchor anchor;
	int64_t ns;
};

/* "end" (or "now"), "start", "-90s" (before the end), "+30s" (after the
 * start), "@1764670260.5" (Unix seconds), "2026-12-02T10:31:00" or
 * "2026-12-02 10:31:00" (local time), "10:31:00" (local time of day).
 * Returns 0 or -1 with a message that lists these forms. */
int timefmt_parse_point(const char *s, struct timefmt_point *p, char *err, size_t errlen);

/* The instant (Unix ns) at time_of_day_ns past local midnight on the local
 * day that holds day_wall_ns; -1 when the local calendar has no such time. */
int64_t timefmt_on_day(int64_t day_wall_ns, int64_t time_of_day_ns);

/* "850µs", "12.3ms", "1.24s", "3m05s"; "-" for negative (unknown). */
char *timefmt_dur(char *buf, size_t n, double ns);
/* Local "HH:MM:SS" (with_date: "YYYY-MM-DD HH:MM:SS") of a Unix-ns instant. */
char *timefmt_wall(char *buf, size_t n, int64_t wall_ns, int with_date);

#endif
