/* kv_fetch.c - a decode worker's KV transfer (kv_fetch.h): POST
 * /v1/kv/prefill to the prefill worker with the prompt's token ids, the
 * sampling fields, the client's x-request-id and this worker's model
 * fingerprint; the answer is read by kv_wire.c's reader straight into the
 * blocks the engine holds for the request (eth_kv_reserve, asked for with
 * the request), or into one payload buffer when they came after the header.
 * Every failure is this request's alone: an error status to its client,
 * kpi:kv__recv_end with the reason, nothing else disturbed. */
#include "daemon/pd/kv_fetch.h"

#include <string.h>

#include "kpi_probes.h"
#include "abi/kpi_kv_wire.h"
#include "abi/kpi_reasons.h"
#include "daemon/pd/kv_wire.h"
#include "daemon/pd/upstream.h"
#include "daemon/server/conn.h"
#include "daemon/server/req.h"
#include "daemon/server/state.h"

static const struct kv_model *kvm; /* this worker's (kv_fetch_init) */

struct kv_fetch {
	struct req *r;
	struct upstream *u;
	char addr[CONN_PREFILL_MAX];
	struct kv_reader rd;
	int http_status;           /* of the prefill worker's answer */
	struct sbuf refusal;       /* its error body, when not 200 */
	bool recv_started;
	int blocks;                /* this worker's blocks for the prompt */
	struct engine_kv_in *held; /* the engine's blocks the KV goes into (NULL: a buffer) */
	uint64_t t_start;
};

/* Ends an unsubmitted request: out of the table and the counts. */
static void end_request(struct req *r)
{
	struct kv_fetch *f = r->fetch;
	if (r->waiting)
		srv.n_waiting--;
	srv.n_active--;
	srv.n_fetching--;
	req_remove(r);
	if (r->conn && r->conn->owner == r)
		conn_detach(r->conn);
	kv_reader_free(&f->rd);
	sbuf_free(&f->refusal);
	if (f->held) { /* what went into them is not used */
		eth_kv_release(&srv.eth, r->id);
		free(f->held);
	}
	free(f);
	r->fetch = NULL;
	req_free(r);
}

static void recv_end_probe(struct kv_fetch *f, int status)
{
	if (KPI_KV_RECV_END_ENABLED())
		KPI_KV_RECV_END(f->r->id, f->u ? upstream_fd(f->u) : -1, f->rd.received, f->blocks,
				status);
}

/* The transfer failed: status (enum kpi_kv_status), the client's answer
 * http (502, or what the prefill worker's refusal calls for), and why. */
static void fetch_fail(struct kv_fetch *f, int status, int http, const char *why)
{
	struct req *r = f->r;
	recv_end_probe(f, status);
	if (status > 0 && status < KPI_KV_ERR__COUNT)
		srv.m.kv_errors[status]++;
	if (f->u) {
		upstream_abort(f->u);
		f->u = NULL;
	}
	struct conn *c = r->conn;
	if (c) {
		char msg[512];
		snprintf(msg, sizeof(msg), "KV transfer from prefill worker %s failed (%s): %s",
			 f->addr, kpi_kv_status_name(status), why);
		conn_detach(c);
		r->conn = NULL;
		int reason = status == KPI_KV_ERR_UPSTREAM || status == KPI_KV_ERR_TIMEOUT ?
			KPI_REJECT_UPSTREAM : KPI_REJECT_KV_TRANSFER;
		conn_reject(c, http, http == 429 ? KPI_REJECT_QUEUE_FULL : reason, msg, false,
			    http == 429 || http == 503 ? "Retry-After: 1\r\n" : NULL);
	}
	end_request(r);
}

/* The KV is in and checked: to the engine with the request. */
static void fetch_done(struct kv_fetch *f)
{
	struct req *r = f->r;
	recv_end_probe(f, KPI_KV_OK);
	srv.m.kv_received_bytes += f->rd.received;
	srv.m.kv_transfers++;
	srv.m.kv_received_in_place += f->held != NULL;
	metrics_observe(&srv.m, MH_KV_TRANSFER, (double)(eth_now_ns() - f->t_start) / 1e9);
	struct engine_kv_import kv = {
		.n_tokens = r->n_prompt, .first_token = f->rd.end.first_token,
		.sampler_state = f->rd.end.sampler_state, .data = kv_reader_take_payload(&f->rd),
	};
	f->u = NULL; /* back in the pool, or closed, by upstream.c */
	kv_reader_free(&f->rd);
	sbuf_free(&f->refusal);
	free(f->held); /* the blocks go with the submit: kv.data NULL */
	free(f);
	r->fetch = NULL;
	srv.n_fetching--;
	r->submitted = true;
	eth_submit_decode(&srv.eth, r->id, r->prompt_ids, r->n_prompt, &r->sp, &kv);
	r->prompt_ids = NULL;
	if (r->conn)
		conn_update_events(r->conn);
}

/* ---- the prefill worker's answer (upstream ops) ---- */

static void on_head(struct upstream *u, void *owner, const struct http_response *h,
		    const char *head)
{
	struct kv_fetch *f = owner;
	f->http_status = h->status;
	if (h->status != 200)
		return; /* its JSON error body follows */
	uint64_t payload = kpi_kv_payload_bytes(kvm->n_layers, (uint32_t)f->r->n_prompt,
						kvm->n_kv_heads, kvm->head_dim, kvm->dtype);
	uint64_t want = kpi_kv_stream_bytes(kvm->n_layers, payload);
	char why[256];
	if (!h->content_type || !http_token_eq(h->content_type, h->content_type_len,
					       KPI_KV_CONTENT_TYPE)) {
		snprintf(why, sizeof(why), "answered 200 without Content-Type %s: not a kpi-infer "
			 "--role prefill", KPI_KV_CONTENT_TYPE);
		fetch_fail(f, KPI_KV_ERR_MAGIC, 502, why);
	} else if (h->content_length < 0 || (uint64_t)h->content_length != want) {
		snprintf(why, sizeof(why), "it announces %lld bytes; the KV of this prompt (%d "
			 "tokens) and its frames are %llu", h->content_length, f->r->n_prompt,
			 (unsigned long long)want);
		fetch_fail(f, KPI_KV_ERR_SIZE, 502, why);
	}
}

static int body_iov(struct upstream *u, void *owner, struct iovec *iov, int max)
{
	struct kv_fetch *f = owner;
	if (f->http_status != 200)
		return 0;
	return kv_reader_want_iov(&f->rd, iov, max);
}

static void body_got(struct upstream *u, void *owner, size_t n, bool last)
{
	struct kv_fetch *f = owner;
	enum kv_reader_stage st = kv_reader_got(&f->rd, n);
	if (!f->recv_started && st != KVR_HEADER && st != KVR_FAILED) {
		f->recv_started = true;
		f->t_start = eth_now_ns();
		if (KPI_KV_RECV_START_ENABLED())
			KPI_KV_RECV_START(f->r->id, f->r->rid, upstream_fd(u), f->rd.hdr.payload_bytes,
					  f->blocks, f->addr);
	}
	if (st == KVR_FAILED)
		fetch_fail(f, f->rd.status, 502, f->rd.err);
	else if (st == KVR_DONE)
		fetch_done(f);
	else if (last)
		fetch_fail(f, KPI_KV_ERR_TRUNCATED, 502, "the stream ended before its end frame");
}

/* A refusal's JSON body ({"error":{"message":...}}): kept for the message. */
static void on_body(struct upstream *u, void *owner, const char *p, size_t n, bool last)
{
	struct kv_fetch *f = owner;
	if (f->refusal.len < 2048)
		sbuf_add(&f->refusal, p, n);
	if (!last)
		return;
	char why[640];
	const char *m = f->refusal.data ? strstr(f->refusal.data, "\"message\":\"") : NULL;
	int ml = 0;
	if (m) {
		m += 11;
		while (m[ml] && m[ml] != '"' && ml < 400)
			ml++;
	}
	snprintf(why, sizeof(why), "it answered %d: %.*s", f->http_status, m ? ml : 0, m ? m : "");
	int http = f->http_status == 429 ? 429 : f->http_status == 503 ? 503 : 502;
	fetch_fail(f, f->http_status == 409 ? KPI_KV_ERR_MODEL : KPI_KV_ERR_UPSTREAM, http, why);
}

static void on_error(struct upstream *u, void *owner, enum upstream_error e, const char *msg)
{
	struct kv_fetch *f = owner;
	f->u = NULL; /* already closed */
	int status = e == UPSTREAM_TIMEOUT ? KPI_KV_ERR_TIMEOUT :
		e == UPSTREAM_IO && f->recv_started ? KPI_KV_ERR_TRUNCATED : KPI_KV_ERR_UPSTREAM;
	fetch_fail(f, status, e == UPSTREAM_TIMEOUT ? 504 : 502, msg);
}

static const struct upstream_ops fetch_ops = {
	.on_head = on_head, .on_body = on_body, .body_iov = body_iov, .body_got = body_got,
	.on_error = on_error,
};

void kv_fetch_init(const struct kv_model *m)
{
	kvm = m;
}

void kv_fetch_start(struct req *r, const char *addr)
{
	struct kv_fetch *f = calloc(1, sizeof(*f));
	if (!f) {
		/* not counted as fetching yet: it ends as a refused request */
		if (r->waiting)
			srv.n_waiting--;
		srv.n_active--;
		req_remove(r);
		if (r->conn) {
			conn_detach(r->conn);
			conn_reject(r->conn, 503, KPI_REJECT_INTERNAL, "out of memory", true, NULL);
		}
		req_free(r);
		return;
	}
	f->r = r;
	r->fetch = f;
	srv.n_fetching++;
	snprintf(f->addr, sizeof(f->addr), "%s", addr);
	f->blocks = (r->n_prompt + (int)kvm->block_size - 1) / (int)kvm->block_size;
	kv_reader_init(&f->rd, kvm, (uint32_t)r->n_prompt);
	/* blocks to receive into, asked for now: the engine's answer comes long
	 * before the prefill worker's first KV byte unless it is mid-step */
	eth_kv_reserve(&srv.eth, r->id, r->n_prompt);

	struct sbuf body = { 0 }, req = { 0 };
	sbuf_adds(&body, "{\"prompt\":[");
	for (int i = 0; i < r->n_prompt; i++)
		sbuf_printf(&body, i ? ",%d" : "%d", r->prompt_ids[i]);
	sbuf_printf(&body, "],\"max_tokens\":1,\"temperature\":%.9g,\"top_p\":%.9g,\"seed\":%lld,"
		    "\"ignore_eos\":%s}", r->sp.temperature, r->sp.top_p, (long long)r->sp.seed,
		    r->sp.ignore_eos ? "true" : "false");
	sbuf_printf(&req, "POST " KPI_KV_PATH " HTTP/1.1\r\nHost: %s\r\nContent-Type: "
		    "application/json\r\nContent-Length: %zu\r\nx-request-id: %s\r\n"
		    KPI_KV_MODEL_HEADER ": %016llx\r\n\r\n", addr, body.len, r->rid,
		    (unsigned long long)kvm->fingerprint);
	sbuf_add(&req, body.data, body.len);
	sbuf_free(&body);
	char err[256];
	f->u = upstream_start(addr, req.data, req.len, &fetch_ops, f, err, sizeof(err));
	sbuf_free(&req);
	if (!f->u)
		fetch_fail(f, KPI_KV_ERR_UPSTREAM, 502, err);
}

void kv_fetch_held(struct req *r, struct eth_event *ev)
{
	struct kv_fetch *f = r->fetch;
	if (!ev->held || f->held || !kv_reader_into(&f->rd, ev->held))
		return; /* refused (ev->err), or too late: the header is in and chose a buffer
			 * (eth_event_free gives the blocks back); the KV is copied in at admission */
	f->held = ev->held;
	ev->held = NULL;
}

void kv_fetch_cancel(struct req *r)
{
	struct kv_fetch *f = r->fetch;
	recv_end_probe(f, KPI_KV_ERR_CANCELLED);
	srv.m.kv_errors[KPI_KV_ERR_CANCELLED]++;
	if (f->u)
		upstream_abort(f->u);
	f->u = NULL;
	r->conn = NULL;
	end_request(r);
}
