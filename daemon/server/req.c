/* req.c - the in-flight request table: requests by their engine id, from
 * admission to their FINISHED event (uthash, as the agent's in-flight maps). */
#include "daemon/server/req.h"

#include "daemon/server/state.h"

void req_scheduled(struct req *r, uint64_t t_ns)
{
	if (r->waiting) {
		r->waiting = false;
		srv.n_waiting--;
	}
	if (!r->t_sched)
		r->t_sched = t_ns;
}

void req_preempted(struct req *r)
{
	if (!r->waiting) {
		r->waiting = true;
		srv.n_waiting++;
	}
}

void req_insert(struct req *r)
{
	HASH_ADD(hh, srv.reqs, id, sizeof(r->id), r);
}

struct req *req_find(uint64_t id)
{
	struct req *r;
	HASH_FIND(hh, srv.reqs, &id, sizeof(id), r);
	return r;
}

void req_remove(struct req *r)
{
	HASH_DEL(srv.reqs, r);
}

void req_free(struct req *r)
{
	for (int i = 0; i < r->n_stop; i++)
		free(r->stop[i]);
	sbuf_free(&r->text);
	sbuf_free(&r->token_ids);
	free(r->prompt_ids);
	free(r);
}

/* At exit: requests the engine never finished. */
void req_free_all(void)
{
	struct req *r, *tmp;
	HASH_ITER(hh, srv.reqs, r, tmp) {
		HASH_DEL(srv.reqs, r);
		req_free(r);
	}
}
