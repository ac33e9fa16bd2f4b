/* links.c - BPF links destroyed at once (links.h). */
#include <pthread.h>
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
	int live = 0, nt = 0;

	for (int i = 0; i < n; i++)
		live += links[i] != NULL;
	for (int i = 0; i < n; i++) {
		if (!links[i])
			continue;
		/* the last one here, and any a thread could not be had for */
		if (live < 2 || nt == LINKS_MAX_THREADS ||
		    pthread_create(&th[nt], NULL, destroy_one, links[i]))
			bpf_link__destroy(links[i]);
		else
			nt++;
		links[i] = NULL;
	}
	while (nt)
		pthread_join(th[--nt], NULL);
}
