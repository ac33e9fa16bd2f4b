/* exporters.h - the agent's fleet exporters wired in one call: Prometheus
 * /metrics (--metrics) and OTLP traces (--otlp), each a sink. */
#ifndef KPI_EXPORTERS_H
#define KPI_EXPORTERS_H

#include <stddef.h>
#include "agent/record.h"

struct exporters {
	struct prom_exporter *prom;
	struct http_server *http;
	struct otlp_exporter *otlp;
	struct kpi_sink sinks[2];       /* of those started: OTLP's, then Prometheus' */
	int n_sinks;
};

/* Starts what was asked (NULL: off) and puts their sinks in x->sinks, for the
 * caller to subscribe.  Prints where the metrics are served.  Returns 0, or
 * -1 with a message in err. */
int exporters_start(struct exporters *x, const char *metrics_addr, const char *otlp_url,
		    char *err, size_t errlen);
/* Sends the queued OTLP traces, stops both, prints the OTLP totals. */
void exporters_stop(struct exporters *x);

#endif
