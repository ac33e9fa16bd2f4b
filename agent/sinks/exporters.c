/* exporters.c - starts and stops the fleet exporters so that main.c only
 * parses two flags and calls in here. */
#include <stdio.h>
#include <string.h>
#include "export_otlp.h"
#include "export_prom.h"
#include "exporters.h"
#include "http_serve.h"

static int render(void *ctx, FILE *out, bool proto)
{
	char err[256];

	if (!proto)
		return prom_render(ctx, out);
	if (prom_render_proto(ctx, out, err, sizeof(err))) {
		fprintf(stderr, "kpi-agent: /metrics as protobuf: %s\n", err);
		return -1;
	}
	return 0;
}

int exporters_start(struct exporters *x, const char *metrics_addr, const char *otlp_url,
		    char *err, size_t errlen)
{
	char why[256];

	memset(x, 0, sizeof(*x));
	if (otlp_url) {
		struct otlp_config cfg;
		if (otlp_config_from_env(&cfg, why, sizeof(why))) {
			snprintf(err, errlen, "--otlp: %s", why);
			return -1;
		}
		x->otlp = otlp_start(otlp_url, &cfg, err, errlen);
		if (!x->otlp)
			return -1;
		x->sinks[x->n_sinks++] = otlp_sink(x->otlp);
		printf("exporting traces to %s (OTLP/HTTP JSON)\n", otlp_url);
	}
	if (metrics_addr) {
		x->prom = prom_new();
		if (!x->prom) {
			snprintf(err, errlen, "out of memory for the metrics");
			return -1;
		}
		if (x->otlp)
			prom_add_collector(x->prom, otlp_prom_collect, x->otlp);
		x->http = http_serve_start(metrics_addr, render, x->prom, why, sizeof(why));
		if (!x->http) {
			snprintf(err, errlen, "--metrics %s: %s", metrics_addr, why);
			return -1;
		}
		x->sinks[x->n_sinks++] = prom_sink(x->prom);
		printf("serving metrics on http://%s/metrics\n", http_serve_bound(x->http));
	}
	return 0;
}

void exporters_stop(struct exporters *x)
{
	/* the HTTP thread reads prom: stop it first */
	http_serve_stop(x->http);
	x->http = NULL;
	if (x->otlp) {
		struct otlp_stats s;
		struct otlp_exporter *e = x->otlp;
		x->otlp = NULL;
		/* stats survive the stop: take them after the final send */
		otlp_stop_keep(e);
		otlp_stats(e, &s);
		otlp_free(e);
		printf("otlp: %llu requests exported, %llu dropped (%llu queue full, %llu export "
		       "failed), %llu retries, %llu spans rejected by the receiver\n",
		       (unsigned long long)s.exported,
		       (unsigned long long)(s.dropped_full + s.dropped_failed),
		       (unsigned long long)s.dropped_full, (unsigned long long)s.dropped_failed,
		       (unsigned long long)s.retries, (unsigned long long)s.rejected_spans);
	}
	prom_free(x->prom);
	x->prom = NULL;
}
