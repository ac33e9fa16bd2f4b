/* store_bench.c - SQLite ingest rate of kpi-agent's writer: synthetic
 * request lifecycles go through the real assembler and trace store, flushed
 * in batches as the agent does every --flush-ms; prints one JSON object. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/track/assemble.h"
#include "agent/track/bus.h"
#include "agent/sinks/store.h"
#include "tests/unit/event_util.h"

/* As the agent flushes: with what is in flight now. */
static int flush(struct trace_store *s, struct assembler *a, uint64_t ts, char *err, size_t len)
{
	struct kpi_inflight_view live = assemble_inflight_view(a);
	return trace_store_flush(s, &live, ts, 5, err, len);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: store-bench DB REQUESTS PER_FLUSH\n");
		return 2;
	}
	const char *path = argv[1];
	long n = atol(argv[2]), per_flush = atol(argv[3]);
	if (n <= 0 || per_flush <= 0) {
		fprintf(stderr, "store-bench: REQUESTS and PER_FLUSH must be positive\n");
		return 2;
	}
	char err[512];
	struct trace_store *s = trace_store_open(path, false, err, sizeof(err));
	if (!s) {
		fprintf(stderr, "store-bench: %s\n", err);
		return 1;
	}
	struct bus *bus = bus_new();
	struct assembler *a = assemble_new(bus);
	struct kpi_sink sink = trace_store_sink(s);
	bus_add(bus, &sink);
	const int tokens = 16;
	double t0 = now_s();
	uint64_t ts = 1000000;
	for (long i = 0; i < n; i++) {
		int fd = 10 + (int)(i % 64);
		union kpi_event e = mkev(7, KPI_EV_ARRIVE, ts, 0, fd, 0, 0, NULL);
		char rid[32];
		assemble_ev(a, e);
		snprintf(rid, sizeof(rid), "bench-%ld", i);
		e = mkev(7, KPI_EV_ADMIT, ts + 100, (uint64_t)i + 1, fd, 32, tokens, rid);
		assemble_ev(a, e);
		e = mkev(7, KPI_EV_SCHED, ts + 200, (uint64_t)i + 1, -1, 0, 0, NULL);
		assemble_ev(a, e);
		e = mkev(7, KPI_EV_FIRST, ts + 300, (uint64_t)i + 1, -1, 0, 0, NULL);
		assemble_ev(a, e);
		/* one write per token; the last one (with [DONE]) after the finish */
		for (int k = 0; k < tokens - 1; k++) {
			e = mkev(7, KPI_EV_WRITE, ts + 310 + 10 * (uint64_t)k, 0, fd, 0, 0, NULL);
			assemble_ev(a, e);
		}
		e = mkev(7, KPI_EV_FINISH, ts + 500, (uint64_t)i + 1, -1, tokens, 2, NULL);
		assemble_ev(a, e);
		e = mkev(7, KPI_EV_WRITE, ts + 510, 0, fd, 0, 0, NULL);
		assemble_ev(a, e);
		e = mkev(7, KPI_EV_RESP_END, ts + 520, (uint64_t)i + 1, fd, 200, 0, NULL);
		assemble_ev(a, e);
		ts += 1000;
		if ((i + 1) % per_flush == 0 && flush(s, a, ts, err, sizeof(err))) {
			fprintf(stderr, "store-bench: flush failed: %s\n", err);
			return 1;
		}
	}
	if (flush(s, a, ts, err, sizeof(err))) {
		fprintf(stderr, "store-bench: flush failed: %s\n", err);
		return 1;
	}
	double dt = now_s() - t0;
	trace_store_close(s);
	assemble_free(a);
	bus_free(bus);
	printf("{\"requests\":%ld,\"per_flush\":%ld,\"seconds\":%.4f,\"requests_per_s\":%.1f}\n", n,
	       per_flush, dt, n / dt);
	return 0;
}
