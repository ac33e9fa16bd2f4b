/* bus.h - the one fan-out: every record the agent makes (the assembler's, the
 * HTTP path's, the llama.cpp join's, the hop graph's) goes to every sink added,
 * in the order they were added. Whoever publishes knows no sink. */
#ifndef KPI_BUS_H
#define KPI_BUS_H

#include <stdbool.h>
#include "agent/record.h"

#define BUS_MAX_SINKS 8

struct bus;

struct bus *bus_new(void);
void bus_free(struct bus *b);
/* Records go to every sink added, in order; -1 when BUS_MAX_SINKS are. */
int bus_add(struct bus *b, const struct kpi_sink *sink);

void bus_request(struct bus *b, const struct kpi_request_record *r);
/* An outbound exchange (direction "out"), to the sinks that take them. */
void bus_exchange_out(struct bus *b, const struct kpi_request_record *r);
void bus_integration(struct bus *b, const struct kpi_integration_record *r);
/* An agent task (agent/track/trajectory.c), to the sinks that take them. */
void bus_task(struct bus *b, const struct kpi_task_record *k);
void bus_step(struct bus *b, const struct kpi_step_record *s);
void bus_sample(struct bus *b, const struct kpi_sample_record *s);
void bus_losses(struct bus *b, const struct kpi_loss_record *l);

/* A hold sees an HTTP exchange's record before the sinks and may take it
 * (copied) to hand it out later, completed, through bus_request: the
 * llama.cpp join does (agent/sources/llama.c). NULL: none. */
void bus_set_hold(struct bus *b, bool (*hold)(void *ctx, const struct kpi_request_record *r),
		  void *ctx);
/* The hold first, then (when it did not take r) bus_request. */
void bus_request_or_hold(struct bus *b, const struct kpi_request_record *r);

/* A record kept to be handed out later: a copy whose token writes it owns
 * (a record's arrays are valid during its callback only). */
struct bus_held {
	struct kpi_request_record r;
	uint64_t *tokens;
};
void bus_held_keep(struct bus_held *h, const struct kpi_request_record *r);
void bus_held_free(struct bus_held *h);

#endif
