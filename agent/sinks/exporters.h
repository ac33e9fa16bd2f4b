/* exporters.h - the agent's fleet exporters wired in one call: Prometheus
 * /metrics (--metrics) and OTLP traces (--otlp), each an assembler sink. */
#ifndef KPI_EXPORTERS_H
#define KPI_EXPORTERS_H

#include <stddef.h>
#include "agent/track/assemble.h"

struct exporters {
	struct prom_exporter *prom;
	struct http_server *http;
	struct otlp_exporter *otlp;
};

/* Starts what was asked (NULL: off) and adds the sinks to a.  Prints where
 * the metrics are served.  Returns 0, or -1 with a message in err. */
int exporters_start(struct exporters *x, struct assembler *a, const char *metrics_addr,
		    const char *otlp_url, char *err, size_t errlen);
/* Sends the queued OTLP traces, stops both, prints the OTLP totals. */
void exporters_stop(struct exporters *x);

#endif
