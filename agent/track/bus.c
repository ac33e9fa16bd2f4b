/* bus.c - hands each record to every sink in the order they were added, and
 * lets one hold take HTTP records before them. */
#include <stdlib.h>
#include <string.h>
#include "bus.h"

struct bus {
	struct kpi_sink sinks[BUS_MAX_SINKS];
	int n;
	bool (*hold)(void *ctx, const struct kpi_request_record *r);
	void *hold_ctx;
};

struct bus *bus_new(void)
{
	return calloc(1, sizeof(struct bus));
}

void bus_free(struct bus *b)
{
	free(b);
}

int bus_add(struct bus *b, const struct kpi_sink *sink)
{
	if (b->n == BUS_MAX_SINKS)
		return -1;
	b->sinks[b->n++] = *sink;
	return 0;
}

/* Every sink that takes this kind of record, in order. */
#define EACH(b, cb, rec)                                                        \
	do {                                                                    \
		for (int i_ = 0; i_ < (b)->n; i_++)                             \
			if ((b)->sinks[i_].cb)                                  \
				(b)->sinks[i_].cb((b)->sinks[i_].ctx, rec);     \
	} while (0)

void bus_request(struct bus *b, const struct kpi_request_record *r) { EACH(b, request, r); }
void bus_exchange_out(struct bus *b, const struct kpi_request_record *r) { EACH(b, exchange_out, r); }
void bus_integration(struct bus *b, const struct kpi_integration_record *r) { EACH(b, integration, r); }
void bus_task(struct bus *b, const struct kpi_task_record *k) { EACH(b, task, k); }
void bus_step(struct bus *b, const struct kpi_step_record *s) { EACH(b, step, s); }
void bus_sample(struct bus *b, const struct kpi_sample_record *s) { EACH(b, sample, s); }
void bus_losses(struct bus *b, const struct kpi_loss_record *l) { EACH(b, losses, l); }

void bus_set_hold(struct bus *b, bool (*hold)(void *ctx, const struct kpi_request_record *r),
		  void *ctx)
{
	b->hold = hold;
	b->hold_ctx = ctx;
}

void bus_request_or_hold(struct bus *b, const struct kpi_request_record *r)
{
	if (!b->hold || !b->hold(b->hold_ctx, r))
		bus_request(b, r);
}

void bus_held_keep(struct bus_held *h, const struct kpi_request_record *r)
{
	h->r = *r;
	h->tokens = NULL;
	if (r->n_token_writes) {
		h->tokens = malloc(r->n_token_writes * sizeof(*h->tokens));
		if (!h->tokens)
			abort();
		memcpy(h->tokens, r->token_writes, r->n_token_writes * sizeof(*h->tokens));
	}
	h->r.token_writes = h->tokens;
}

void bus_held_free(struct bus_held *h)
{
	free(h->tokens);
	h->tokens = NULL;
	h->r.token_writes = NULL;
}
