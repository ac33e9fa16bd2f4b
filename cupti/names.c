/* names.c - kernel name interning (see names.h): FNV-1a, linear probing. */
#include "cupti/names.h"

#include <stdlib.h>
#include <string.h>

#define NSLOTS (2 * KPI_NAMES_MAX)

int kpi_names_init(struct kpi_names *t)
{
	t->slot = calloc(NSLOTS, sizeof(*t->slot));
	t->by_id = calloc(KPI_NAMES_MAX + 1, sizeof(*t->by_id));
	t->count = 0;
	if (!t->slot || !t->by_id) {
		kpi_names_free(t);
		return -1;
	}
	return 0;
}

void kpi_names_free(struct kpi_names *t)
{
	if (t->slot)
		for (uint32_t i = 0; i < NSLOTS; i++)
			free(t->slot[i].name);
	free(t->slot);
	free(t->by_id);
	t->slot = NULL;
	t->by_id = NULL;
	t->count = 0;
}

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h;
}

uint32_t kpi_names_intern(struct kpi_names *t, const char *name, int *is_new)
{
	*is_new = 0;
	if (!t->slot || !name)
		return 0;
	uint64_t h = fnv1a(name);
	for (uint32_t i = (uint32_t)(h % NSLOTS);; i = (i + 1) % NSLOTS) {
		struct kpi_name_slot *s = &t->slot[i];
		if (!s->id) {
			if (t->count >= KPI_NAMES_MAX)
				return 0;
			char *copy = strdup(name);
			if (!copy)
				return 0;
			s->hash = h;
			s->name = copy;
			s->id = ++t->count;
			t->by_id[s->id] = copy;
			*is_new = 1;
			return s->id;
		}
		if (s->hash == h && strcmp(s->name, name) == 0)
			return s->id;
	}
}

const char *kpi_names_get(const struct kpi_names *t, uint32_t id)
{
	return t->by_id && id && id <= t->count ? t->by_id[id] : NULL;
}
