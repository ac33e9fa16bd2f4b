/* export_otlp.h - OpenTelemetry traces from the agent's records: one SERVER
 * span per request with a child span per phase, GenAI semantic-convention
 * attributes, OTLP/HTTP JSON over http:// or https:// (libcurl).  A bounded
 * queue and a sender thread keep the main loop from ever waiting on the
 * network; the SQLite store stays the source of truth, so what cannot be sent
 * is dropped and counted. */
#ifndef KPI_EXPORT_OTLP_H
#define KPI_EXPORT_OTLP_H

#include <stdint.h>
#include <stdio.h>
#include "export_ident.h"
#include "agent/record.h"

/* Settings, from the OpenTelemetry SDK's environment variables. */
struct otlp_config {
	int max_queue;          /* OTEL_BSP_MAX_QUEUE_SIZE (2048): requests waiting */
	int max_batch;          /* OTEL_BSP_MAX_EXPORT_BATCH_SIZE (512): requests per POST */
	int delay_ms;           /* OTEL_BSP_SCHEDULE_DELAY (5000): longest wait to send */
	int timeout_ms;         /* OTEL_EXPORTER_OTLP_TIMEOUT (10000): one POST */
	int max_attempts;       /* tries per batch before it is dropped (6: ~30 s of backoff) */
	int backoff_ms;         /* first retry delay, doubled each time up to 16 s (500) */
	char service_name[128]; /* OTEL_SERVICE_NAME (kpi-infer) */
	/* OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE, else OTEL_EXPORTER_OTLP_CERTIFICATE:
	 * the CA file (PEM) that https:// receivers are verified against; "" = the
	 * system's store */
	char certificate[1024];
};

/* Defaults overridden by the environment; -1 with a message naming the bad
 * variable. */
int otlp_config_from_env(struct otlp_config *c, char *err, size_t errlen);

/* One queued request: the record copied, its strings with it. */
struct otlp_item {
	struct kpi_request_record r;    /* pointers cleared; strings below */
	char finish[16], reject[32];
	char operation[24];             /* gen_ai.operation.name; "" when not admitted */
	char source[16];                /* usdt, http */
	struct export_ident id;
};

/* Writes one ExportTraceServiceRequest (OTLP JSON) for items[0..n).
 * realtime_off: CLOCK_REALTIME - CLOCK_MONOTONIC in ns; ids: 24 random
 * bytes per item (16 trace id + 8 root span id); child span ids are derived
 * from them. */
void otlp_encode(FILE *out, const struct otlp_item *items, size_t n, int64_t realtime_off,
		 const uint8_t *ids, const char *service_name, const char *host_name);
/* Copies a record into a queue item. */
void otlp_item_fill(struct otlp_item *it, const struct kpi_request_record *r);

struct otlp_exporter;

/* url: http[s]://HOST[:PORT][/PATH] (PATH defaults to /v1/traces). */
struct otlp_exporter *otlp_start(const char *url, const struct otlp_config *cfg,
				 char *err, size_t errlen);
struct kpi_sink otlp_sink(struct otlp_exporter *e);
/* Sends what is queued (one try per batch, each up to the export timeout;
 * what fails counts as dropped) and stops the thread; stats stay readable. */
void otlp_stop_keep(struct otlp_exporter *e);
/* Stops (if not yet) and frees e. */
void otlp_free(struct otlp_exporter *e);

struct otlp_stats {
	uint64_t exported;      /* requests accepted by the receiver */
	uint64_t dropped_full;  /* queue full */
	uint64_t dropped_failed;/* retries exhausted, a non-retryable answer, or shutdown */
	uint64_t retries, posts, queued;
	uint64_t batches;       /* POSTs the receiver accepted (2xx) */
	uint64_t rejected_spans;/* spans a 2xx answer's partialSuccess said it rejected */
};
void otlp_stats(struct otlp_exporter *e, struct otlp_stats *out);
/* A prom_add_collector() callback: the exporter's counters in Prometheus text. */
void otlp_prom_collect(void *ctx, FILE *out);

#endif
