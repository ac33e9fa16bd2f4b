/* route_policy.c - the router's three policies (route_policy.h). */
#include "daemon/pd/route_policy.h"

#include <string.h>
#include <xxhash.h>

#include "abi/kpi_reasons.h"

int route_load(const struct route_worker *w)
{
	/* the answer counted the router's requests of that moment; those sent or
	 * ended since shift it, and it is never below what is in flight now */
	int load = w->reported + w->inflight - w->inflight_then;
	return load > w->inflight ? load : w->inflight;
}

int route_pick(const struct route_worker *w, int n, int policy, const void *prefix, size_t len,
	       unsigned *rr)
{
	if (n <= 0)
		return -1;
	int n_up = 0;
	for (int i = 0; i < n; i++)
		n_up += w[i].up;
	bool any = n_up == 0; /* none up: every worker is a candidate */
	int best = -1;
	if (policy == KPI_ROUTE_PREFIX) {
		uint64_t best_score = 0;
		for (int i = 0; i < n; i++) {
			if (!any && !w[i].up)
				continue;
			uint64_t seed = XXH3_64bits(w[i].addr, strlen(w[i].addr));
			uint64_t score = XXH3_64bits_withSeed(prefix, len, seed);
			if (best < 0 || score > best_score) {
				best = i;
				best_score = score;
			}
		}
		return best;
	}
	/* round-robin order from *rr; least-loaded takes the first of the least */
	int best_load = 0;
	for (int k = 0; k < n; k++) {
		int i = (int)((*rr + (unsigned)k) % (unsigned)n);
		if (!any && !w[i].up)
			continue;
		if (policy != KPI_ROUTE_LEAST_LOADED) {
			best = i;
			break;
		}
		int load = route_load(&w[i]);
		if (best < 0 || load < best_load) {
			best = i;
			best_load = load;
		}
	}
	*rr = (unsigned)best + 1;
	return best;
}
