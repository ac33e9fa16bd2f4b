/* main.c - kpi-ship: follows one host's kpi-agent trace (or ships a finished
 * one) into ClickHouse, with back-off while ClickHouse is away (docs/fleet.md). */
#include "tools/kpi-ship/ship.h"
#include "tools/common/trace.h"
#include "kpi_version.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BACKOFF_MIN_MS 500
#define BACKOFF_MAX_MS 5000
#define STILL_DOWN_EVERY_NS (60 * 1000000000LL)

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: kpi-ship --to clickhouse://HOST[:PORT][/DB] [--db PATH] [--host NAME] [--model NAME]\n"
		"                [--batch N] [--interval MS] [--timeout MS] [--metrics [ADDR:]PORT] [--once]\n"
		"                [--minutes-only]\n"
		"Ships a kpi-agent trace into ClickHouse (schema/clickhouse/), following it as the agent writes.\n\n"
		"  --to URL           ClickHouse's HTTP interface; DB defaults to %s, PORT to %d\n"
		"  --db PATH          the trace (default %s, or $KPI_DB)\n"
		"  --host NAME        the host column of every row (default: the host name the agent\n"
		"                     recorded in the trace, else this machine's)\n"
		"  --model NAME       model column of rows that have none (kpi-infer's rows do not name it)\n"
		"  --batch N          rows per INSERT (default 5000)\n"
		"  --interval MS      how often to look for new rows once caught up (default 1000)\n"
		"  --timeout MS       one INSERT, connect to answer; longer counts as down (default 10000)\n"
		"  --metrics PORT     serve /metrics (progress, backlog, lag) on 127.0.0.1:PORT or ADDR:PORT\n"
		"  --once             ship what the trace holds now, then exit (1 if ClickHouse stayed\n"
		"                     unreachable for --give-up seconds, default 60)\n"
		"  --give-up S        with --once: seconds ClickHouse may stay unreachable before that\n"
		"                     exit 1 (1 to 86400, default 60)\n"
		"  --minutes-only     ship the per-minute aggregates alone (rows already in ClickHouse by\n"
		"                     other means, e.g. a bulk copy of an old trace)\n"
		"  -h, --help         this help\n"
		"  --version          the version and the git commit it was built from\n\n"
		"Beside the rows, per-minute aggregates (request_minutes: counts, phase sums, histograms with\n"
		"1%% relative error) for every minute %d s past its end, each minute computed whole from the\n"
		"trace and shipped again, with a higher version, when rows of it come later; at exit the\n"
		"minutes still open go as they are. \"K rows behind\" counts minutes not yet shipped too.\n"
		"Rows go at least once; the tables collapse a resent batch (SELECT ... FINAL). The cursor is\n"
		"kept in the trace (table ship_cursor): a restarted kpi-ship goes on where ClickHouse last\n"
		"acknowledged. While ClickHouse is down the trace is the spool: rows the agent's retention\n"
		"removes before they were shipped are counted by the agent as the loss unshipped_rows.\n"
		"kpi-ship never creates the trace: until the agent has made it, kpi-ship waits (--once:\n"
		"exits 1); files SQLite adds beside it (-wal, -shm) get the trace's owner.\n",
		CH_DEFAULT_DB, CH_DEFAULT_PORT, TRACE_DEFAULT_DB, SHIP_MINUTE_GRACE_S);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	if (!stop)
		nanosleep(&ts, NULL);   /* a signal ends it early: the handler has no SA_RESTART */
}

static int parse_int(const char *flag, const char *s, long lo, long hi, long *out)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (end == s || *end || v < lo || v > hi) {
		fprintf(stderr, "kpi-ship: %s '%s': give a whole number from %ld to %ld\n", flag, s, lo, hi);
		return -1;
	}
	*out = v;
	return 0;
}

static void exit_line(struct shipper *s, int64_t behind)
{
	uint64_t total = 0;
	char parts[512] = "";
	size_t n = 0;
	for (int i = 0; i < SHIP_TABLES; i++) {
		if (!s->st.t[i].present)
			continue;
		total += s->st.t[i].rows;
		n += (size_t)snprintf(parts + n, n < sizeof(parts) ? sizeof(parts) - n : 0, "%s%s %llu",
				      n ? ", " : "", s->st.t[i].name, (unsigned long long)s->st.t[i].rows);
	}
	printf("kpi-ship: %llu rows shipped (%s) and %llu minutes (%llu request_minutes rows, %llu minutes "
	       "again) in %llu batches, %llu failed POSTs; %lld rows behind\n",
	       (unsigned long long)total, parts, (unsigned long long)s->st.minutes,
	       (unsigned long long)s->st.minute_rows, (unsigned long long)s->st.minutes_again,
	       (unsigned long long)s->st.batches, (unsigned long long)s->st.failures, (long long)behind);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "to", required_argument, 0, 'T' }, { "db", required_argument, 0, 'd' },
		{ "host", required_argument, 0, 'H' }, { "model", required_argument, 0, 'm' },
		{ "batch", required_argument, 0, 'b' }, { "interval", required_argument, 0, 'i' },
		{ "timeout", required_argument, 0, 't' }, { "metrics", required_argument, 0, 'M' },
		{ "once", no_argument, 0, '1' }, { "give-up", required_argument, 0, 'g' },
		{ "minutes-only", no_argument, 0, 'A' }, { "help", no_argument, 0, 'h' },
		{ "version", no_argument, 0, 'V' }, { 0 },
	};
	const char *db = getenv("KPI_DB") ? getenv("KPI_DB") : TRACE_DEFAULT_DB;
	const char *to = NULL, *host = NULL, *model = NULL, *metrics = NULL;
	long batch = 5000, interval = 1000, timeout = 10000, give_up = 60;
	int once = 0, minutes_only = 0, o;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'T': to = optarg; break;
		case 'd': db = optarg; break;
		case 'H': host = optarg; break;
		case 'm': model = optarg; break;
		case 'M': metrics = optarg; break;
		case '1': once = 1; break;
		case 'A': minutes_only = 1; break;
		case 'b': if (parse_int("--batch", optarg, 1, 1000000, &batch)) return 2; break;
		case 'i': if (parse_int("--interval", optarg, 10, 3600000, &interval)) return 2; break;
		case 't': if (parse_int("--timeout", optarg, 100, 600000, &timeout)) return 2; break;
		case 'g': if (parse_int("--give-up", optarg, 1, 86400, &give_up)) return 2; break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("kpi-ship %s\n", KPI_VERSION_STRING); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kpi-ship: unexpected argument '%s' (see kpi-ship --help)\n", argv[optind]);
		return 2;
	}
	char err[768];
	struct ch_url u;
	if (!to) {
		fprintf(stderr, "kpi-ship: --to is missing: give ClickHouse's address, e.g. --to clickhouse://127.0.0.1:8123/kpiscope\n");
		return 2;
	}
	if (ch_url_parse(to, &u, err, sizeof(err))) {
		fprintf(stderr, "kpi-ship: --to %s\n", err);
		return 2;
	}
	struct shipper *s = calloc(1, sizeof(*s));
	if (!s) {
		fprintf(stderr, "kpi-ship: out of memory\n");
		return 1;
	}
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	/* following, kpi-ship may start before the agent: it waits for the
	 * trace rather than create it (the agent makes it, with its owner) */
	int opened, said = 0;
	while ((opened = ship_open(s, db, &u, host, model, (int)batch, timeout, err, sizeof(err))) == 1 && !once &&
	       !stop) {
		minutes_close(s);
		ship_close(s);
		if (!said++) {
			printf("kpi-ship: waiting for the trace (%s); kpi-ship never creates it\n", err);
			fflush(stdout);
		}
		sleep_ms(interval < 1000 ? interval : 1000);
	}
	if (!opened)
		opened = minutes_open(s, err, sizeof(err));
	if (opened) {
		minutes_close(s);
		if (!stop)
			fprintf(stderr, "kpi-ship: %s\n", err);
		ship_close(s);
		free(s);
		return stop ? 0 : 1;
	}
	if (metrics && ship_metrics_start(s, metrics, err, sizeof(err))) {
		fprintf(stderr, "kpi-ship: %s\n", err);
		minutes_close(s);
		ship_close(s);
		return 2;
	}
	printf("shipping %s as host %s to %s\n", db, s->host, u.text);
	fflush(stdout);

	int rc = 0;
	long backoff = 0;
	int64_t down_since = 0, last_said = 0, next_backlog = 0, behind = -1;
	unsigned seed = (unsigned)ship_wall_ns() ^ (unsigned)getpid();
	while (!stop) {
		int full = 0, failed = 0;
		/* every row committed before this instant is read by this round:
		 * when no batch comes back full, ClickHouse has them all */
		int64_t round_start = ship_wall_ns();
		bool unreachable = false;
		for (int i = 0; i < SHIP_TABLES && !stop && !minutes_only; i++) {
			int n = ship_batch(s, i, &unreachable, err, sizeof(err));
			if (n == -2) {
				fprintf(stderr, "kpi-ship: %s\n", err);
				failed = 2;
				break;
			}
			if (n < 0) {
				failed = 1;
				break;
			}
			full |= n == batch;
		}
		/* the aggregates, once this round's rows went: their minutes marked,
		 * then the closed ones shipped (all of them with --once: the trace
		 * as it is now) */
		if (!failed && !stop) {
			int n = minutes_mark(s, err, sizeof(err));
			/* a mark stops at a transaction's worth: more rows to mark */
			full |= n == SHIP_MINUTES_MARK_ROWS;
			if (n >= 0)
				n = minutes_ship(s, once, &unreachable, err, sizeof(err));
			if (n == -2) {
				fprintf(stderr, "kpi-ship: %s\n", err);
				failed = 2;
			} else if (n < 0) {
				failed = 1;
			}
			full |= n == SHIP_MINUTES_PER_POST;
		}
		int64_t now = ship_wall_ns();
		if (failed == 1) {
			pthread_mutex_lock(&s->st.mu);
			s->st.failures++;
			s->st.up = false;
			pthread_mutex_unlock(&s->st.mu);
			if (!down_since) {
				down_since = last_said = now;
				printf("kpi-ship: ClickHouse at %s %s (%s): rows wait in the trace, retrying with "
				       "back-off up to %d s\n", u.text, unreachable ? "is unreachable" : "refused a batch",
				       err, BACKOFF_MAX_MS / 1000);
				if (!unreachable)
					printf("kpi-ship: if a table is missing, create them: docs/fleet.md, \"ClickHouse\"\n");
				fflush(stdout);
			} else if (now - last_said >= STILL_DOWN_EVERY_NS) {
				last_said = now;
				printf("kpi-ship: ClickHouse at %s still failing after %lld s (%s); %lld rows behind\n",
				       u.text, (long long)((now - down_since) / 1000000000LL), err,
				       (long long)ship_backlog(s));
				fflush(stdout);
			}
			if (once && now - down_since >= give_up * 1000000000LL) {
				rc = 1;
				break;
			}
			backoff = backoff ? (backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2) : BACKOFF_MIN_MS;
			/* 75-100% of the step, so that shippers restarted together spread out */
			sleep_ms(backoff - (long)(rand_r(&seed) % (unsigned)(backoff / 4 + 1)));
			continue;
		}
		if (failed == 2) {
			sleep_ms(interval);
			continue;
		}
		backoff = 0;
		pthread_mutex_lock(&s->st.mu);
		s->st.up = true;
		pthread_mutex_unlock(&s->st.mu);
		if (down_since) {
			printf("kpi-ship: ClickHouse at %s takes rows again after %.1f s; shipping the %lld rows behind\n",
			       u.text, (double)(now - down_since) / 1e9, (long long)ship_backlog(s));
			fflush(stdout);
			down_since = 0;
		}
		if (!full) {
			pthread_mutex_lock(&s->st.mu);
			s->st.caught_up_wall_ns = round_start;
			pthread_mutex_unlock(&s->st.mu);
		}
		if (full && now < next_backlog)
			continue;
		behind = (minutes_only ? 0 : ship_backlog(s)) + minutes_behind(s, once);
		next_backlog = now + 1000000000LL;
		if (!behind && once)
			break;
		if (!full)
			sleep_ms(interval);
	}
	/* the minutes still open go as they are; rows that come later ship
	 * them again, with a higher version (the next kpi-ship's round) */
	if (rc == 0 && s->st.up) {
		bool unreachable;
		for (;;) {
			int m = minutes_mark(s, err, sizeof(err));
			int n = m < 0 ? -1 : minutes_ship(s, true, &unreachable, err, sizeof(err));
			/* done when a pass marked and shipped less than a full batch */
			if (n < 0 || (n < SHIP_MINUTES_PER_POST && m < SHIP_MINUTES_MARK_ROWS))
				break;
		}
	}
	ship_metrics_stop();
	exit_line(s, (minutes_only ? 0 : ship_backlog(s)) + minutes_behind(s, true));
	minutes_close(s);
	ship_close(s);
	free(s);
	return rc;
}
