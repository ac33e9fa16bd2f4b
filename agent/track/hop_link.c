/* hop_link.c - the parent of each outbound exchange of a target, by the rules
 * of hop_link.h in order; the ends of the targets' TCP connections and names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include "hop_link.h"
#include "agent/host/peer_addr.h"

struct sock_ent {
	UT_hash_handle hh;
	uint64_t key;                   /* pid << 32 | fd */
	struct hop_ends ends;
};

struct comm_ent {
	UT_hash_handle hh;
	uint32_t pid;
	char comm[16];
};

/* An inbound request open on its process, or an outbound one whose parent
 * was chosen and not yet taken. */
struct hop_ent {
	UT_hash_handle hh;
	uint64_t tag;
	uint64_t conn;                  /* pid << 32 | fd */
	uint32_t pid, tid;
	bool out;
	bool several;                   /* out, unlinked: several inbound requests were open */
	enum hop_rule rule;             /* out: the rule that chose parent */
	char hop_id[HOP_ID_LEN];        /* in: its own; out: its parent's */
	char hdr[HOP_HDR_LEN];
};

/* A process that has had an inbound request open. */
struct serves_ent {
	UT_hash_handle hh;
	uint32_t pid;
};

struct hop_link {
	struct serves_ent *serves;
	struct sock_ent *socks;
	struct comm_ent *comms;
	struct hop_ent *hops;
	uint64_t next_tag;
	struct hop_link_stats st;
};

static uint64_t conn_key(uint32_t pid, int fd)
{
	return (uint64_t)pid << 32 | (uint32_t)fd;
}

struct hop_link *hop_link_new(void)
{
	return calloc(1, sizeof(struct hop_link));
}

void hop_link_free(struct hop_link *hl)
{
	struct sock_ent *s, *st;
	struct comm_ent *c, *ct;
	struct hop_ent *h, *ht;

	if (!hl)
		return;
	HASH_ITER(hh, hl->socks, s, st) {
		HASH_DEL(hl->socks, s);
		free(s);
	}
	HASH_ITER(hh, hl->comms, c, ct) {
		HASH_DEL(hl->comms, c);
		free(c);
	}
	HASH_ITER(hh, hl->hops, h, ht) {
		HASH_DEL(hl->hops, h);
		free(h);
	}
	struct serves_ent *sv, *svt;
	HASH_ITER(hh, hl->serves, sv, svt) {
		HASH_DEL(hl->serves, sv);
		free(sv);
	}
	free(hl);
}

void hop_link_sock(struct hop_link *hl, const struct kpi_ev_sock *e)
{
	uint64_t key = conn_key(e->h.pid, e->fd);
	struct sock_ent *s;

	if (e->family != 2 && e->family != 10)
		return;
	HASH_FIND(hh, hl->socks, &key, sizeof(key), s);
	if (!s) {
		if (!(s = calloc(1, sizeof(*s))))
			return;
		s->key = key;
		HASH_ADD(hh, hl->socks, key, sizeof(s->key), s);
	}
	/* this host's addresses in full, others as the trace's keyed hash */
	peer_addr_format(s->ends.local, sizeof(s->ends.local), e->family, e->laddr, e->lport);
	peer_addr_format(s->ends.peer, sizeof(s->ends.peer), e->family, e->raddr, e->rport);
}

bool hop_link_ends(const struct hop_link *hl, uint32_t pid, int fd, struct hop_ends *out)
{
	uint64_t key = conn_key(pid, fd);
	struct sock_ent *s;

	HASH_FIND(hh, hl->socks, &key, sizeof(key), s);
	if (s)
		*out = s->ends;
	else
		out->local[0] = out->peer[0] = 0;
	return s != NULL;
}

const char *hop_link_comm(struct hop_link *hl, uint32_t pid)
{
	struct comm_ent *c;
	char path[64];
	FILE *f;

	HASH_FIND(hh, hl->comms, &pid, sizeof(pid), c);
	if (c)
		return c->comm;
	if (!(c = calloc(1, sizeof(*c))))
		return "";
	c->pid = pid;
	snprintf(path, sizeof(path), "/proc/%u/comm", pid);
	if ((f = fopen(path, "r"))) {
		if (fgets(c->comm, sizeof(c->comm), f))
			c->comm[strcspn(c->comm, "\n")] = 0;
		fclose(f);
	}
	HASH_ADD(hh, hl->comms, pid, sizeof(c->pid), c);
	return c->comm;
}

void hop_link_hop_id(uint32_t pid, uint64_t ts, char out[HOP_ID_LEN])
{
	snprintf(out, HOP_ID_LEN, "%u.%llu", pid, (unsigned long long)ts);
}

static struct hop_ent *ent_add(struct hop_link *hl, uint32_t pid, int fd, uint32_t tid,
			       const char *hdr, bool out)
{
	struct hop_ent *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	h->tag = ++hl->next_tag;
	h->conn = conn_key(pid, fd);
	h->pid = pid;
	h->tid = tid;
	h->out = out;
	snprintf(h->hdr, sizeof(h->hdr), "%s", hdr);
	HASH_ADD(hh, hl->hops, tag, sizeof(h->tag), h);
	return h;
}

uint64_t hop_link_in_open(struct hop_link *hl, uint32_t pid, int fd, uint32_t tid,
			  const char *hdr, uint64_t ts)
{
	struct hop_ent *h = ent_add(hl, pid, fd, tid, hdr, false);
	struct serves_ent *sv;

	HASH_FIND(hh, hl->serves, &pid, sizeof(pid), sv);
	if (!sv && (sv = calloc(1, sizeof(*sv)))) {
		sv->pid = pid;
		HASH_ADD(hh, hl->serves, pid, sizeof(sv->pid), sv);
	}

	if (!h)
		return 0;
	hop_link_hop_id(pid, ts, h->hop_id);
	return h->tag;
}

/* The one open inbound request of pid that keep() accepts; NULL when none
 * or several (*several says which). */
static const struct hop_ent *only_open(const struct hop_link *hl, uint32_t pid,
				       bool (*keep)(const struct hop_ent *, const void *),
				       const void *arg, bool *several)
{
	const struct hop_ent *h, *tmp, *found = NULL;

	HASH_ITER(hh, hl->hops, h, tmp) {
		if (h->out || h->pid != pid || (keep && !keep(h, arg)))
			continue;
		if (found) {
			*several = true;
			return NULL;
		}
		found = h;
	}
	return found;
}

static bool same_hdr(const struct hop_ent *h, const void *hdr)
{
	return h->hdr[0] && !strcmp(h->hdr, hdr);
}

static bool same_tid(const struct hop_ent *h, const void *tid)
{
	return h->tid == *(const uint32_t *)tid;
}

uint64_t hop_link_out_open(struct hop_link *hl, uint32_t pid, int fd, uint32_t tid,
			   const char *hdr, uint64_t ts, char parent[HOP_ID_LEN])
{
	const struct hop_ent *p = NULL;
	bool several = false;
	enum hop_rule rule = HOP_RULE_NONE;
	struct hop_ent *h;

	(void)ts;
	if (hdr[0] && (p = only_open(hl, pid, same_hdr, hdr, &several)))
		rule = HOP_RULE_HEADER;
	else if (tid && (p = only_open(hl, pid, same_tid, &tid, &several)))
		rule = HOP_RULE_THREAD;
	else if ((p = only_open(hl, pid, NULL, NULL, &several)))
		rule = HOP_RULE_LOOP;
	parent[0] = 0;
	if (p)
		memcpy(parent, p->hop_id, HOP_ID_LEN);
	h = ent_add(hl, pid, fd, tid, hdr, true);
	if (!h)
		return 0;
	h->rule = rule;
	h->several = !p && several;
	memcpy(h->hop_id, parent, sizeof(h->hop_id));
	return h->tag;
}

enum hop_rule hop_link_out_take(struct hop_link *hl, uint64_t tag, char parent[HOP_ID_LEN], bool *several)
{
	struct hop_ent *h;
	enum hop_rule rule = HOP_RULE_NONE;

	parent[0] = 0;
	*several = false;
	HASH_FIND(hh, hl->hops, &tag, sizeof(tag), h);
	if (h && h->out) {
		rule = h->rule;
		*several = h->several;
		memcpy(parent, h->hop_id, HOP_ID_LEN);
		HASH_DEL(hl->hops, h);
		free(h);
	}
	return rule;
}

void hop_link_count(struct hop_link *hl, enum hop_rule rule, bool several)
{
	hl->st.links[rule]++;
	hl->st.ambiguous += rule == HOP_RULE_NONE && several;
}

bool hop_link_serves(const struct hop_link *hl, uint32_t pid)
{
	struct serves_ent *sv;

	HASH_FIND(hh, hl->serves, &pid, sizeof(pid), sv);
	return sv != NULL;
}

void hop_link_close(struct hop_link *hl, uint64_t tag)
{
	struct hop_ent *h;

	HASH_FIND(hh, hl->hops, &tag, sizeof(tag), h);
	if (h && !h->out) {
		HASH_DEL(hl->hops, h);
		free(h);
	}
}

static void drop_where(struct hop_link *hl, uint64_t conn, uint32_t pid)
{
	struct hop_ent *h, *tmp;

	HASH_ITER(hh, hl->hops, h, tmp) {
		if (conn ? h->conn != conn : h->pid != pid)
			continue;
		HASH_DEL(hl->hops, h);
		free(h);
	}
}

void hop_link_close_conn(struct hop_link *hl, uint32_t pid, int fd)
{
	drop_where(hl, conn_key(pid, fd), 0);
}

void hop_link_forget_pid(struct hop_link *hl, uint32_t pid)
{
	struct sock_ent *s, *st;
	struct comm_ent *c;

	drop_where(hl, 0, pid);
	HASH_ITER(hh, hl->socks, s, st) {
		if (s->key >> 32 != pid)
			continue;
		HASH_DEL(hl->socks, s);
		free(s);
	}
	HASH_FIND(hh, hl->comms, &pid, sizeof(pid), c);
	if (c) {
		HASH_DEL(hl->comms, c);
		free(c);
	}
	struct serves_ent *sv;
	HASH_FIND(hh, hl->serves, &pid, sizeof(pid), sv);
	if (sv) {
		HASH_DEL(hl->serves, sv);
		free(sv);
	}
}

const struct hop_link_stats *hop_link_stats(const struct hop_link *hl)
{
	return &hl->st;
}

const char *hop_rule_name(enum hop_rule r)
{
	static const char *const names[HOP_RULE__COUNT] = { NULL, "header", "thread", "loop", "response_id" };

	return r >= 0 && r < HOP_RULE__COUNT ? names[r] : NULL;
}

enum hop_rule hop_rule_of(const char *name)
{
	for (int r = 1; name && r < HOP_RULE__COUNT; r++)
		if (!strcmp(name, hop_rule_name(r)))
			return r;
	return HOP_RULE_NONE;
}
