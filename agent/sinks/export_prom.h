/* export_prom.h - Prometheus exposition of the agent's records: GenAI
 * semantic-convention histograms (TTFT, TPOT, request duration) with the
 * conventions' buckets, per-phase histograms, counters and gauges. */
#ifndef KPI_EXPORT_PROM_H
#define KPI_EXPORT_PROM_H

#include <stdio.h>
#include "agent/record.h"

#define PROM_MAX_BOUNDS 24
#define PROM_REQUEST_MODELS 8   /* kpi_request_model values a process, the rest "other" */

/* One histogram's upper bounds (le), seconds, ascending; +Inf implied. */
struct prom_buckets {
	const char *name;               /* metric family, Prometheus form */
	const char *help;
	int n;
	double le[PROM_MAX_BOUNDS];
	int64_t le_ns[PROM_MAX_BOUNDS]; /* filled by prom_new(): exact placement */
};

/* The buckets of a histogram family by its name (NULL: no such family). */
const struct prom_buckets *prom_buckets_of(const char *name);
/* The bucket a value of v ns falls in under Prometheus' le (<=) rule:
 * 0..n-1, or n for +Inf. */
int prom_bucket_index(const struct prom_buckets *b, int64_t v_ns);

struct prom_exporter;

struct prom_exporter *prom_new(void);
void prom_free(struct prom_exporter *p);
/* The sink the assembler feeds (main thread). */
struct kpi_sink prom_sink(struct prom_exporter *p);
/* fn(ctx, out) appends more families to every exposition (called with no
 * exporter lock held, from the thread that renders). */
void prom_add_collector(struct prom_exporter *p, void (*fn)(void *ctx, FILE *out), void *ctx);
/* The whole exposition (text format 0.0.4); safe against concurrent sink
 * callbacks.  Returns 0, or -1 when out failed. */
int prom_render(struct prom_exporter *p, FILE *out);

/* The same exposition as delimited protobuf MetricFamily messages
 * (prom_proto.h), every request-latency histogram with its native buckets
 * (prom_native.h) beside the classic ones: what a Prometheus with native
 * histograms on asks for. Returns 0, or -1 with the reason in err. */
int prom_render_proto(struct prom_exporter *p, FILE *out, char *err, size_t errlen);

/* A sample value the way Prometheus parses it back to the same double. */
void prom_format_double(char *buf, size_t len, double v);

#endif
