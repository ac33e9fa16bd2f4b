/* http_path.h - the agent's HTTP path: one http_track per (pid, fd) of an
 * HTTP-mode target, fed from PAYLOAD / HTTP_CLOSE / SOCK records; each exchange
 * it served becomes a request record with source "http", each one it made as a
 * client an outbound exchange record (docs/agent.md). */
#ifndef KPI_HTTP_PATH_H
#define KPI_HTTP_PATH_H

#include <stdint.h>
#include "http_track.h"
#include "bpf/kpi_event.h"

#define HTTP_PATH_TIMEOUT_NS (60ULL * 1000000000ULL)    /* an exchange fed nothing this long ends */
#define HTTP_PATH_IDLE_NS    (600ULL * 1000000000ULL)   /* an idle connection's tracker is freed */

struct assembler;
struct hop_graph;
struct hop_link;
struct http_path;

/* Records go out through assemble_request_out(a). */
struct http_path *http_path_new(struct assembler *a);
void http_path_free(struct http_path *hp);
/* A PAYLOAD or HTTP_CLOSE record whose fixed part was checked; -1 when a
 * PAYLOAD's captured bytes do not fit size (the caller counts it malformed). */
int http_path_event(struct http_path *hp, const union kpi_event *e, size_t size);
/* Ends exchanges fed nothing for HTTP_PATH_TIMEOUT_NS, frees trackers idle
 * for HTTP_PATH_IDLE_NS; now: CLOCK_MONOTONIC ns. */
void http_path_expire(struct http_path *hp, uint64_t now);
/* The target exited: its exchanges in flight end as closed by the server,
 * its trackers are freed. */
void http_path_forget_pid(struct http_path *hp, uint32_t pid);
/* The outbound exchanges' parents and the connections' ends (hop_link.h). */
struct hop_link *http_path_hops(struct http_path *hp);
/* The recent hops, for the integration overhead of each top-level request (hop_graph.h). */
struct hop_graph *http_path_graph(struct http_path *hp);
/* Sums over every tracker, the freed ones included. */
const struct http_track_stats *http_path_stats(const struct http_path *hp);

#endif
