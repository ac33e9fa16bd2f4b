/* client.c - kpi-bench's HTTP client: one epoll loop over a pool of
 * non-blocking keep-alive connections, one per in-flight request, that sends
 * each request, reads its SSE chunks and times them (TTFT, ITL, e2e). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tools/kpi-bench/bench.h"
#include "tools/kpi-bench/http.h"

/* ---- connections ----------------------------------------------------------- */

enum conn_state { C_FREE, C_CONNECTING, C_SENDING, C_WAITING, C_IDLE, C_RETRY };

struct conn {
	int fd;
	enum conn_state state;
	bool reused;            /* kept alive from an earlier request */
	bool retried;           /* this request already retried once */
	bool got_bytes;         /* any response bytes for this request */
	bool warm;              /* a warm-up request: not measured */
	long idx, prompt_len, max_tokens;
	double t_start;         /* when the request was started (for --timeout) */
	double t_due;           /* when the schedule wanted it sent */
	double t_sent, t_first, t_last;
	long chunks, prompt_tokens, completion_tokens;
	bool saw_done;
	char stream_err[160];
	double *itl;            /* this request's gaps, ms */
	size_t n_itl, cap_itl;
	struct buf out;
	size_t out_off;
	struct http_resp resp;
	struct buf ev;
};

struct client {
	const struct config *cfg;
	struct run *run;
	struct sched sched;     /* which requests start when; told when each finishes */
	int ep;
	struct addrinfo *ai;
	struct conn **conns;    /* the pool: grows to the most requests in flight at once */
	size_t n_conns;
};

static int conn_watch(struct client *cl, struct conn *c, uint32_t events, int op)
{
	struct epoll_event ev = { .events = events, .data.ptr = c };
	return epoll_ctl(cl->ep, op, c->fd, &ev);
}

static void conn_close(struct client *cl, struct conn *c)
{
	if (c->fd >= 0) {
		epoll_ctl(cl->ep, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
	}
	c->fd = -1;
	c->state = C_FREE;
	c->reused = false;
}

static int conn_open(struct client *cl, struct conn *c)
{
	struct addrinfo *ai = cl->ai;
	c->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -errno;
	int one = 1;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->reused = false;
	if (connect(c->fd, ai->ai_addr, ai->ai_addrlen) && errno != EINPROGRESS) {
		int e = errno;
		close(c->fd);
		c->fd = -1;
		return -e;
	}
	c->state = C_CONNECTING;
	if (conn_watch(cl, c, EPOLLOUT, EPOLL_CTL_ADD)) {
		int e = errno;
		close(c->fd);
		c->fd = -1;
		return -e;
	}
	return 0;
}

/* A connection for a new request: an idle kept-alive one first, else a
 * closed one, else a new one (the pool never shrinks). */
static struct conn *conn_get(struct client *cl)
{
	struct conn *spare = NULL;
	for (size_t i = 0; i < cl->n_conns; i++) {
		struct conn *c = cl->conns[i];
		if (c->state == C_IDLE)
			return c;
		if (c->state == C_FREE && !spare)
			spare = c;
	}
	if (spare)
		return spare;
	struct conn **nc = realloc(cl->conns, (cl->n_conns + 1) * sizeof(*nc));
	struct conn *c = calloc(1, sizeof(*c));
	if (!nc || !c) {
		fprintf(stderr, "kpi-bench: out of memory for connection %zu\n", cl->n_conns);
		exit(1);
	}
	c->fd = -1;
	http_resp_init(&c->resp);
	cl->conns = nc;
	cl->conns[cl->n_conns++] = c;
	return c;
}

/* ---- per-request results ---------------------------------------------------- */

static void itl_push(double **a, size_t *n, size_t *cap, double v)
{
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 256;
		double *p = realloc(*a, nc * sizeof(*p));
		if (!p)
			return;   /* drop a sample rather than the run */
		*a = p;
		*cap = nc;
	}
	(*a)[(*n)++] = v;
}

static struct result *result_new(struct run *run)
{
	if (run->n_res == run->cap_res) {
		run->cap_res = run->cap_res ? run->cap_res * 2 : 256;
		run->res = realloc(run->res, run->cap_res * sizeof(*run->res));
		if (!run->res) {
			fprintf(stderr, "kpi-bench: out of memory storing results\n");
			exit(1);
		}
	}
	struct result *r = &run->res[run->n_res++];
	memset(r, 0, sizeof(*r));
	return r;
}

/* The latencies of a request that succeeded, from the instants its send
 * and its chunks were seen; its gaps join the run's ITL samples. */
static void result_timing(struct client *cl, const struct conn *c, struct result *r)
{
	struct run *run = cl->run;
	r->ttft = (c->t_first - c->t_sent) * 1e3;
	r->e2e = (c->t_last - c->t_sent) * 1e3;
	if (r->completion_tokens < 0)
		r->completion_tokens = c->chunks;   /* no usage: count chunks */
	if (r->completion_tokens > 1 && cl->cfg->stream)
		r->tpot = (r->e2e - r->ttft) / (double)(r->completion_tokens - 1);
	for (size_t i = 0; i < c->n_itl; i++) {
		itl_push(&run->itl, &run->n_itl, &run->cap_itl, c->itl[i]);
		if (c->itl[i] > r->itl_max)
			r->itl_max = c->itl[i];
	}
}

/* A measured request's result; error is NULL for a success, and a non-200
 * answer counts as an "http" error keyed by its status. */
static void result_record(struct client *cl, const struct conn *c, const char *error, const char *detail)
{
	struct run *run = cl->run;
	struct result *r = result_new(run);
	r->idx = c->idx;
	r->status = c->resp.status;
	snprintf(r->request_id, sizeof(r->request_id), "%s", c->resp.request_id);
	r->prompt_len = c->prompt_len;
	r->max_tokens = c->max_tokens;
	r->prompt_tokens = c->prompt_tokens;
	r->completion_tokens = c->completion_tokens;
	r->chunks = c->chunks;
	r->t_sent = c->t_sent ? (c->t_sent - cl->sched.t0) * 1e3 : -1;
	r->t_due = (c->t_due - cl->sched.t0) * 1e3;
	r->connect = c->t_sent ? (c->t_sent - c->t_start) * 1e3 : -1;
	r->ttft = r->tpot = r->e2e = r->itl_max = -1;
	if (!error && c->resp.status != 200) {
		char key[16];
		snprintf(key, sizeof(key), "%d", c->resp.status);
		report_count_error(run, key, c->resp.body.p ? c->resp.body.p + c->resp.body.off : "");
		error = "http";
	} else if (error) {
		report_count_error(run, error, detail ? detail : "");
	}
	r->error = error;
	if (!error)
		result_timing(cl, c, r);
	if (run->miss_limit >= 0 && !report_meets_slo(cl->cfg, r) && ++run->missed > run->miss_limit)
		run->stopped_missed = true;
}

/* The request on c is over: record it (unless warm-up) and release c. */
static void request_finish(struct client *cl, struct conn *c, const char *error, const char *detail)
{
	double now = bench_mono();
	/* a cleanly ended response keeps its connection, even a 429 */
	bool reusable = c->fd >= 0 && !error && c->resp.phase == RESP_DONE && !c->resp.conn_close &&
			c->out_off == c->out.len;
	if (!c->warm)
		result_record(cl, c, error, detail);
	sched_finished(&cl->sched, c->warm, now);
	c->n_itl = 0;
	if (reusable) {
		c->state = C_IDLE;     /* keep-alive: the next request reuses it */
		c->reused = true;
		conn_watch(cl, c, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_MOD);
	} else {
		conn_close(cl, c);
	}
}

/* ---- sending ---------------------------------------------------------------- */

/* Send what is left of the request; -1 on a dead connection. */
static int conn_send(struct client *cl, struct conn *c)
{
	while (c->out_off < c->out.len) {
		if (!c->out_off)
			c->t_sent = bench_mono();   /* "request sent": its first byte goes to the kernel */
		ssize_t n = send(c->fd, c->out.p + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			/* watch both ways: a server may answer (413, 429) and close
			 * before it has read the whole request */
			c->state = C_SENDING;
			conn_watch(cl, c, EPOLLOUT | EPOLLIN | EPOLLRDHUP, EPOLL_CTL_MOD);
			return 0;
		}
		if (n < 0)
			return -1;
		c->out_off += (size_t)n;
	}
	c->state = C_WAITING;
	conn_watch(cl, c, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_MOD);
	return 0;
}

static bool retry_stale(struct client *cl, struct conn *c);

static void request_fail_errno(struct client *cl, struct conn *c, const char *what, int err)
{
	char d[400];
	snprintf(d, sizeof(d), "%s %s:%s: %s", what, cl->cfg->host, cl->cfg->port, strerror(err));
	request_finish(cl, c, what, d);
}

/* Put the request held by c on the wire: on c's keep-alive socket when it
 * has one, else on a new connection. */
static void request_send(struct client *cl, struct conn *c)
{
	c->out_off = 0;
	c->t_sent = 0;
	c->got_bytes = false;
	http_resp_init(&c->resp);
	buf_reset(&c->ev);
	if (c->state == C_IDLE) {
		c->state = C_WAITING;
		if (conn_send(cl, c)) {
			int e = errno;
			if (!retry_stale(cl, c))
				request_fail_errno(cl, c, "send", e);
		}
		return;
	}
	int rc = conn_open(cl, c);
	if (rc)
		request_fail_errno(cl, c, "connect", -rc);
}

/* Starts request idx, which the scheduler let start at time now. */
static void request_start(struct client *cl, long idx, bool warm, double now, double due)
{
	struct conn *c = conn_get(cl);
	c->idx = idx;
	c->warm = warm;
	c->retried = false;
	c->t_start = now;
	c->t_due = due;
	c->t_first = c->t_last = 0;
	c->chunks = 0;
	c->prompt_tokens = c->completion_tokens = -1;
	c->saw_done = false;
	c->stream_err[0] = '\0';
	c->n_itl = 0;
	if (sched_build_request(cl->cfg, idx, &c->prompt_len, &c->max_tokens, &c->out)) {
		fprintf(stderr, "kpi-bench: out of memory building request %ld\n", idx);
		exit(1);
	}
	request_send(cl, c);
}

/* ---- responses --------------------------------------------------------------- */

static void take_usage(struct conn *c, json_t *root)
{
	json_t *u = json_object_get(root, "usage");
	if (!json_is_object(u))
		return;
	json_t *pt = json_object_get(u, "prompt_tokens"), *ct = json_object_get(u, "completion_tokens");
	if (json_is_integer(pt))
		c->prompt_tokens = (long)json_integer_value(pt);
	if (json_is_integer(ct))
		c->completion_tokens = (long)json_integer_value(ct);
}

/* One SSE event of a 200 stream, received at time now. A content chunk is
 * one with non-empty choices, whatever its text: a token whose bytes are an
 * incomplete UTF-8 sequence still arrives as a chunk with empty text, and a
 * server may send the last token together with the finish_reason. The first
 * content chunk stops the TTFT clock. */
static void sse_event(struct conn *c, const char *data, double now)
{
	if (!strcmp(data, "[DONE]")) {
		c->saw_done = true;
		return;
	}
	json_error_t jerr;
	json_t *root = json_loads(data, JSON_ALLOW_NUL, &jerr);
	if (!root) {
		if (!c->stream_err[0])
			snprintf(c->stream_err, sizeof(c->stream_err), "bad JSON in SSE event: %.120s", jerr.text);
		return;
	}
	json_t *choices = json_object_get(root, "choices");
	if (json_is_array(choices) && json_array_size(choices) > 0) {
		if (!c->chunks)
			c->t_first = now;
		else
			itl_push(&c->itl, &c->n_itl, &c->cap_itl, (now - c->t_last) * 1e3);
		c->t_last = now;
		c->chunks++;
	}
	take_usage(c, root);
	json_t *err = json_object_get(root, "error");
	if (err && !json_is_null(err) && !c->stream_err[0]) {
		char *s = json_dumps(err, JSON_COMPACT);
		snprintf(c->stream_err, sizeof(c->stream_err), "error event: %s", s ? s : "?");
		free(s);
	}
	json_decref(root);
}

/* A whole JSON answer (no stream): TTFT is its arrival, as for any
 * non-stream client. */
static void response_json(struct client *cl, struct conn *c, double now)
{
	struct http_resp *r = &c->resp;
	json_error_t jerr;
	json_t *root = json_loadb(r->body.p ? r->body.p + r->body.off : "", r->body.len - r->body.off, JSON_ALLOW_NUL, &jerr);
	if (!root) {
		char d[200];
		snprintf(d, sizeof(d), "200 response body is not JSON: %s", jerr.text);
		request_finish(cl, c, "protocol", d);
		return;
	}
	json_t *choices = json_object_get(root, "choices");
	bool has_choices = json_is_array(choices) && json_array_size(choices) > 0;
	take_usage(c, root);
	json_decref(root);
	if (!has_choices) {
		request_finish(cl, c, "protocol", "200 response without choices");
		return;
	}
	c->t_first = c->t_last = now;
	c->chunks = 1;
	request_finish(cl, c, NULL, NULL);
}

static void response_complete(struct client *cl, struct conn *c, double now)
{
	struct http_resp *r = &c->resp;
	if (r->status != 200)
		request_finish(cl, c, NULL, NULL);   /* counted by its status */
	else if (!r->event_stream)
		response_json(cl, c, now);
	else if (c->stream_err[0])
		request_finish(cl, c, "stream", c->stream_err);
	else if (!c->saw_done)
		request_finish(cl, c, "stream", "stream ended without data: [DONE]");
	else if (!c->chunks)
		request_finish(cl, c, "stream", "stream carried no chunk with choices");
	else
		request_finish(cl, c, NULL, NULL);
}

/* Every complete SSE event buffered so far, all stamped with now: the
 * instant their bytes came out of recv(). */
static void sse_drain(struct conn *c, double now)
{
	if (c->resp.status == 200 && c->resp.event_stream)
		while (sse_next(&c->resp.body, &c->ev))
			sse_event(c, c->ev.p, now);
}

/* A kept-alive socket that the server closed before answering: the request
 * never reached it, so send it again, once, on a fresh connection. */
static bool retry_stale(struct client *cl, struct conn *c)
{
	if (!c->reused || c->got_bytes || c->retried)
		return false;
	epoll_ctl(cl->ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	c->retried = true;
	c->state = C_RETRY;   /* reconnected by the scheduler, outside this epoll batch */
	return true;
}

/* The server closed c (err 0) or recv() failed (err) at time now. */
static void conn_eof(struct client *cl, struct conn *c, int err, double now)
{
	if (c->state == C_IDLE) {
		conn_close(cl, c);   /* server closed an idle keep-alive socket */
		return;
	}
	if (retry_stale(cl, c))
		return;
	int rc = http_resp_eof(&c->resp);
	if (rc == 1 && !err) {
		c->resp.conn_close = true;
		sse_drain(c, now);
		response_complete(cl, c, now);
	} else if (err) {
		request_fail_errno(cl, c, "recv", err);
	} else {
		request_finish(cl, c, "closed", c->resp.err);
	}
}

static void conn_readable(struct client *cl, struct conn *c)
{
	char buf[65536];
	for (int rounds = 0; rounds < 16; rounds++) {
		ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
		double now = bench_mono();
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			conn_eof(cl, c, n < 0 ? errno : 0, now);
			return;
		}
		if (c->state == C_IDLE) {
			conn_close(cl, c);   /* bytes nobody asked for: drop the socket */
			return;
		}
		c->got_bytes = true;
		int rc = http_resp_feed(&c->resp, buf, (size_t)n);
		if (rc < 0) {
			request_finish(cl, c, "protocol", c->resp.err);
			return;
		}
		sse_drain(c, now);
		if (rc == 1) {
			response_complete(cl, c, now);
			return;
		}
	}
}

static void conn_event(struct client *cl, struct conn *c, uint32_t ev)
{
	if (c->fd < 0 || c->state == C_FREE || c->state == C_RETRY)
		return;   /* closed earlier in this batch */
	if (c->state == C_CONNECTING) {
		int err = 0;
		socklen_t len = sizeof(err);
		getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
		if (err) {
			request_fail_errno(cl, c, "connect", err);
			return;
		}
		c->state = C_SENDING;
		if (conn_send(cl, c))
			request_fail_errno(cl, c, "send", errno);
		return;
	}
	if (c->state == C_SENDING) {
		if (ev & EPOLLIN) {
			conn_readable(cl, c);   /* an early answer wins over the unsent rest */
			if (c->state != C_SENDING)
				return;
		}
		if (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP) && conn_send(cl, c)) {
			int e = errno;
			if (!retry_stale(cl, c))
				request_fail_errno(cl, c, "send", e);
		}
		return;
	}
	if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
		conn_readable(cl, c);
}

/* ---- the run ------------------------------------------------------------------ */

static void check_timeouts(struct client *cl, double now)
{
	for (size_t i = 0; i < cl->n_conns; i++) {
		struct conn *c = cl->conns[i];
		if (c->state == C_FREE || c->state == C_IDLE || c->state == C_RETRY)
			continue;
		if (now - c->t_start > cl->cfg->timeout) {
			char d[96];
			snprintf(d, sizeof(d), "no complete response within --timeout %gs", cl->cfg->timeout);
			request_finish(cl, c, "timeout", d);
		}
	}
}


static void raise_fd_limit(long want)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	if (rl.rlim_cur != RLIM_INFINITY && (rlim_t)want + 64 > rl.rlim_cur) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static int resolve(const struct config *cfg, struct addrinfo **ai)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	int rc = getaddrinfo(cfg->host, cfg->port, &hints, ai);
	if (rc) {
		fprintf(stderr, "kpi-bench: cannot resolve '%s': %s; check --url\n", cfg->host, gai_strerror(rc));
		return -1;
	}
	return 0;
}

struct client *client_open(const struct config *cfg, struct run *run)
{
	struct client *cl = calloc(1, sizeof(*cl));
	if (!cl) {
		fprintf(stderr, "kpi-bench: out of memory\n");
		return NULL;
	}
	cl->cfg = cfg;
	cl->run = run;
	cl->ep = -1;
	if (resolve(cfg, &cl->ai)) {
		free(cl);
		return NULL;
	}
	sched_init(&cl->sched, cfg);
	run->miss_limit = -1;
	if (cfg->stop_when_missed) {
		run->most_sent = sched_most_sent(&cl->sched);
		if (run->most_sent > 0)
			run->miss_limit = (long)floor((1 - cfg->slo_share) * (double)run->most_sent);
	}
	raise_fd_limit(cfg->mode == MODE_BURST ? cfg->requests : cfg->mode == MODE_CONCURRENCY ? cfg->concurrency : 4096);
	cl->ep = epoll_create1(EPOLL_CLOEXEC);
	if (cl->ep < 0) {
		fprintf(stderr, "kpi-bench: epoll_create1: %s\n", strerror(errno));
		client_close(cl);
		return NULL;
	}
	return cl;
}

/* Start whatever is due now: the retries first, then new requests; returns
 * seconds until an arrival is due (or -1 when only responses can move the
 * run on). */
static double start_due(struct client *cl, double now)
{
	for (size_t i = 0; i < cl->n_conns; i++)
		if (cl->conns[i]->state == C_RETRY) {
			cl->conns[i]->state = C_FREE;
			request_send(cl, cl->conns[i]);
		}
	long idx;
	bool warm;
	double due;
	while (sched_next(&cl->sched, &now, &due, &idx, &warm))
		request_start(cl, idx, warm, now, due);
	return sched_wait(&cl->sched, now);
}

/* Ctrl-C, or a run stopped on its misses: the measured requests still on
 * the wire are abandoned, counted. */
static void count_abandoned(struct client *cl)
{
	for (size_t i = 0; i < cl->n_conns; i++) {
		struct conn *c = cl->conns[i];
		if (c->state != C_FREE && c->state != C_IDLE && !c->warm)
			cl->run->in_flight_dropped++;
	}
}

/* epoll_wait for up to wait_s, to the microsecond: a millisecond timeout
 * would start an open-loop arrival up to a millisecond late. */
static int wait_events(int ep, struct epoll_event *evs, int max, double wait_s)
{
	static bool no_pwait2;
	if (!no_pwait2) {
		long us = wait_s > 0 ? (long)ceil(wait_s * 1e6) : 0;
		struct timespec ts = { .tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000 };
		int n = epoll_pwait2(ep, evs, max, &ts, NULL);
		if (n >= 0 || errno != ENOSYS)
			return n;
		no_pwait2 = true;   /* a kernel before 5.11 */
	}
	return epoll_wait(ep, evs, max, wait_s > 0 ? (int)ceil(wait_s * 1e3) : 0);
}

int client_run(struct client *cl, volatile sig_atomic_t *stop)
{
	bool tty = isatty(STDERR_FILENO), quiet = cl->cfg->quiet;
	double tick = tty ? 0.5 : 10.0, next_progress = bench_mono() + tick, next_timeouts = 0;
	struct epoll_event evs[256];
	for (;;) {
		double now = bench_mono();
		if (*stop || cl->run->stopped_missed)
			break;
		double due = start_due(cl, now);
		if (sched_over(&cl->sched))
			break;
		/* quiet, no progress line falls due: a deadline left in the past
		 * would turn the wait into a busy loop from the first tick on */
		double wait = quiet ? 0.1 : next_progress - now;
		if (due >= 0 && due < wait)
			wait = due;
		if (wait > 0.1)
			wait = 0.1;   /* timeouts and --duration are checked at least this often */
		int n = wait_events(cl->ep, evs, 256, wait);
		if (n < 0 && errno != EINTR) {
			fprintf(stderr, "kpi-bench: epoll_wait: %s\n", strerror(errno));
			return -1;
		}
		for (int i = 0; i < n; i++)
			conn_event(cl, evs[i].data.ptr, evs[i].events);
		now = bench_mono();
		if (now >= next_timeouts) {
			check_timeouts(cl, now);
			next_timeouts = now + 0.1;
		}
		if (!quiet && now >= next_progress) {
			sched_progress(&cl->sched, cl->run, now, tty, false);
			next_progress = now + tick;
		}
	}
	if (!quiet && tty)
		sched_progress(&cl->sched, cl->run, bench_mono(), tty, true);
	cl->run->interrupted = *stop;
	if (*stop || cl->run->stopped_missed)
		count_abandoned(cl);
	cl->run->wall_s = sched_wall_s(&cl->sched);
	cl->run->t0 = cl->sched.t0;
	cl->run->t_end = cl->sched.t_end;
	return 0;
}

void client_close(struct client *cl)
{
	if (!cl)
		return;
	for (size_t i = 0; i < cl->n_conns; i++) {
		struct conn *c = cl->conns[i];
		conn_close(cl, c);
		http_resp_free(&c->resp);
		buf_free(&c->out);
		buf_free(&c->ev);
		free(c->itl);
		free(c);
	}
	free(cl->conns);
	if (cl->ep >= 0)
		close(cl->ep);
	freeaddrinfo(cl->ai);
	free(cl);
}

int client_measure(const struct config *cfg, struct run *run, volatile sig_atomic_t *stop)
{
	struct client *cl = client_open(cfg, run);
	if (!cl)
		return -1;
	int rc = client_run(cl, stop);
	client_close(cl);
	return rc;
}
