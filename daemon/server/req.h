/* req.h - an inference request from admission until its engine FINISHED event
 * (or its failure before the engine), and the in-flight table by id. */
#ifndef KPI_SERVER_REQ_H
#define KPI_SERVER_REQ_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "daemon/engine.h"
#include "daemon/server/api.h"
#include "daemon/server/http.h"
#include "daemon/server/sbuf.h"
#include "daemon/server/text.h"

/* The table only allocates on growth; with no memory the daemon cannot go on. */
#define uthash_fatal(msg) \
	(fprintf(stderr, "kpi-infer: out of memory for the request table\n"), abort())
#include <uthash.h>

struct conn;
struct kv_fetch;
struct kv_send;

enum req_kind {
	REQ_GENERATE,  /* completions and chat: text back to the client */
	REQ_PREFILL,   /* POST /v1/kv/prefill: the KV stream back to a decode worker */
};

struct req {
	uint64_t id;
	UT_hash_handle hh;         /* srv.reqs, keyed by id */
	enum req_kind kind;
	struct conn *conn;         /* NULL once the client has gone */
	bool chat, stream, include_usage;
	char *stop[API_MAX_STOP];
	int n_stop;
	int n_prompt, max_tokens, n_out;
	bool waiting, stopped, headers_sent, chunked_tx;
	bool finish_pending;       /* its FINISHED event follows in the batch being handled */
	bool submitted;            /* handed to the engine thread */
	struct utf8_stream u8;
	struct sbuf text;          /* generated text, repaired */
	struct sbuf token_ids;     /* return_token_ids: the generated ids, int32 each */
	bool return_token_ids;
	size_t emitted;            /* bytes of text already sent */
	int reasoning_tokens;      /* --reasoning-tokens: its first N tokens are reasoning */
	size_t answer_at;          /* ... and the text before this offset */
	uint64_t t_arrive, t_admit, t_sched, t_first, t_prev;
	long long created;
	char rid[HTTP_MAX_REQUEST_ID + 1];
	int32_t *prompt_ids;       /* kept until submitted (decode: until its KV is in) */
	struct sampling_params sp;
	struct kv_fetch *fetch;    /* decode: the KV on its way from a prefill worker */
	struct kv_send *send;      /* prefill: the KV stream going out */
};

/* The engine put r in the running set (t_ns: the step's start), or took it
 * back to the queue: the waiting count follows. */
void req_scheduled(struct req *r, uint64_t t_ns);
void req_preempted(struct req *r);

void req_insert(struct req *r);
struct req *req_find(uint64_t id);
void req_remove(struct req *r);
void req_free(struct req *r);
void req_free_all(void);

#endif
