/* server.h - kpi-infer's HTTP/1.1 front end: one non-blocking epoll I/O
 * thread serving the OpenAI-compatible API, with the engine on its own thread
 * (engine_thread.h), in one of four roles (docs/server.md,
 * docs/disaggregation.md). */
#ifndef KPI_SERVER_H
#define KPI_SERVER_H

#include "daemon/engine.h"
#include "daemon/server/config.h"

/* Serves until SIGTERM or SIGINT (which the caller has blocked in every
 * thread), then drains: stops accepting, finishes in-flight requests, and
 * returns 0. Returns 1 when the socket cannot be set up (message printed).
 * e is NULL for the router, which loads no model. */
int server_run(struct engine *e, const struct server_config *cfg);

#endif
