/* relay_link.h - the link rule that needs no propagated id (response_id):
 * a gateway that relays its model server's answer passes on the ids the
 * answer carries (its x-request-id header, the "id" of its body or of every
 * chunk), so an inbound response that carries the id of exactly one call its
 * process made while serving it is that call's parent. Calls no other rule
 * linked wait here for that evidence; never a guess where two could match
 * (docs/agent.md, Hops). */
#ifndef KPI_RELAY_LINK_H
#define KPI_RELAY_LINK_H

#include <stdbool.h>
#include <stdint.h>
#include "agent/record.h"

/* A held call waits this long for the response that relays it, an inbound
 * response this long for a call that ends after it. */
#define RELAY_WAIT_NS (2ULL * 1000000000ULL)
#define RELAY_MAX_HELD 4096             /* calls held at once; more go unlinked */

struct relay_link;

struct relay_stats {
	uint64_t linked;                /* calls linked by the rule */
	uint64_t ambiguous;             /* ids that several calls (or responses) carried: none linked */
	uint64_t expired;               /* calls no response relayed in time: left unlinked */
};

/* release(ctx, rec) gets every held call back, rec->parent_hop_id and
 * rec->link_rule set when the rule linked it ("" and NULL when not). */
struct relay_link *relay_link_new(void (*release)(void *ctx, struct kpi_request_record *rec), void *ctx);
void relay_link_free(struct relay_link *rl);

/* An outbound exchange no other rule linked, made while several inbound
 * requests were open on its process: held (copied) for the evidence. false
 * when it could not be (no ids to match, RELAY_MAX_HELD, no memory): the
 * caller writes it as it is. */
bool relay_link_hold(struct relay_link *rl, const struct kpi_request_record *rec);
/* An outbound exchange written as it was (linked by another rule, or not
 * held): a candidate too, RELAY_WAIT_NS after it ended, so that a response
 * that carried its id does not link another call that carried the same. */
void relay_link_seen(struct relay_link *rl, const struct kpi_request_record *rec);
/* An inbound exchange's record (direction in, its ids in resp_header_id /
 * resp_body_id): the one held call of its process whose id it carried and
 * that started while it was open is released as its child; the response is
 * kept RELAY_WAIT_NS for calls that end after it. */
void relay_link_inbound(struct relay_link *rl, const struct kpi_request_record *in);
/* Releases, unlinked, the calls held RELAY_WAIT_NS before now (pid 0 and
 * now UINT64_MAX: all of them, at the agent's stop), and forgets old responses. */
void relay_link_expire(struct relay_link *rl, uint64_t now);
const struct relay_stats *relay_link_stats(const struct relay_link *rl);

#endif
