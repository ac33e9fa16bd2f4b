/* relay_link.c - calls held for the response that relays them, and recent
 * inbound responses for calls that end after them; matched by the ids both
 * carry, within one process, and only where one candidate matches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "relay_link.h"

struct held {
	struct held *next;
	uint64_t since;                 /* when it was held (its end) */
	struct kpi_request_record rec;
};

/* An inbound response seen lately: its ids and its span. */
struct resp {
	struct resp *next;
	uint32_t pid;
	uint64_t t0, t1;
	char hop_id[32], hdr[KPI_REQID_LEN], body[KPI_REQID_LEN];
};

/* A call written as it was (linked by another rule, or not held): another
 * candidate for a response that carried its id. */
struct seen {
	struct seen *next;
	uint32_t pid;
	uint64_t t0, t1;
	char hdr[KPI_REQID_LEN], body[KPI_REQID_LEN];
};

struct relay_link {
	struct held *held;
	struct resp *resps;
	struct seen *seen;
	unsigned n_held;
	void (*release)(void *ctx, struct kpi_request_record *rec);
	void *ctx;
	struct relay_stats st;
};

struct relay_link *relay_link_new(void (*release)(void *ctx, struct kpi_request_record *rec), void *ctx)
{
	struct relay_link *rl = calloc(1, sizeof(*rl));

	if (rl) {
		rl->release = release;
		rl->ctx = ctx;
	}
	return rl;
}

void relay_link_free(struct relay_link *rl)
{
	if (!rl)
		return;
	while (rl->held) {
		struct held *h = rl->held;
		rl->held = h->next;
		free(h);
	}
	while (rl->resps) {
		struct resp *r = rl->resps;
		rl->resps = r->next;
		free(r);
	}
	while (rl->seen) {
		struct seen *c = rl->seen;
		rl->seen = c->next;
		free(c);
	}
	free(rl);
}

const struct relay_stats *relay_link_stats(const struct relay_link *rl)
{
	return &rl->st;
}

/* The call matches the response: on its process, started while the
 * response's request was open, and the ids they both carry (the x-request-id
 * header; the body's first id: a chunk's, a completion's) are the same,
 * one at least and none different (a relay passes both on unchanged). */
static bool matches(const struct kpi_request_record *call, uint32_t pid, uint64_t t0, uint64_t t1,
		    const char *hdr, const char *body)
{
	const char *mine[2] = { call->resp_header_id, call->resp_body_id }, *theirs[2] = { hdr, body };
	bool same = false;

	if (call->pid != pid || (uint64_t)call->t_arrive < t0 || (uint64_t)call->t_arrive > t1)
		return false;
	for (int k = 0; k < 2; k++) {
		if (!mine[k][0] || !theirs[k][0])
			continue;
		if (strcmp(mine[k], theirs[k]))
			return false;
		same = true;
	}
	return same;
}

void relay_link_seen(struct relay_link *rl, const struct kpi_request_record *rec);

/* A held call linked: it goes out, and stays a candidate for later responses
 * (one that carried its id too is not unique). */
static void link_release(struct relay_link *rl, struct held *h, const char *parent)
{
	relay_link_seen(rl, &h->rec);
	snprintf(h->rec.parent_hop_id, sizeof(h->rec.parent_hop_id), "%s", parent);
	h->rec.link_rule = "response_id";
	rl->st.linked++;
	rl->release(rl->ctx, &h->rec);
	free(h);
}

/* The recent responses the call matches: how many, the last in *which. */
static int responses_for(const struct relay_link *rl, const struct kpi_request_record *call,
			 const struct resp **which)
{
	int n = 0;
	for (const struct resp *r = rl->resps; r; r = r->next)
		if (matches(call, r->pid, r->t0, r->t1, r->hdr, r->body)) {
			*which = r;
			n++;
		}
	return n;
}

/* The calls written as they were that match a response: other candidates. */
static int seen_for(const struct relay_link *rl, uint32_t pid, uint64_t t0, uint64_t t1, const char *hdr,
		    const char *body)
{
	struct kpi_request_record c;
	int n = 0;
	for (const struct seen *s = rl->seen; s; s = s->next) {
		c.pid = s->pid;
		c.t_arrive = (int64_t)s->t0;
		memcpy(c.resp_header_id, s->hdr, sizeof(c.resp_header_id));
		memcpy(c.resp_body_id, s->body, sizeof(c.resp_body_id));
		n += matches(&c, pid, t0, t1, hdr, body);
	}
	return n;
}

void relay_link_seen(struct relay_link *rl, const struct kpi_request_record *rec)
{
	struct seen *s;

	if ((!rec->resp_header_id[0] && !rec->resp_body_id[0]) || !(s = malloc(sizeof(*s))))
		return;
	s->pid = rec->pid;
	s->t0 = (uint64_t)rec->t_arrive;
	s->t1 = (uint64_t)rec->t_done;
	memcpy(s->hdr, rec->resp_header_id, sizeof(s->hdr));
	memcpy(s->body, rec->resp_body_id, sizeof(s->body));
	s->next = rl->seen;
	rl->seen = s;
}

bool relay_link_hold(struct relay_link *rl, const struct kpi_request_record *rec)
{
	const struct resp *r = NULL;

	if ((!rec->resp_header_id[0] && !rec->resp_body_id[0]) || rl->n_held >= RELAY_MAX_HELD)
		return false;
	struct held *h = malloc(sizeof(*h));
	if (!h)
		return false;
	h->rec = *rec;
	h->since = (uint64_t)rec->t_done;
	/* a response that ended before the call did (it relayed what it had),
	 * which no other call written or held matches */
	int n = responses_for(rl, rec, &r);
	if (n == 1 && !seen_for(rl, r->pid, r->t0, r->t1, r->hdr, r->body)) {
		int others = 0;
		for (struct held *o = rl->held; o; o = o->next)
			others += matches(&o->rec, r->pid, r->t0, r->t1, r->hdr, r->body);
		if (!others) {
			link_release(rl, h, r->hop_id);
			return true;
		}
	}
	rl->st.ambiguous += n > 1;
	h->next = rl->held;
	rl->held = h;
	rl->n_held++;
	return true;
}

void relay_link_inbound(struct relay_link *rl, const struct kpi_request_record *in)
{
	struct held **found = NULL;
	const struct resp *other = NULL;
	int n = 0;

	if (!in->resp_header_id[0] && !in->resp_body_id[0])
		return;
	for (struct held **p = &rl->held; *p; p = &(*p)->next)
		if (matches(&(*p)->rec, in->pid, (uint64_t)in->t_arrive, (uint64_t)in->t_done, in->resp_header_id,
			    in->resp_body_id)) {
			found = p;
			n++;
		}
	/* a call linked by another rule that the response matches too, or
	 * another response the call matches: not this one's alone */
	n += seen_for(rl, in->pid, (uint64_t)in->t_arrive, (uint64_t)in->t_done, in->resp_header_id,
		      in->resp_body_id);
	if (n == 1 && found && responses_for(rl, &(*found)->rec, &other))
		n = 2;
	if (n == 1 && found) {
		struct held *h = *found;
		*found = h->next;
		rl->n_held--;
		link_release(rl, h, in->hop_id);
	} else {
		rl->st.ambiguous += n > 1;
	}
	struct resp *r = calloc(1, sizeof(*r));
	if (!r)
		return;
	r->pid = in->pid;
	r->t0 = (uint64_t)in->t_arrive;
	r->t1 = (uint64_t)in->t_done;
	memcpy(r->hop_id, in->hop_id, sizeof(r->hop_id));
	memcpy(r->hdr, in->resp_header_id, sizeof(r->hdr));
	memcpy(r->body, in->resp_body_id, sizeof(r->body));
	r->next = rl->resps;
	rl->resps = r;
}

void relay_link_expire(struct relay_link *rl, uint64_t now)
{
	struct held **p = &rl->held, *h;
	struct resp **q = &rl->resps, *r;

	while ((h = *p)) {
		if (now < h->since + RELAY_WAIT_NS) {
			p = &h->next;
			continue;
		}
		*p = h->next;
		rl->n_held--;
		rl->st.expired++;
		rl->release(rl->ctx, &h->rec);
		free(h);
	}
	while ((r = *q)) {
		if (now < r->t1 + RELAY_WAIT_NS) {
			q = &r->next;
			continue;
		}
		*q = r->next;
		free(r);
	}
	for (struct seen **p2 = &rl->seen, *c; (c = *p2);) {
		if (now < c->t1 + RELAY_WAIT_NS) {
			p2 = &c->next;
			continue;
		}
		*p2 = c->next;
		free(c);
	}
}
