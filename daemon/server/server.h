/* server.h - kpi-infer's HTTP/1.1 front end: one non-blocking epoll I/O
 * thread serving the OpenAI-compatible API, with the engine on its own thread
 * (engine_thread.h). docs/server.md describes the behaviour. */
#ifndef KPI_SERVER_H
#define KPI_SERVER_H

#include <stddef.h>

#include "daemon/engine.h"

struct server_config {
	const char *host;
	int port;
	int max_queue;          /* waiting requests before 429 */
	size_t max_body;        /* bytes, else 413 */
	int request_timeout_s;  /* head + body must arrive within this, else 408 */
	int idle_timeout_s;     /* idle keep-alive connections are closed after this */
	int max_conns;          /* open connections; further accepts wait */
	int block_size;         /* KV block size the engine was created with */
	const char *model_label;/* fallback model name (file name) */
	int reasoning_tokens;   /* the first N generated tokens are reasoning (openai.c) */
};

/* Serves until SIGTERM or SIGINT (which the caller has blocked in every
 * thread), then drains: stops accepting, finishes in-flight requests, and
 * returns 0. Returns 1 when the socket cannot be set up (message printed). */
int server_run(struct engine *e, const struct server_config *cfg);

#endif
