/* router.c - kpi-infer --role router (router.h): workers and their load, the
 * routing decision (kpi:route__decision), the forwarded request and the
 * answer relayed unchanged: its head (hop-by-hop Connection aside) goes out
 * with its first body bytes, and every read from the decode worker is one
 * write to the client, so a token event keeps its own write. */
#include "daemon/pd/router.h"

#include <errno.h>
#include <jansson.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include "kpi_probes.h"
#include "abi/kpi_reasons.h"
#include "daemon/pd/route_policy.h"
#include "daemon/pd/upstream.h"
#include "daemon/server/admit.h"
#include "daemon/server/api.h"
#include "daemon/server/config.h"
#include "daemon/server/conn.h"
#include "daemon/server/state.h"

struct worker {
	char addr[128];
	enum server_role role;     /* ROLE_DECODE or ROLE_PREFILL */
	struct route_worker rw;    /* up, load: what the policies read */
	struct upstream *poll;     /* its /load exchange in progress */
	struct sbuf poll_body;
	bool warned;               /* its role or model was reported once */
	char fingerprint[17];
	uint64_t requests, errors;
};

/* One forwarded request. */
struct route {
	uint64_t id;
	struct conn *c;            /* NULL once the client has gone */
	struct upstream *u;
	struct worker *d, *p;      /* p: NULL when no prefill worker is named */
	bool p_counted;            /* in p's in-flight count (until the answer starts) */
	bool get;                  /* a GET forwarded as is (/v1/models): no decision */
	bool retried;              /* sent to a second decode worker already */
	struct sbuf body;          /* kept for a retry on another decode worker */
	char path[128];
	struct sbuf head;          /* the answer's head, sent with its first body bytes */
	bool relayed;              /* bytes of the answer went to the client */
};

static struct {
	struct worker *decode, *prefill;
	int n_decode, n_prefill;
	unsigned rr_decode, rr_prefill;
	int timerfd, tag_timer;
	int inflight;
	uint64_t decisions[KPI_ROUTE__COUNT];
	uint64_t upstream_errors;
} rt;

static void route_free(struct route *r)
{
	sbuf_free(&r->body);
	sbuf_free(&r->head);
	free(r);
}

/* ---- workers and their load -------------------------------------------------- */

static int add_workers(struct worker **out, const char *const *addrs, int n, enum server_role role)
{
	*out = calloc(n ? n : 1, sizeof(**out));
	if (!*out)
		return -1;
	for (int i = 0; i < n; i++) {
		struct worker *w = &(*out)[i];
		snprintf(w->addr, sizeof(w->addr), "%s", addrs[i]);
		w->role = role;
		w->rw.addr = w->addr;
		w->rw.up = true; /* until its /load says otherwise */
	}
	return 0;
}

static void load_done(struct worker *w, bool ok)
{
	w->poll = NULL;
	w->rw.up = ok;
	sbuf_consume(&w->poll_body, w->poll_body.len);
}

static void poll_head(struct upstream *u, void *owner, const struct http_response *h,
		      const char *head)
{
	struct worker *w = owner;
	if (h->status != 200) {
		upstream_abort(u);
		load_done(w, false);
	}
}

/* The worker's /load: {"role":..,"waiting":..,"running":..,"fetching":..,"fingerprint":..}. */
static void poll_body(struct upstream *u, void *owner, const char *p, size_t n, bool last)
{
	struct worker *w = owner;
	if (w->poll_body.len < 4096)
		sbuf_add(&w->poll_body, p, n);
	if (!last)
		return;
	json_error_t je;
	json_t *j = json_loadb(w->poll_body.data ? w->poll_body.data : "", w->poll_body.len, 0, &je);
	const char *role = j ? json_string_value(json_object_get(j, "role")) : NULL;
	const char *fp = j ? json_string_value(json_object_get(j, "fingerprint")) : NULL;
	bool ok = role && !strcmp(role, server_role_name(w->role));
	if (j && !ok && !w->warned) {
		fprintf(stderr, "kpi-infer: worker %s runs --role %s, not %s: not routing to it\n",
			w->addr, role ? role : "?", server_role_name(w->role));
		w->warned = true;
	}
	if (ok) {
		w->rw.reported = (int)(json_integer_value(json_object_get(j, "waiting")) +
				       json_integer_value(json_object_get(j, "running")) +
				       json_integer_value(json_object_get(j, "fetching")));
		w->rw.inflight_then = w->rw.inflight;
		if (fp)
			snprintf(w->fingerprint, sizeof(w->fingerprint), "%s", fp);
	}
	json_decref(j);
	load_done(w, ok);
}

static void poll_error(struct upstream *u, void *owner, enum upstream_error e, const char *msg)
{
	load_done(owner, false);
}

static const struct upstream_ops poll_ops = {
	.on_head = poll_head, .on_body = poll_body, .on_error = poll_error,
};

static void poll_one(struct worker *w)
{
	if (w->poll)
		return;
	char req[256], err[256];
	int n = snprintf(req, sizeof(req), "GET /load HTTP/1.1\r\nHost: %s\r\n\r\n", w->addr);
	w->poll = upstream_start(w->addr, req, (size_t)n, &poll_ops, w, err, sizeof(err));
	if (!w->poll)
		w->rw.up = false;
}

void router_tick(void)
{
	uint64_t ticks;
	ssize_t r = read(rt.timerfd, &ticks, sizeof(ticks));
	(void)r;
	for (int i = 0; i < rt.n_decode; i++)
		poll_one(&rt.decode[i]);
	for (int i = 0; i < rt.n_prefill; i++)
		poll_one(&rt.prefill[i]);
}

int router_init(void)
{
	const struct router_config *rc = &srv.cfg->router;
	memset(&rt, 0, sizeof(rt));
	rt.timerfd = -1;
	if (add_workers(&rt.decode, rc->decode, rc->n_decode, ROLE_DECODE) ||
	    add_workers(&rt.prefill, rc->prefill, rc->n_prefill, ROLE_PREFILL)) {
		fprintf(stderr, "kpi-infer: out of memory for the worker table\n");
		return 1;
	}
	rt.n_decode = rc->n_decode;
	rt.n_prefill = rc->n_prefill;
	rt.timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (rt.timerfd < 0) {
		fprintf(stderr, "kpi-infer: cannot create the /load timer: %s\n", strerror(errno));
		return 1;
	}
	long ms = rc->load_interval_ms;
	struct itimerspec its = { { ms / 1000, (ms % 1000) * 1000000 },
				  { 0, 1000000 } /* the first read right away */ };
	timerfd_settime(rt.timerfd, 0, &its, NULL);
	rt.tag_timer = TAG_TIMER;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &rt.tag_timer };
	epoll_ctl(srv.epfd, EPOLL_CTL_ADD, rt.timerfd, &ev);
	return 0;
}

void router_free(void)
{
	if (rt.timerfd >= 0)
		close(rt.timerfd);
	for (int i = 0; i < rt.n_decode; i++)
		sbuf_free(&rt.decode[i].poll_body);
	for (int i = 0; i < rt.n_prefill; i++)
		sbuf_free(&rt.prefill[i].poll_body);
	free(rt.decode);
	free(rt.prefill);
}

int router_inflight(void)
{
	return rt.inflight;
}

/* Index into ws chosen by policy, or NULL for an empty list. */
static struct worker *pick(struct worker *ws, int n, int policy, const void *prefix, size_t len,
			   unsigned *rrp, const struct worker *avoid)
{
	struct route_worker rw[SERVER_MAX_WORKERS];
	for (int i = 0; i < n; i++) {
		rw[i] = ws[i].rw;
		if (&ws[i] == avoid)
			rw[i].up = false;
	}
	int i = route_pick(rw, n, policy, prefix, len, rrp);
	return i < 0 || &ws[i] == avoid ? NULL : &ws[i];
}

/* ---- the forwarded request ------------------------------------------------------- */

static void route_end(struct route *r)
{
	if (r->d)
		r->d->rw.inflight--;
	if (r->p_counted)
		r->p->rw.inflight--;
	r->p_counted = false;
	rt.inflight--;
	srv.n_active--;
	if (r->c && r->c->owner == r)
		conn_detach(r->c);
	route_free(r);
}

static void on_gone(struct conn *c, void *owner)
{
	struct route *r = owner;
	if (KPI_REQUEST_CANCELLED_ENABLED() && !r->get)
		KPI_REQUEST_CANCELLED(r->id);
	r->c = NULL;
	if (r->u)
		upstream_abort(r->u); /* the decode worker sees it go and cancels */
	r->u = NULL;
	route_end(r);
}

static bool route_send(struct route *r, char *err, size_t errlen);

static void up_head(struct upstream *u, void *owner, const struct http_response *h,
		    const char *head)
{
	struct route *r = owner;
	if (r->p_counted) { /* the prefill is over by the time the answer starts */
		r->p->rw.inflight--;
		r->p_counted = false;
	}
	struct conn *c = r->c;
	c->resp_status = h->status;
	if (!h->chunked && h->content_length < 0)
		c->close_after = true; /* the body ends where the connection does */
	/* the status line and end-to-end headers as the worker sent them */
	const char *eol = memchr(head, '\n', h->head_len);
	sbuf_add(&r->head, head, eol ? (size_t)(eol - head) + 1 : 0);
	size_t pos = 0, nl, vl;
	const char *name, *v;
	while (http_next_header(head, h->head_len, &pos, &name, &nl, &v, &vl)) {
		if (http_token_eq(name, nl, "connection") || http_token_eq(name, nl, "keep-alive"))
			continue;
		sbuf_add(&r->head, name, nl);
		sbuf_adds(&r->head, ": ");
		sbuf_add(&r->head, v, vl);
		sbuf_adds(&r->head, "\r\n");
	}
	if (c->close_after || srv.draining)
		sbuf_adds(&r->head, "Connection: close\r\n");
	else if (c->minor == 0)
		sbuf_adds(&r->head, "Connection: keep-alive\r\n");
	sbuf_adds(&r->head, "\r\n");
}

static void up_body(struct upstream *u, void *owner, const char *p, size_t n, bool last)
{
	struct route *r = owner;
	struct iovec iov[2];
	int k = 0;
	if (r->head.len) {
		iov[k++] = (struct iovec){ r->head.data, r->head.len };
		r->relayed = true;
	}
	iov[k++] = (struct iovec){ (void *)p, n };
	struct conn *c = r->c;
	if (last) {
		r->u = NULL; /* upstream.c keeps or closes it */
		conn_detach(c);
		r->c = NULL;
	}
	if (n || k > 1 || last)
		conn_sendv(c, iov, k, last);
	sbuf_consume(&r->head, r->head.len);
	r->relayed = true;
	if (last) {
		if (r->d)
			r->d->requests++;
		route_end(r);
	}
}

static void up_error(struct upstream *u, void *owner, enum upstream_error e, const char *msg)
{
	struct route *r = owner;
	r->u = NULL;
	rt.upstream_errors++;
	if (r->d)
		r->d->errors++;
	struct conn *c = r->c;
	if (r->relayed) {
		/* part of the answer is out: all the client can be told is the close */
		fprintf(stderr, "kpi-infer: %s: decode worker %s failed mid-answer: %s\n", c->rid,
			r->d ? r->d->addr : "?", msg);
		conn_detach(c);
		r->c = NULL;
		conn_close(c);
		route_end(r);
		return;
	}
	/* nothing was answered: another decode worker, once, when it never got there */
	char err[768], again[256];
	if (e == UPSTREAM_CONNECT && r->d)
		r->d->rw.up = false;
	if (e == UPSTREAM_CONNECT && !r->retried && !r->get) {
		struct worker *d = pick(rt.decode, rt.n_decode, srv.cfg->router.policy, NULL, 0,
					&rt.rr_decode, r->d);
		if (d) {
			r->retried = true;
			r->d->rw.inflight--;
			r->d = d;
			d->rw.inflight++;
			if (route_send(r, again, sizeof(again)))
				return;
			msg = again;
		}
	}
	snprintf(err, sizeof(err), "decode worker %s failed: %.500s", r->d ? r->d->addr : "?", msg);
	conn_detach(c);
	r->c = NULL;
	conn_reject(c, e == UPSTREAM_TIMEOUT ? 504 : 502, KPI_REJECT_UPSTREAM, err, false, NULL);
	route_end(r);
}

static const struct upstream_ops route_ops = {
	.on_head = up_head, .on_body = up_body, .on_error = up_error,
};

/* The request to r->d; false with err set when it cannot even start. */
static bool route_send(struct route *r, char *err, size_t errlen)
{
	struct conn *c = r->c;
	struct sbuf req = { 0 };
	sbuf_printf(&req, "%s %s HTTP/1.%d\r\nHost: %s\r\nx-request-id: %s\r\n", r->get ? "GET" :
		    "POST", r->path, c->minor, r->d->addr, c->rid);
	if (!r->get)
		sbuf_printf(&req, "Content-Type: application/json\r\nContent-Length: %zu\r\n",
			    r->body.len);
	if (r->p)
		sbuf_printf(&req, KPI_KV_PREFILL_HEADER ": %s\r\n", r->p->addr);
	sbuf_adds(&req, "\r\n");
	sbuf_add(&req, r->body.data ? r->body.data : "", r->body.len);
	r->u = upstream_start(r->d->addr, req.data, req.len, &route_ops, r, err, errlen);
	sbuf_free(&req);
	return r->u != NULL;
}

/* A new route for c to decode worker d (and prefill worker p). */
static struct route *route_new(struct conn *c, const char *body, size_t len, bool get)
{
	struct route *r = calloc(1, sizeof(*r));
	if (!r) {
		conn_reject(c, 503, KPI_REJECT_INTERNAL, "out of memory", true, NULL);
		return NULL;
	}
	r->id = get ? 0 : c->seq;
	r->c = c;
	r->get = get;
	snprintf(r->path, sizeof(r->path), "%s", c->path);
	sbuf_add(&r->body, body, len);
	c->resp_id = r->id;
	c->state = CS_ACTIVE;
	rt.inflight++;
	srv.n_active++;
	conn_attach(c, r, on_gone, NULL);
	return r;
}

static void route_start(struct route *r)
{
	char err[256];
	if (route_send(r, err, sizeof(err)))
		return;
	r->d->rw.up = false;
	up_error(NULL, r, UPSTREAM_CONNECT, err);
}

/* The bytes of the prompt that choose a prefill worker under the prefix policy. */
static size_t prompt_prefix(const struct api_request *ar, const void **p)
{
	size_t limit = (size_t)srv.cfg->router.prefix_bytes;
	if (ar->prompt_ids) {
		*p = ar->prompt_ids;
		size_t n = (size_t)ar->n_prompt_ids * sizeof(int32_t);
		return n < limit ? n : limit;
	}
	*p = ar->prompt ? ar->prompt : "";
	return ar->prompt_len < limit ? ar->prompt_len : limit;
}

void router_handle(struct conn *c, const char *body, size_t len, bool chat)
{
	struct api_request ar;
	/* refused here as a worker would refuse it, without costing one a round trip */
	if (!admit_parse(c, body, len, chat, &ar)) {
		api_request_free(&ar);
		return;
	}
	int policy = srv.cfg->router.policy;
	const void *prefix;
	size_t plen = prompt_prefix(&ar, &prefix);
	struct worker *d = pick(rt.decode, rt.n_decode,
				policy == KPI_ROUTE_PREFIX ? KPI_ROUTE_LEAST_LOADED : policy, NULL, 0,
				&rt.rr_decode, NULL);
	struct worker *p = pick(rt.prefill, rt.n_prefill, policy, prefix, plen, &rt.rr_prefill, NULL);
	api_request_free(&ar);
	struct route *r = route_new(c, body, len, false);
	if (!r)
		return;
	r->d = d;
	r->p = p;
	d->rw.inflight++;
	if (p) {
		p->rw.inflight++;
		r->p_counted = true;
	}
	rt.decisions[policy]++;
	if (KPI_ROUTE_DECISION_ENABLED())
		KPI_ROUTE_DECISION(r->id, c->fd, c->rid, policy, d->addr, p ? p->addr : "");
	route_start(r);
}

void router_forward_get(struct conn *c)
{
	struct worker *d = pick(rt.decode, rt.n_decode, KPI_ROUTE_ROUND_ROBIN, NULL, 0,
				&rt.rr_decode, NULL);
	struct route *r = route_new(c, "", 0, true);
	if (!r)
		return;
	r->d = d;
	d->rw.inflight++;
	route_start(r);
}

/* ---- what the router says about itself ------------------------------------------- */

static void render_workers(struct sbuf *out, const char *name, const char *help, const char *type,
			   int what)
{
	sbuf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
	for (int k = 0; k < 2; k++) {
		struct worker *ws = k ? rt.prefill : rt.decode;
		int n = k ? rt.n_prefill : rt.n_decode;
		for (int i = 0; i < n; i++) {
			const struct worker *w = &ws[i];
			double v = what == 0 ? w->rw.up : what == 1 ? w->rw.reported :
				what == 2 ? w->rw.inflight : what == 3 ? (double)w->requests :
				(double)w->errors;
			sbuf_printf(out, "%s{role=\"%s\",worker=\"%s\"} %.9g\n", name,
				    server_role_name(w->role), w->addr, v);
		}
	}
}

void router_render_metrics(struct sbuf *out)
{
	render_workers(out, "kpi_router_worker_up", "1 when the worker's last /load answered.",
		       "gauge", 0);
	render_workers(out, "kpi_router_worker_load",
		       "Waiting + running (+ fetching) requests in the worker's last /load.", "gauge", 1);
	render_workers(out, "kpi_router_worker_inflight", "The router's requests at the worker now.",
		       "gauge", 2);
	render_workers(out, "kpi_router_worker_requests_total",
		       "Requests whose answer the router relayed whole (decode workers).", "counter", 3);
	render_workers(out, "kpi_router_worker_errors_total",
		       "Forwarded requests that failed at the worker.", "counter", 4);
	sbuf_printf(out, "# HELP kpi_router_decisions_total Routing decisions by policy.\n"
		    "# TYPE kpi_router_decisions_total counter\n");
	for (int p = 1; p < KPI_ROUTE__COUNT; p++)
		sbuf_printf(out, "kpi_router_decisions_total{policy=\"%s\"} %llu\n",
			    kpi_route_policy_name(p), (unsigned long long)rt.decisions[p]);
}

void router_render_load(struct sbuf *out)
{
	sbuf_printf(out, "{\"role\":\"router\",\"waiting\":0,\"running\":%d,\"fetching\":0}\n",
		    rt.inflight);
}
