/* fanout.c - the engine thread's events, on the I/O thread: each goes to its
 * request (queue state, metrics, text, stop strings) and on to the request's
 * connection, one send() per streamed token; a prefill worker's KV events go
 * to its KV stream (daemon/pd/, pd.h). */
#include "daemon/server/fanout.h"

#include <unistd.h>

#include "abi/kpi_reasons.h"
#include "daemon/pd/pd.h"
#include "daemon/server/conn.h"
#include "daemon/server/openai.h"
#include "daemon/server/req.h"
#include "daemon/server/state.h"

/* Frames body bytes for the wire (HTTP/1.1 chunked, or raw for HTTP/1.0)
 * after the headers when this is the response's first write. */
static void stream_write(struct req *r, struct sbuf *events, bool final)
{
	struct conn *c = r->conn;
	struct sbuf w = { 0 };
	if (!r->headers_sent) {
		r->chunked_tx = c->minor >= 1;
		if (!r->chunked_tx)
			c->close_after = true;
		c->resp_status = 200;
		conn_resp_head(&w, c, 200, "text/event-stream", -1, r->chunked_tx,
			       "Cache-Control: no-cache\r\n");
		r->headers_sent = true;
	}
	if (r->chunked_tx) {
		if (events->len)
			sbuf_printf(&w, "%zx\r\n", events->len);
		sbuf_add(&w, events->data, events->len);
		if (events->len)
			sbuf_adds(&w, "\r\n");
		if (final)
			sbuf_adds(&w, "0\r\n\r\n");
	} else {
		sbuf_add(&w, events->data, events->len);
	}
	conn_send(c, w.data, w.len, final);
	sbuf_free(&w);
}

/* ---- per event ------------------------------------------------------------- */

/* last: the request's final token, its FINISHED event right behind it. */
static void on_token(struct req *r, const struct eth_event *ev, bool last)
{
	if (r->stopped)
		return; /* in flight when the stop string matched: not part of the answer */
	r->n_out++;
	if (ev->ev.first || !r->t_first) {
		r->t_first = ev->t_ns;
		metrics_observe(&srv.m, MH_TTFT, (double)(ev->t_ns - r->t_arrive) / 1e9);
	} else {
		metrics_observe(&srv.m, MH_ITL, (double)(ev->t_ns - r->t_prev) / 1e9);
	}
	r->t_prev = ev->t_ns;
	/* --reasoning-tokens N: the text of the first N tokens is reasoning */
	if (r->n_out <= r->reasoning_tokens)
		r->answer_at = SIZE_MAX;
	else if (r->n_out == r->reasoning_tokens + 1)
		r->answer_at = r->text.len;
	if (!r->conn)
		return; /* the client has gone; the cancel is on its way to the engine */

	int32_t tok = ev->ev.token;
	if (r->return_token_ids)
		sbuf_add(&r->token_ids, &tok, sizeof(tok));
	if (tok != srv.mi->eos_id && tok != srv.mi->bos_id) {
		char piece[256];
		int n = engine_token_piece(srv.e, tok, piece, sizeof(piece));
		if (n > (int)sizeof(piece))
			n = sizeof(piece);
		if (n > 0)
			utf8_stream_feed(&r->u8, piece, (size_t)n, &r->text);
	}
	size_t emit;
	if (stop_scan(r->text.data + r->emitted, r->text.len - r->emitted, r->stop, r->n_stop,
		      &emit)) {
		r->text.len = r->emitted + emit; /* drop the stop string and anything after */
		r->stopped = true;
		eth_finish(&srv.eth, r->id, KPI_FINISH_STOP);
	}
	if (!r->stream || last)
		return; /* the last token rides in the final write (on_finished) */
	/* one event, one send(), for every token: the agent's per-token clock */
	struct sbuf evb = { 0 };
	openai_sse_event(&evb, r, srv.model_json, r->text.data + r->emitted, emit, NULL);
	r->emitted += emit;
	stream_write(r, &evb, false);
	sbuf_free(&evb);
}

static void finish_metrics(struct req *r, const struct eth_event *ev)
{
	uint64_t t = ev->t_ns;
	enum kpi_finish_reason reason = r->stopped ? KPI_FINISH_STOP : ev->ev.reason;
	if (reason >= KPI_FINISH_STOP && reason <= KPI_FINISH_ERROR)
		srv.m.success[reason]++;
	metrics_observe(&srv.m, MH_E2E, (double)(t - r->t_arrive) / 1e9);
	metrics_observe(&srv.m, MH_PROMPT_TOKENS, r->n_prompt);
	metrics_observe(&srv.m, MH_GENERATION_TOKENS, r->n_out);
	if (r->t_sched) {
		metrics_observe(&srv.m, MH_QUEUE, (double)(r->t_sched - r->t_admit) / 1e9);
		metrics_observe(&srv.m, MH_INFERENCE, (double)(t - r->t_sched) / 1e9);
	}
	if (r->t_first && r->t_sched) {
		metrics_observe(&srv.m, MH_PREFILL, (double)(r->t_first - r->t_sched) / 1e9);
		metrics_observe(&srv.m, MH_DECODE, (double)(r->t_prev - r->t_first) / 1e9);
		if (r->n_out > 1)
			metrics_observe(&srv.m, MH_TPOT,
					(double)(r->t_prev - r->t_first) / 1e9 / (r->n_out - 1));
	}
}

static void on_finished(struct req *r, const struct eth_event *ev)
{
	finish_metrics(r, ev);
	struct conn *c = r->conn;
	if (!c)
		return;
	if (!r->stopped)
		utf8_stream_flush(&r->u8, &r->text); /* held-back stop prefixes go out too */
	const char *finish = kpi_finish_reason_wire(r->stopped ? KPI_FINISH_STOP : ev->ev.reason);
	if (ev->ev.reason == KPI_FINISH_ERROR && !r->stream && !r->stopped) {
		conn_reject(c, 500, KPI_REJECT_INTERNAL, "the engine failed while generating",
			    false, NULL);
		return;
	}
	struct sbuf b = { 0 };
	if (r->stream) {
		openai_sse_event(&b, r, srv.model_json, r->text.data + r->emitted,
				 r->text.len - r->emitted, finish);
		openai_sse_end(&b, r, srv.model_json);
		stream_write(r, &b, true);
	} else {
		openai_completion(&b, r, srv.model_json, finish);
		c->resp_status = 200;
		conn_respond(c, 200, "application/json", b.data, b.len, NULL);
	}
	sbuf_free(&b);
}

/* FINISHED, or the engine refused the submit: the request leaves the table. */
static void on_end(struct req *r, struct eth_event *ev)
{
	if (r->waiting)
		srv.n_waiting--;
	srv.n_active--;
	req_remove(r);
	struct conn *c = r->conn;
	if (c && c->owner == r)
		conn_detach(c); /* done: a hang-up from here on cancels nothing */
	if (ev->ev.kind == ENGINE_EV_FINISHED)
		on_finished(r, ev);
	else if (c)
		conn_reject(c, 400, KPI_REJECT_PROMPT_TOO_LONG, ev->err, false, NULL);
	req_free(r);
}

static void on_event(struct req *r, struct eth_event *ev, bool last)
{
	switch ((int)ev->ev.kind) {
	case ENGINE_EV_SCHEDULED:
		req_scheduled(r, ev->t_ns);
		break;
	case ENGINE_EV_PREEMPTED:
		req_preempted(r);
		break;
	case ENGINE_EV_TOKEN:
		on_token(r, ev, last);
		break;
	case ENGINE_EV_FINISHED:
	case ETH_EV_SUBMIT_FAILED:
		on_end(r, ev);
		break;
	}
}

/* ---- the batch --------------------------------------------------------------- */

/* Marks each request's last token when its end is in this batch (a slow I/O
 * thread can take several steps' events at once): walking back, the first
 * token after a FINISHED is the last one. */
static bool *mark_last_tokens(const struct eth_event *evs, size_t n)
{
	bool *last = calloc(n ? n : 1, sizeof(bool));
	if (!last) {
		fprintf(stderr, "kpi-infer: out of memory for %zu engine events\n", n);
		abort();
	}
	for (size_t i = n; i-- > 0;) {
		struct req *r = req_find(evs[i].ev.id);
		if (!r)
			continue;
		if (evs[i].ev.kind == ENGINE_EV_FINISHED) {
			r->finish_pending = true;
		} else if (evs[i].ev.kind == ENGINE_EV_TOKEN && r->finish_pending) {
			last[i] = true;
			r->finish_pending = false;
		}
	}
	return last;
}

void fanout_engine_events(void)
{
	uint64_t cnt;
	ssize_t rd = read(srv.wakefd, &cnt, sizeof(cnt));
	(void)rd;
	struct eth_event *evs;
	size_t n = eth_take_events(&srv.eth, &evs);
	bool *last = mark_last_tokens(evs, n);
	for (size_t i = 0; i < n; i++) {
		struct req *r = req_find(evs[i].ev.id);
		if (evs[i].ev.kind == ETH_EV_KV_HELD) {
			if (r && r->fetch)
				pd_kv_fetch_held(r, &evs[i]);
		} else if (r && r->kind == REQ_PREFILL)
			pd_kv_serve_event(r, &evs[i]);
		else if (r)
			on_event(r, &evs[i], last[i]);
		eth_event_free(&srv.eth, &evs[i]);
	}
	free(evs);
	free(last);
}
