/* hop_link.h - ties a target's outbound HTTP exchanges to the inbound request
 * it was serving when it made them (schema/008_hops.sql, docs/agent.md "Hops"),
 * and keeps what the SQL needs to tie the two ends of one connection together. */
#ifndef KPI_HOP_LINK_H
#define KPI_HOP_LINK_H

#include <stdbool.h>
#include <stdint.h>
#include "bpf/kpi_event.h"

#define HOP_END_LEN 48          /* "addr:port", [v6]:port included */
#define HOP_ID_LEN  32          /* "<pid>.<ns>" */
#define HOP_HDR_LEN 64          /* header id bytes kept (= HTTP_TRACK_ID_LEN) */

/* Both ends of a TCP connection as the target sees them, "" when unknown. */
struct hop_ends {
	char local[HOP_END_LEN], peer[HOP_END_LEN];
};

/* Which rule linked an outbound exchange to its parent, tried in this order. */
enum hop_rule {
	HOP_RULE_NONE,          /* no rule could: left unlinked and counted */
	HOP_RULE_HEADER,        /* its x-request-id / traceparent trace-id is the one
				 * inbound request open on the process that carries it */
	HOP_RULE_THREAD,        /* written on the thread that read the one inbound
				 * request that thread had open */
	HOP_RULE_LOOP,          /* the only inbound request open on the process */
	HOP_RULE_RESPONSE_ID,   /* the inbound response relayed its id (agent/track/relay_link.c):
				 * decided after the call ended, by the rule there */
	HOP_RULE__COUNT
};

struct hop_link_stats {
	uint64_t links[HOP_RULE__COUNT];        /* outbound exchanges by rule; [NONE]: unlinked */
	uint64_t ambiguous;                     /* of the unlinked: several inbound requests open */
};

struct hop_link;

struct hop_link *hop_link_new(void);
void hop_link_free(struct hop_link *hl);

/* A SOCK record: (pid, fd) has these ends until a new one replaces it. */
void hop_link_sock(struct hop_link *hl, const struct kpi_ev_sock *e);
/* The ends of (pid, fd); false (and "" in out) when no SOCK told them. */
bool hop_link_ends(const struct hop_link *hl, uint32_t pid, int fd, struct hop_ends *out);
/* The process's name (/proc/PID/comm, read once), "" when gone. */
const char *hop_link_comm(struct hop_link *hl, uint32_t pid);
/* The id of the exchange of pid whose first byte moved at ts. */
void hop_link_hop_id(uint32_t pid, uint64_t ts, char out[HOP_ID_LEN]);

/* An inbound request's head was read on connection (pid, fd) by thread tid;
 * its first byte at ts; hdr: its header id ("" none).  Open until
 * hop_link_close; the tag names it there. */
uint64_t hop_link_in_open(struct hop_link *hl, uint32_t pid, int fd, uint32_t tid,
			  const char *hdr, uint64_t ts);
/* An outbound request's head was written: its parent is chosen now, among
 * the inbound requests open at this moment (its hop id in parent, "" none),
 * and kept for hop_link_out_take. */
uint64_t hop_link_out_open(struct hop_link *hl, uint32_t pid, int fd, uint32_t tid,
			   const char *hdr, uint64_t ts, char parent[HOP_ID_LEN]);
/* The parent chosen for outbound tag (its hop id in parent, "" when none);
 * several: no rule chose one while several inbound requests were open (the
 * response-id rule may yet). Forgets the tag; counts nothing (hop_link_count). */
enum hop_rule hop_link_out_take(struct hop_link *hl, uint64_t tag, char parent[HOP_ID_LEN], bool *several);
/* An outbound exchange is written, linked by rule (NONE: unlinked; several:
 * while several inbound requests were open): the counts of hop_link_stats. */
void hop_link_count(struct hop_link *hl, enum hop_rule rule, bool several);
/* Whether pid has had an inbound request open: it serves requests. */
bool hop_link_serves(const struct hop_link *hl, uint32_t pid);
/* Inbound tag was answered (or given up): no longer a parent candidate. */
void hop_link_close(struct hop_link *hl, uint64_t tag);
/* Connection (pid, fd) ended with exchanges never handed over: their tags go. */
void hop_link_close_conn(struct hop_link *hl, uint32_t pid, int fd);
/* The target exited. */
void hop_link_forget_pid(struct hop_link *hl, uint32_t pid);

const struct hop_link_stats *hop_link_stats(const struct hop_link *hl);
const char *hop_rule_name(enum hop_rule r);     /* "header", ...; NULL for NONE */
enum hop_rule hop_rule_of(const char *name);    /* the rule of a name, NONE for NULL */

#endif
