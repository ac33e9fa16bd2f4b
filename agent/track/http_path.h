/* http_path.h - the agent's HTTP path: one http_track per (pid, fd) of an
 * HTTP-mode target, fed from PAYLOAD / HTTP_CLOSE / SOCK records; each exchange
 * it served becomes a request record with source "http", each one it made as a
 * client an outbound exchange record (docs/agent.md). */
#ifndef KPI_HTTP_PATH_H
#define KPI_HTTP_PATH_H

#include <stdint.h>
#include "agent/track/http/http2_track.h"
#include "agent/track/http/http_track.h"
#include "bpf/kpi_event.h"

#define HTTP_PATH_TIMEOUT_NS (60ULL * 1000000000ULL)    /* an exchange fed nothing this long ends
							 * (the default: kpi-agent --http-timeout) */
#define HTTP_PATH_IDLE_NS    (600ULL * 1000000000ULL)   /* an idle connection's tracker is freed */

struct bus;
struct split_stats;
struct hop_graph;
struct relay_stats;
struct trajectory_stats;
struct hop_link;
struct http_path;

/* Whether pid's TLS is read through its libssl (agent/tls.c's answer). */
struct http_tls_query {
	bool (*readable)(void *ctx, uint32_t pid);
	void *ctx;
};

/* What the TLS connections came to. */
struct http_tls_stats {
	uint64_t conns;                 /* connections seen to be TLS */
	uint64_t unreadable;            /* of them, of a process whose libssl is not probed */
	uint64_t unplaced;              /* SSL calls whose socket could not be told */
	uint64_t cipher_skipped;        /* socket reads/writes of TLS connections not parsed */
};

/* Records go out on bus (an inbound exchange through bus_request_or_hold once
 * its inferred split is decided: http_path_flush; an outbound one through
 * bus_exchange_out), where the hop graph subscribes here. NULL when out of
 * memory. */
struct http_path *http_path_new(struct bus *bus);
void http_path_free(struct http_path *hp);
/* Where a TLS connection's process is asked about (unset: no TLS is read). */
void http_path_set_tls(struct http_path *hp, struct http_tls_query q);
/* A PAYLOAD, TLS_PAYLOAD or HTTP_CLOSE record whose fixed part was checked;
 * -1 when a payload's captured bytes do not fit size (the caller counts it
 * malformed).  A connection whose first bytes are a TLS record is fed the
 * plaintext of its TLS_PAYLOAD records only. */
int http_path_event(struct http_path *hp, const union kpi_event *e, size_t size);
void http_path_set_timeout(struct http_path *hp, uint64_t ns);
/* Ends exchanges fed nothing for the timeout (HTTP_PATH_TIMEOUT_NS unless
 * set), frees trackers idle for HTTP_PATH_IDLE_NS; now: CLOCK_MONOTONIC ns. */
void http_path_expire(struct http_path *hp, uint64_t now);
/* Hands out the inbound records whose split is decided (split_infer.h:
 * SPLIT_SETTLE_NS past their first token; every one when final). */
void http_path_flush(struct http_path *hp, uint64_t now, bool final);
/* The target exited: its exchanges in flight end as closed by the server,
 * its records go out, its trackers are freed. */
void http_path_forget_pid(struct http_path *hp, uint32_t pid);
/* The agent stops: the calls held for the response-id rule go out as they
 * are, the tasks of processes that serve nothing end (before the last flush). */
void http_path_finish(struct http_path *hp);
/* --task-idle-gap (agent/track/trajectory.h). */
void http_path_set_task_idle_gap(struct http_path *hp, uint64_t ns);
/* What the tasks and the response-id rule came to. */
const struct trajectory_stats *http_path_tasks(const struct http_path *hp);
const struct relay_stats *http_path_relay(const struct http_path *hp);
/* What the split inference decided, by rule and reason. */
const struct split_stats *http_path_split_stats(const struct http_path *hp);
/* Whether a served request is in flight, or ended and held before its row
 * (the inferred split): its row, and what it cost, are still to come. */
bool http_path_in_flight(const struct http_path *hp);
/* The outbound exchanges' parents and the connections' ends (hop_link.h). */
struct hop_link *http_path_hops(struct http_path *hp);
/* Sums over every tracker, the freed ones included. */
const struct http_track_stats *http_path_stats(const struct http_path *hp);
/* What the HTTP/2 connections came to (http2_track.h), the same way. */
const struct http2_track_stats *http_path_h2_stats(const struct http_path *hp);
const struct http_tls_stats *http_path_tls_stats(const struct http_path *hp);

#endif
