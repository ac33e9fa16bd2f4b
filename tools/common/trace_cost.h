/* trace_cost.h - cost and energy of a trace window (schema/005_cost.sql), for
 * kpitop's meter and kpi-report's section: one method, docs/cost.md. */
#ifndef KPI_TRACE_COST_H
#define KPI_TRACE_COST_H

#include <stdint.h>
#include "tools/common/trace.h"

/* How the figures were made, for the line beside them: kpi-infer's rows by
 * token share of its batch steps, those of targets traced from their HTTP
 * exchange by their time in flight (trace_cost_method says which a window's). */
#define TRACE_COST_METHOD "token share of batch steps, idle apart (docs/cost.md)"
#define TRACE_COST_METHOD_HTTP "time in flight shared by the requests in flight (from the inferred " \
	"start on the engine where a rule split the row), idle apart (docs/cost.md)"
#define TRACE_COST_METHOD_BOTH "token share of batch steps, time in flight where a target has none, " \
	"idle apart (docs/cost.md)"

struct trace_cost;

/* A reader of t's cost tables on a connection of its own. price_per_hour
 * >= 0 overrides the agent's (meta price_per_hour); < 0 takes the agent's.
 * Returns NULL with the reason in err (the caller can go on without cost). */
struct trace_cost *trace_cost_open(struct trace *t, double price_per_hour, char *err, size_t errlen);
void trace_cost_close(struct trace_cost *c);

/* Requests that arrived in [from, to) and the sample intervals that ended in
 * it. NAN: not known (no price, no energy counter, no token). */
struct trace_cost_window {
	int have;                   /* the trace has cost rows in the window */
	double price;               /* per hour; < 0: none */
	int price_overridden;       /* given to the tool, not the agent's */
	int requests;
	int64_t output_tokens, total_tokens;
	double interval_s, idle_s;  /* idle: outside steps, and steps not split */
	double idle_share;
	double cost_usd, idle_cost_usd, req_cost_usd;
	double energy_j, idle_energy_j, req_energy_j;
	double machine_s;           /* the requests' machine time + idle: what the price buys */
	double s_per_tok;           /* machine_s per output token: the cost per token at any price */
	double usd_per_mtok_out, usd_per_mtok_total;   /* idle included */
	double usd_per_request;                        /* the requests' own, mean */
	double j_per_tok, wh_per_1k_req;               /* idle included */
	double mean_batch;          /* sequences per step (decode + prefilling) */
	int priced, priced_http;    /* requests with a machine time; of them traced from HTTP */
};
/* The method of w's figures: TRACE_COST_METHOD, _HTTP or _BOTH. */
const char *trace_cost_method(const struct trace_cost_window *w);
int trace_cost_window(struct trace_cost *c, int64_t from_ns, int64_t to_ns,
		      struct trace_cost_window *w);
/* meta energy_source: "rapl:package-0,dram-0" or "none: ..." ("" before v5) */
const char *trace_cost_energy_source(const struct trace_cost *c);

#endif
