/* generate.h - completions and chat up to the engine (generate.c). */
#ifndef KPI_SERVER_GENERATE_H
#define KPI_SERVER_GENERATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/server/api.h"

struct conn;

/* POST /v1/completions (chat false) or /v1/chat/completions. */
void generate_handle(struct conn *c, const char *body, size_t len, bool chat);

#endif
