/* links.c - BPF links destroyed at once (links.h). */
#include <pthread.h>
#include <stdbool.h>
#include "links.h"

#define LINKS_MAX_THREADS 64

static void *destroy_one(void *l)
{
	bpf_link__destroy(l);
	return NULL;
}

void links_destroy(struct bpf_link **links, int n)
{
	pthread_t th[LINKS_MAX_THREADS];
	bool started[LINKS_MAX_THREADS] = { false };
	int live = 0;

	for (int i = 0; i < n; i++)
		live += links[i] != NULL;
	for (int i = 0, k = 0; i < n; i++) {
		if (!links[i])
			continue;
		/* the last one here, and any a thread could not be had for */
		if (live > 1 && k < LINKS_MAX_THREADS &&
		    !pthread_create(&th[k], NULL, destroy_one, links[i]))
			started[k++] = true;
		else
			bpf_link__destroy(links[i]);
		links[i] = NULL;
	}
	for (int k = 0; k < LINKS_MAX_THREADS; k++)
		if (started[k])
			pthread_join(th[k], NULL);
}
