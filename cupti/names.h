/* names.h - interned kernel names: records carry a 32-bit id, and each name
 * leaves the process once (kpi_cupti:kernel__name), not in every record. */
#ifndef KPI_CUPTI_NAMES_H
#define KPI_CUPTI_NAMES_H

#include <stdint.h>

#define KPI_NAMES_MAX 65536 /* distinct kernel names kept; more get id 0 */

struct kpi_names {
	struct kpi_name_slot {
		uint64_t hash;
		uint32_t id;   /* 0: empty slot */
		char *name;    /* our copy: CUPTI's may go with its module */
	} *slot;           /* open addressing, 2 * KPI_NAMES_MAX slots */
	char **by_id;      /* by_id[id] == slot name; index 0 unused */
	uint32_t count;
};

int kpi_names_init(struct kpi_names *t);
void kpi_names_free(struct kpi_names *t);
/* The id of name, interning it if new (*is_new set). Returns 0 when the table
 * is full or out of memory. Single-threaded: called on CUPTI's buffer thread. */
uint32_t kpi_names_intern(struct kpi_names *t, const char *name, int *is_new);
/* The name of an id, or NULL. */
const char *kpi_names_get(const struct kpi_names *t, uint32_t id);

#endif
