/* main.c - kpi-report: post-incident report from a kpi-agent trace: which
 * phase got slow, when, why, against a baseline window. */
#include "tools/kpi-report/report.h"
#include "tools/common/clickhouse.h"
#include "kpi_version.h"

#include <getopt.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: kpi-report --db PATH|clickhouse://HOST[:PORT][/DB] [--from TIME --to TIME]\n"
		"                  [--baseline TIME..TIME] [--host NAME] [--model NAME] [--window DURATION]\n"
		"                  [--format md|html] [--price-per-hour USD] [-o FILE]\n"
		"Explains which phase and which cause made a window of a kpi-agent trace slow.\n\n"
		"  --db PATH            trace store (default %s, or $KPI_DB)\n"
		"  --db clickhouse://HOST[:PORT][/DB]\n"
		"                       the fleet's rows shipped by kpi-ship (docs/fleet.md): the same report\n"
		"                       across hosts, with the hosts, models and pods (NAMESPACE/NAME) ranked\n"
		"                       by their share of the p99 TTFT change, and the hosts ranked by their\n"
		"                       p99 TTFT change\n"
		"                       from the per-minute aggregates alone (whole minutes, p99 within 1 %%)\n"
		"  --host NAME          with clickhouse://: only this host's rows\n"
		"  --model NAME         with clickhouse://: only this model's requests\n"
		"  --window DURATION    with clickhouse://: how much of the fleet's history to read, back from\n"
		"                       its newest request (default 1h); --from/--to/--baseline lie inside it\n"
		"  --from TIME          start of the incident window\n"
		"  --to TIME            end of the incident window (default: end of the trace)\n"
		"                       without both, the worst stretch of p99 TTFT is picked\n"
		"  --baseline A..B      window to compare with; without it, the quietest window of the\n"
		"                       same length before the incident is picked, and the report says which\n"
		"  --format md|html     markdown (default) or one self-contained HTML page with SVG charts\n"
		"  --price-per-hour USD the machine's price an hour for the cost section (default:\n"
		"                       the agent's --price-per-hour, from the trace); docs/cost.md\n"
		"  -o, --output FILE    write there instead of stdout\n"
		"  -h, --help           this help\n"
		"  --version            the version and the git commit it was built from\n\n"
		"TIME: 2026-12-02T10:31:00 or 10:31:00 (local time), @UNIXSECONDS, -90s (before the\n"
		"trace's end), +30s (after its start), start, end.\n",
		TRACE_DEFAULT_DB);
}

int main(int argc, char **argv)
{
	setlocale(LC_ALL, "");
	static const struct option opts[] = {
		{ "db", required_argument, 0, 'd' }, { "from", required_argument, 0, 'f' },
		{ "to", required_argument, 0, 't' }, { "baseline", required_argument, 0, 'b' },
		{ "format", required_argument, 0, 'F' }, { "output", required_argument, 0, 'o' },
		{ "price-per-hour", required_argument, 0, 'P' },
		{ "host", required_argument, 0, 'H' }, { "model", required_argument, 0, 'm' },
		{ "window", required_argument, 0, 'w' },
		{ "help", no_argument, 0, 'h' }, { "version", no_argument, 0, 'V' }, { 0 },
	};
	const char *db = getenv("KPI_DB") ? getenv("KPI_DB") : TRACE_DEFAULT_DB;
	const char *from_s = NULL, *to_s = NULL, *base_s = NULL, *out_path = NULL;
	struct trace_fleet_filter ff = { .window_ns = 3600 * NS_PER_S };
	int html = 0, o;
	char err[768];
	double price = -1;
	char *end;
	while ((o = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
		switch (o) {
		case 'd': db = optarg; break;
		case 'f': from_s = optarg; break;
		case 't': to_s = optarg; break;
		case 'b': base_s = optarg; break;
		case 'o': out_path = optarg; break;
		case 'F':
			if (!strcmp(optarg, "md") || !strcmp(optarg, "markdown")) html = 0;
			else if (!strcmp(optarg, "html")) html = 1;
			else {
				fprintf(stderr, "kpi-report: --format '%s': use md or html\n", optarg);
				return 2;
			}
			break;
		case 'P':
			price = strtod(optarg, &end);
			if (end == optarg || *end || !(price >= 0)) {
				fprintf(stderr, "kpi-report: --price-per-hour '%s': give a price in USD, e.g. 2.5\n", optarg);
				return 2;
			}
			break;
		case 'H': ff.host = optarg; break;
		case 'm': ff.model = optarg; break;
		case 'w':
			if (timefmt_parse_duration(optarg, &ff.window_ns, err, sizeof(err)) || ff.window_ns <= 0) {
				fprintf(stderr, "kpi-report: --window '%s': give a duration, e.g. 30m or 2h\n", optarg);
				return 2;
			}
			break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("kpi-report %s\n", KPI_VERSION_STRING); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kpi-report: unexpected argument '%s' (see kpi-report --help)\n", argv[optind]);
		return 2;
	}
	struct report *r = calloc(1, sizeof(*r));
	if (!r) return 1;
	r->price = price;
	if ((ff.host || ff.model) && !ch_is_url(db)) {
		fprintf(stderr, "kpi-report: --host and --model filter a fleet: give --db clickhouse://HOST:PORT/DB\n");
		free(r);
		return 2;
	}
	if (ch_is_url(db))
		r->fleet = trace_fleet_open(db, &ff, &r->t, err, sizeof(err));
	else
		r->t = trace_open(db, err, sizeof(err));
	if (!r->t) {
		fprintf(stderr, "kpi-report: %s\n", err);
		free(r);
		return 1;
	}
	int rc = 2;
	int64_t from = 0, to = 0, bf = 0, bt = 0;
	if (from_s && trace_parse_time(r->t, from_s, &from, err, sizeof(err))) {
		fprintf(stderr, "kpi-report: --from: %s\n", err);
		goto out;
	}
	if (to_s && trace_parse_time(r->t, to_s, &to, err, sizeof(err))) {
		fprintf(stderr, "kpi-report: --to: %s\n", err);
		goto out;
	}
	if (base_s) {
		const char *dots = strstr(base_s, "..");
		char a[128];
		if (!dots || dots == base_s || !dots[2] || (size_t)(dots - base_s) >= sizeof(a)) {
			fprintf(stderr, "kpi-report: --baseline '%s': give FROM..TO, e.g. 10:00:00..10:05:00\n", base_s);
			goto out;
		}
		snprintf(a, sizeof(a), "%.*s", (int)(dots - base_s), base_s);
		if (trace_parse_time(r->t, a, &bf, err, sizeof(err)) ||
		    trace_parse_time(r->t, dots + 2, &bt, err, sizeof(err))) {
			fprintf(stderr, "kpi-report: --baseline: %s\n", err);
			goto out;
		}
		if (bt <= bf) {
			fprintf(stderr, "kpi-report: --baseline '%s': FROM must come before TO\n", base_s);
			goto out;
		}
	}
	rc = 1;
	if (report_analyze(r, from, from_s != NULL, to, to_s != NULL, bf, bt, base_s != NULL, err, sizeof(err))) {
		fprintf(stderr, "kpi-report: %s\n", err);
		goto out;
	}
	if (r->fleet) {
		char w[16];
		snprintf(r->fleet_what, sizeof(r->fleet_what), "%lld requests of %d hosts%s%s%s%s, the last %s before "
			 "the newest, read in %.2f s.", (long long)trace_fleet_rows(r->fleet), trace_fleet_hosts(r->fleet),
			 ff.host ? ", host " : "", ff.host ? ff.host : "", ff.model ? ", model " : "",
			 ff.model ? ff.model : "", timefmt_dur(w, sizeof(w), (double)ff.window_ns),
			 trace_fleet_copy_s(r->fleet));
		if (report_fleet_analyze(r)) {
			fprintf(stderr, "kpi-report: ranking the hosts failed: %s\n", trace_errmsg(r->t));
			goto out;
		}
	}
	FILE *f = stdout;
	if (out_path && !(f = fopen(out_path, "w"))) {
		fprintf(stderr, "kpi-report: -o %s: cannot write there: %m\n", out_path);
		goto out;
	}
	if (html) report_html(r, f);
	else report_markdown(r, f);
	if (f != stdout && fclose(f)) {
		fprintf(stderr, "kpi-report: writing %s failed: %m\n", out_path);
		goto out;
	}
	rc = 0;
out:
	if (r->fleet)
		trace_fleet_close(r->fleet, r->t);
	else
		trace_close(r->t);
	free(r);
	return rc;
}
