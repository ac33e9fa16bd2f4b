/* kv_serve.c - a prefill worker's KV stream (kv_serve.h): the request is
 * admitted like a completion of one token; the prefix the cache held leaves
 * at admission, every layer of it; when the engine's step that ends its
 * prefill computes a layer, the rest of that layer's K and V leave at once
 * (from the engine's blocks, pinned until sent, or from the buffer the engine
 * copied them into), so the transfer overlaps the rest
 * of the forward pass; the first token and the sampler's state close the
 * stream. Nothing of the request is kept after it (its full blocks stay in
 * the prefix cache). */
#include "daemon/pd/kv_serve.h"

#include <stddef.h>
#include <string.h>
#include <sys/uio.h>
/* XXH3 inlined, so it is built for this CPU (-march=native: AVX-512 where
 * there is one): 4x the shared library's SSE2 speed on the bytes recv() just
 * put in cache. Same digests either way. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "kpi_probes.h"
#include "abi/kpi_kv_wire.h"
#include "abi/kpi_reasons.h"
#include "daemon/pd/kv_wire.h"
#include "daemon/server/admit.h"
#include "daemon/server/conn.h"
#include "daemon/server/req.h"
#include "daemon/server/state.h"

static const struct kv_model *kvm; /* this worker's (kv_serve_init) */

/* One stream, owned by its connection from the first byte until the last is
 * written (on_sent) or the decode worker goes away (on_gone). */
struct kv_send {
	uint64_t id;
	struct req *r;             /* NULL once the engine has finished the request */
	struct conn *c;
	struct kpi_kv_header hdr;
	XXH3_state_t *xx;
	uint32_t frames_sent;      /* of 2 x n_layers: the cached halves, then the computed ones */
	uint32_t cached;           /* c: positions the cached frames carry */
	uint64_t bytes;            /* KV bytes handed to the connection */
	bool started, ended;       /* first byte written; end frame written */
	uint64_t t_start;
};

static void send_free(struct kv_send *s)
{
	if (s->r)
		s->r->send = NULL;
	if (s->xx)
		XXH3_freeState(s->xx);
	free(s);
}

static void on_sent(struct conn *c, void *owner)
{
	struct kv_send *s = owner;
	if (KPI_KV_SEND_END_ENABLED())
		KPI_KV_SEND_END(s->id, c->fd, s->bytes, KPI_KV_OK);
	srv.m.kv_sent_bytes += s->bytes;
	srv.m.kv_sends++;
	send_free(s);
}

/* The decode worker hung up: the prefill stops here and now. */
static void on_gone(struct conn *c, void *owner)
{
	struct kv_send *s = owner;
	if (KPI_KV_SEND_END_ENABLED() && s->started)
		KPI_KV_SEND_END(s->id, c->fd, s->bytes, KPI_KV_ERR_CANCELLED);
	if (s->r) {
		if (KPI_REQUEST_CANCELLED_ENABLED())
			KPI_REQUEST_CANCELLED(s->id);
		s->r->conn = NULL;
		eth_finish(&srv.eth, s->id, KPI_FINISH_CANCELLED);
	}
	send_free(s);
}

/* Ends a stream that cannot go on: before its first byte an error status,
 * after it the connection closes (the receiver sees a truncated stream). */
static void send_abort(struct kv_send *s, int status, const char *msg)
{
	struct conn *c = s->c;
	if (!c)
		return;
	conn_detach(c);
	if (s->started) {
		if (KPI_KV_SEND_END_ENABLED())
			KPI_KV_SEND_END(s->id, c->fd, s->bytes, status);
		fprintf(stderr, "kpi-infer: KV stream of %s cut short: %s\n", c->rid, msg);
		conn_close(c);
	} else {
		conn_reject(c, 500, KPI_REJECT_INTERNAL, msg, false, NULL);
	}
	if (s->r)
		s->r->conn = NULL;
	send_free(s);
}

void kv_serve_init(const struct kv_model *m)
{
	kvm = m;
}

void kv_serve_handle(struct conn *c, const char *body, size_t len)
{
	char err[512];
	struct api_request ar;
	if (c->has_model_fp && c->model_fp != kvm->fingerprint) {
		snprintf(err, sizeof(err), "this prefill worker serves '%s' (fingerprint %016llx), "
			 "the decode worker expects fingerprint %016llx: start both on the same GGUF "
			 "file", kvm->name, (unsigned long long)kvm->fingerprint,
			 (unsigned long long)c->model_fp);
		conn_reject(c, 409, KPI_REJECT_MODEL_MISMATCH, err, false, NULL);
		return;
	}
	if (!admit_parse(c, body, len, false, &ar)) {
		api_request_free(&ar);
		return;
	}
	int n_prompt = 0;
	int32_t *ids = admit_prompt(c, &ar, &n_prompt);
	struct req *r = NULL;
	struct kv_send *s = NULL;
	if (ids && admit_limits(c, n_prompt, 1, false) > 0) {
		s = calloc(1, sizeof(*s));
		r = s ? admit_req(c, REQ_PREFILL, n_prompt, 1, KPI_OP_KV_PREFILL) : NULL;
		if (!s)
			conn_reject(c, 503, KPI_REJECT_INTERNAL, "out of memory", true, NULL);
	}
	if (!r) {
		free(s);
		free(ids);
		api_request_free(&ar);
		return;
	}
	s->id = r->id;
	s->r = r;
	s->c = c;
	r->send = s;
	kv_wire_header(kvm, (uint32_t)n_prompt, &s->hdr);
	conn_attach(c, s, on_gone, on_sent);
	struct sampling_params sp = {
		.temperature = ar.temperature, .top_p = ar.top_p,
		.seed = ar.has_seed ? ar.seed : r->id * 0x9E3779B97F4A7C15ull ^ r->t_admit,
		.max_tokens = 1, .ignore_eos = ar.ignore_eos,
	};
	r->submitted = true;
	eth_submit_prefill(&srv.eth, r->id, ids, n_prompt, &sp);
	conn_update_events(c);
	api_request_free(&ar);
}

/* The response head and the stream header, with the first layer. */
static void send_start(struct kv_send *s, struct sbuf *b)
{
	struct conn *c = s->c;
	uint64_t total = kpi_kv_stream_bytes(s->hdr.n_layers, s->hdr.payload_bytes);
	c->resp_status = 200;
	c->out_unlimited = true; /* bounded by its own size, not by OUT_LIMIT */
	conn_resp_head(b, c, 200, KPI_KV_CONTENT_TYPE, (long long)total, false, NULL);
	sbuf_add(b, &s->hdr, sizeof(s->hdr));
	s->xx = XXH3_createState();
	if (s->xx) { /* the header too: its block size orders the payload */
		XXH3_64bits_reset(s->xx);
		XXH3_64bits_update(s->xx, &s->hdr, sizeof(s->hdr));
	}
	s->started = true;
	s->t_start = eth_now_ns();
	if (KPI_KV_SEND_START_ENABLED()) {
		char peer[80];
		conn_peer(c, peer, sizeof(peer));
		int blocks = (int)((s->hdr.n_tokens + s->hdr.block_size - 1) / s->hdr.block_size);
		KPI_KV_SEND_START(s->id, c->rid, c->fd, s->hdr.payload_bytes, blocks, peer);
	}
}

static void add_frame(struct kv_send *s, struct sbuf *b, uint32_t layer, uint32_t first,
		      uint32_t n_pos, uint64_t bytes)
{
	struct kpi_kv_layer lf = { KPI_KV_LAYER_MAGIC, layer, first, n_pos, bytes };
	sbuf_add(b, &lf, sizeof(lf));
	s->frames_sent++;
}

static void unpin(void *pin)
{
	eth_kv_unpin(&srv.eth, pin);
}

/* One layer's K/V of positions [first_pos, first_pos + n_pos): the cached
 * prefix at admission (first_pos 0, n_pos c), or the computed rest. It
 * leaves from where the engine left it: the pool's blocks (pinned until the
 * socket took them), or the buffer it was copied into. */
static void send_layer(struct kv_send *s, struct eth_event *ev)
{
	const struct kpi_kv_header *h = &s->hdr;
	struct engine_kv_out *kv = &ev->kv;
	struct sbuf head = { 0 };
	if (!s->started) {
		send_start(s, &head);
		if (kv->first_pos == 0 && (uint32_t)kv->n_pos == h->n_tokens)
			for (uint32_t l = 0; l < h->n_layers; l++) /* nothing was cached */
				add_frame(s, &head, l, 0, 0, 0);
		else
			s->cached = (uint32_t)kv->n_pos;
	}
	bool second = s->frames_sent >= h->n_layers;
	uint32_t layer = s->frames_sent % h->n_layers;
	uint32_t first = second ? s->cached : 0, count = second ? h->n_tokens - s->cached : s->cached;
	uint64_t want = 2ull * h->n_kv_heads * count * h->head_dim * kpi_kv_dtype_bytes(h->dtype);
	uint32_t chunks = (count + h->block_size - 1) / h->block_size;
	bool have = (kv->data || kv->iov) && kv->digests;
	if (!have || kv->len != want || (uint32_t)kv->n_chunks != chunks || (uint32_t)kv->layer != layer ||
	    (uint32_t)kv->first_pos != first || (uint32_t)kv->n_pos != count) {
		sbuf_free(&head);
		send_abort(s, KPI_KV_ERR_SIZE, have ? "the engine gave a layer out of order" :
			   "out of memory for a KV layer");
		return;
	}
	add_frame(s, &head, layer, first, count, kv->len);
	if (s->xx) /* each block's digest, taken by the engine (abi/kpi_kv_wire.h) */
		XXH3_64bits_update(s->xx, kv->digests, sizeof(uint64_t) * (size_t)kv->n_chunks);
	s->bytes += kv->len;
	struct conn *c = s->c;
	if (kv->iov) {
		conn_send(c, head.data, head.len, false);
		struct engine_kv_pin *pin = kv->pin;
		kv->pin = NULL; /* the connection has them now: released once sent */
		conn_send_runs(c, kv->iov, kv->n_iov, false, unpin, pin);
		kv->iov = NULL;
	} else {
		struct iovec iov[2] = { { head.data, head.len }, { kv->data, kv->len } };
		kv->data = NULL; /* the connection has it now: sent from where it stands */
		conn_sendv_owned(c, iov, 2, false, engine_kv_buffer_free);
	}
	sbuf_free(&head);
}

static void send_end(struct kv_send *s, const struct eth_event *ev)
{
	if (s->frames_sent != 2 * s->hdr.n_layers || !s->xx) {
		send_abort(s, KPI_KV_ERR_FRAME, "the prefill ended before every KV layer was sent");
		return;
	}
	struct kpi_kv_end end = {
		.magic = KPI_KV_END_MAGIC, .status = KPI_KV_OK, .first_token = ev->ev.token,
		.n_tokens = s->hdr.n_tokens, .sampler_state = ev->ev.sampler_state,
	};
	XXH3_64bits_update(s->xx, &end, offsetof(struct kpi_kv_end, checksum));
	end.checksum = XXH3_64bits_digest(s->xx);
	s->ended = true;
	conn_send(s->c, (const char *)&end, sizeof(end), true); /* on_sent may free s */
}

static void prefill_metrics(struct req *r, const struct eth_event *ev)
{
	if (ev->ev.kind == ENGINE_EV_TOKEN) {
		r->t_first = ev->t_ns;
		metrics_observe(&srv.m, MH_TTFT, (double)(ev->t_ns - r->t_arrive) / 1e9);
		return;
	}
	enum kpi_finish_reason reason = ev->ev.reason;
	if (reason >= KPI_FINISH_STOP && reason <= KPI_FINISH_ERROR)
		srv.m.success[reason]++;
	metrics_observe(&srv.m, MH_E2E, (double)(ev->t_ns - r->t_arrive) / 1e9);
	metrics_observe(&srv.m, MH_PROMPT_TOKENS, r->n_prompt);
	if (r->t_sched)
		metrics_observe(&srv.m, MH_QUEUE, (double)(r->t_sched - r->t_admit) / 1e9);
	if (r->t_sched && r->t_first)
		metrics_observe(&srv.m, MH_PREFILL, (double)(r->t_first - r->t_sched) / 1e9);
}

void kv_serve_event(struct req *r, struct eth_event *ev)
{
	struct kv_send *s = r->send;
	switch ((int)ev->ev.kind) {
	case ETH_EV_KV_LAYER:
		if (s && s->c)
			send_layer(s, ev);
		break;
	case ENGINE_EV_SCHEDULED:
		req_scheduled(r, ev->t_ns);
		break;
	case ENGINE_EV_PREEMPTED:
		req_preempted(r);
		break;
	case ENGINE_EV_TOKEN:
		prefill_metrics(r, ev);
		if (s && s->c && !s->ended)
			send_end(s, ev);
		break;
	case ENGINE_EV_FINISHED:
	case ETH_EV_SUBMIT_FAILED:
		if (r->waiting)
			srv.n_waiting--;
		srv.n_active--;
		req_remove(r);
		if (ev->ev.kind == ENGINE_EV_FINISHED)
			prefill_metrics(r, ev);
		s = r->send;
		if (s && s->c && !s->ended) {
			if (ev->ev.kind == ETH_EV_SUBMIT_FAILED) {
				struct conn *c = s->c;
				conn_detach(c);
				s->r = NULL;
				r->send = NULL;
				send_free(s);
				conn_reject(c, 400, KPI_REJECT_PROMPT_TOO_LONG, ev->err, false, NULL);
			} else {
				send_abort(s, KPI_KV_ERR_UPSTREAM, "the engine failed the prefill");
			}
		}
		if (r->send)
			r->send->r = NULL;
		req_free(r);
		break;
	}
}
