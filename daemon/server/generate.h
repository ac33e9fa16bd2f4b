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

/* The prompt's token ids (taken from ar or tokenized), or NULL after a 400. */
int32_t *generate_prompt(struct conn *c, struct api_request *ar, int *n_prompt);

#endif
