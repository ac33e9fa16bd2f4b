/* http_serve.h - the agent's tiny HTTP server for GET /metrics: loopback by
 * default, non-blocking, on its own thread so that a slow scraper never
 * delays draining the BPF ring buffer. */
#ifndef KPI_HTTP_SERVE_H
#define KPI_HTTP_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct http_server;

/* Writes the /metrics body to out: the text format, or proto (the client's
 * Accept named Prometheus' protobuf exposition, prom_proto.h); returns 0
 * (else the client gets a 500). */
typedef int (*http_render_fn)(void *ctx, FILE *out, bool proto);

/* Parses "PORT", "HOST:PORT" or "[V6ADDR]:PORT" (a bare port binds
 * 127.0.0.1).  Returns 0, or -1 with a message in err. */
int http_serve_parse_addr(const char *spec, char *host, size_t hostlen, int *port,
			  char *err, size_t errlen);
/* Binds spec and starts the server thread. */
struct http_server *http_serve_start(const char *spec, http_render_fn render, void *ctx,
				     char *err, size_t errlen);
/* "HOST:PORT" actually bound (the port is the kernel's when 0 was asked). */
const char *http_serve_bound(const struct http_server *s);
/* Stops the thread, closes every socket. */
void http_serve_stop(struct http_server *s);

#endif
