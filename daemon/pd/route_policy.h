/* route_policy.h - how the router picks a worker of one role (pure, no I/O):
 * round-robin, least loaded (the worker's own queue depth as of its last
 * /load, corrected by what the router has sent it since), or by the prompt's
 * prefix (rendezvous hashing: a prefix keeps its worker while that worker is
 * up, and only its share moves when one goes). */
#ifndef KPI_PD_ROUTE_POLICY_H
#define KPI_PD_ROUTE_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct route_worker {
	const char *addr;
	bool up;            /* answered its last /load */
	int reported;       /* waiting + running (+ fetching) in that answer */
	int inflight;       /* the router's requests there now */
	int inflight_then;  /* the router's requests there when that answer came */
};

/* The load the router expects at w now. */
int route_load(const struct route_worker *w);

/* Index of the worker to use among n (those up first; all when none is up),
 * or -1 when n is 0. *rr is the round-robin position, advanced on use;
 * prefix/len matter to ROUTE prefix only. */
int route_pick(const struct route_worker *w, int n, int policy, const void *prefix, size_t len,
	       unsigned *rr);

#endif
