/* server.c - kpi-infer's I/O thread: the epoll loop, accepting, draining and
 * the routes of each role. The top of the server: it calls down into every
 * module and none calls it. A connection's life is conn.c, inference
 * requests are generate.c (in) and fanout.c (out); a prefill worker's KV
 * stream, a decode worker's KV fetch and the router are daemon/pd/ (pd.h). Each
 * SSE token chunk leaves in exactly one send() as soon as its event arrives,
 * because the agent times tokens by the daemon's own writes on the request's
 * fd. */
#include "daemon/server/server.h"

#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "abi/kpi_reasons.h"
#include "daemon/pd/pd.h"
#include "daemon/server/conn.h"
#include "daemon/server/fanout.h"
#include "daemon/server/generate.h"
#include "daemon/server/openai.h"
#include "daemon/server/req.h"
#include "daemon/server/state.h"


/* ---- routes ------------------------------------------------------------------ */

static void handle_models(struct conn *c)
{
	struct sbuf b = { 0 };
	openai_models(&b, srv.model_json, (long long)time(NULL), srv.ctx_len);
	conn_respond(c, 200, "application/json", b.data, b.len, NULL);
	sbuf_free(&b);
}

static void handle_metrics(struct conn *c)
{
	struct engine_stats st = { 0 };
	if (srv.e)
		eth_stats(&srv.eth, &st);
	srv.m.kv_fetching = srv.n_fetching;
	struct sbuf b = { 0 };
	metrics_render(&srv.m, &st, srv.model_label, &b);
	if (srv.cfg->role == ROLE_ROUTER)
		pd_router_metrics(&b);
	conn_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len, NULL);
	sbuf_free(&b);
}

/* GET /load: this worker's queue depth, as the router's least-loaded policy
 * reads it (vLLM has a /load too), with its role and model identity. */
static void handle_load(struct conn *c)
{
	struct sbuf b = { 0 };
	if (srv.cfg->role == ROLE_ROUTER) {
		pd_router_load(&b);
	} else {
		struct engine_stats st;
		eth_stats(&srv.eth, &st);
		sbuf_printf(&b, "{\"role\":\"%s\",\"waiting\":%d,\"running\":%d,\"fetching\":%d,"
			    "\"kv_blocks_free\":%d,\"kv_blocks_total\":%d,\"model\":\"%s\","
			    "\"fingerprint\":\"%016llx\"}\n", server_role_name(srv.cfg->role),
			    srv.n_waiting - srv.n_fetching, srv.n_active - srv.n_waiting,
			    srv.n_fetching, st.kv_blocks_free, st.kv_blocks_total, srv.model_json,
			    (unsigned long long)srv.fingerprint);
	}
	conn_respond(c, 200, "application/json", b.data, b.len, NULL);
	sbuf_free(&b);
}

enum route_id { R_COMPLETIONS, R_CHAT, R_MODELS, R_HEALTH, R_METRICS, R_LOAD, R_KV_PREFILL };

/* A path this role does not serve: 404 naming the role and what it serves. */
static void role_refuses(struct conn *c)
{
	char msg[320];
	if (srv.cfg->role == ROLE_PREFILL)
		snprintf(msg, sizeof(msg), "this kpi-infer runs --role prefill: it serves POST "
			 KPI_KV_PATH " to decode workers; send '%.100s' to the router or a decode "
			 "worker", c->path);
	else
		snprintf(msg, sizeof(msg), "POST " KPI_KV_PATH " is served by --role prefill only; "
			 "this kpi-infer runs --role %s", server_role_name(srv.cfg->role));
	conn_reject(c, 404, KPI_REJECT_NOT_FOUND, msg, false, NULL);
}

static void server_dispatch(struct conn *c, const char *body, size_t len)
{
	static const struct {
		const char *path, *method;
	} routes[] = {
		[R_COMPLETIONS] = { "/v1/completions", "POST" },
		[R_CHAT] = { "/v1/chat/completions", "POST" },
		[R_MODELS] = { "/v1/models", "GET" }, [R_HEALTH] = { "/health", "GET" },
		[R_METRICS] = { "/metrics", "GET" }, [R_LOAD] = { "/load", "GET" },
		[R_KV_PREFILL] = { KPI_KV_PATH, "POST" },
	};
	int route = -1;
	for (int i = 0; i < (int)(sizeof(routes) / sizeof(routes[0])); i++)
		if (!strcmp(c->path, routes[i].path))
			route = i;
	if (route < 0) {
		char msg[256];
		snprintf(msg, sizeof(msg), "no such path '%.100s': the API serves /v1/completions, "
			 "/v1/chat/completions, /v1/models, /health and /metrics", c->path);
		conn_reject(c, 404, KPI_REJECT_NOT_FOUND, msg, false, NULL);
		return;
	}
	if (strcmp(c->method, routes[route].method)) {
		char msg[160], allow[32];
		snprintf(msg, sizeof(msg), "%s is not allowed on %s: use %s", c->method,
			 routes[route].path, routes[route].method);
		snprintf(allow, sizeof(allow), "Allow: %s\r\n", routes[route].method);
		conn_reject(c, 405, KPI_REJECT_METHOD, msg, false, allow);
		return;
	}
	bool prefill_role = srv.cfg->role == ROLE_PREFILL, router = srv.cfg->role == ROLE_ROUTER;
	switch (route) {
	case R_COMPLETIONS:
	case R_CHAT:
		if (router)
			pd_route(c, body, len, route == R_CHAT);
		else if (prefill_role)
			role_refuses(c);
		else
			generate_handle(c, body, len, route == R_CHAT);
		break;
	case R_KV_PREFILL:
		if (prefill_role)
			pd_kv_serve(c, body, len);
		else
			role_refuses(c);
		break;
	case R_MODELS:
		if (router)
			pd_route_get(c);
		else
			handle_models(c);
		break;
	case R_LOAD:
		handle_load(c);
		break;
	case R_HEALTH:
		if (srv.draining)
			conn_reject(c, 503, KPI_REJECT_DRAINING, "the server is shutting down", true,
				    NULL);
		else
			conn_respond(c, 200, "application/json", "{\"status\":\"ok\"}\n", 16, NULL);
		break;
	case R_METRICS:
		handle_metrics(c);
		break;
	}
}

/* ---- accepting and timing out ---------------------------------------------- */

static void accept_all(void)
{
	while (srv.lfd >= 0 && srv.nconns < srv.cfg->max_conns) {
		int fd = accept4(srv.lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				/* out of descriptors: stop listening for a second */
				epoll_ctl(srv.epfd, EPOLL_CTL_DEL, srv.lfd, NULL);
				srv.listen_paused = true;
			}
			return;
		}
		if (!conn_open(fd))
			return;
	}
	if (srv.lfd >= 0 && srv.nconns >= srv.cfg->max_conns && !srv.listen_paused) {
		epoll_ctl(srv.epfd, EPOLL_CTL_DEL, srv.lfd, NULL);
		srv.listen_paused = true;
	}
}

static void sweep(uint64_t now)
{
	conn_sweep(now);
	pd_sweep(now);
	if (srv.listen_paused && srv.lfd >= 0 && srv.nconns < srv.cfg->max_conns) {
		struct epoll_event e = { .events = EPOLLIN, .data.ptr = &srv.tag_listen };
		if (epoll_ctl(srv.epfd, EPOLL_CTL_ADD, srv.lfd, &e) == 0)
			srv.listen_paused = false;
	}
}

/* ---- setup and the loop ------------------------------------------------------ */

static int listen_on(const char *host, int port)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *res;
	char portstr[16];
	snprintf(portstr, sizeof(portstr), "%d", port);
	int rc = getaddrinfo(host, portstr, &hints, &res);
	if (rc) {
		fprintf(stderr, "kpi-infer: cannot resolve --host '%s': %s\n", host,
			gai_strerror(rc));
		return -1;
	}
	int fd = -1, err = 0;
	for (struct addrinfo *a = res; a; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			err = errno;
			continue;
		}
		int one = 1;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 4096) == 0)
			break;
		err = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		fprintf(stderr, "kpi-infer: cannot listen on %s:%d: %s%s\n", host, port,
			strerror(err), err == EADDRINUSE ? " (pick another --port)" : "");
	return fd;
}

static void raise_fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* A model name safe both inside a JSON string and a Prometheus label. */
static void set_model_name(const char *name)
{
	size_t o = 0;
	for (size_t i = 0; name[i] && o < sizeof(srv.model_label) - 1; i++) {
		unsigned char ch = (unsigned char)name[i];
		srv.model_label[o++] = (ch < 0x20 || ch == '"' || ch == '\\' || ch >= 0x7f) ? '_' :
			(char)ch;
	}
	srv.model_label[o] = 0;
	snprintf(srv.model_json, sizeof(srv.model_json), "%s", srv.model_label);
}

/* The state, the listening socket, epoll, the engine thread's eventfd and
 * the signalfd. Returns 0, or 1 with a message printed. */
static int server_setup(struct engine *e, const struct server_config *cfg)
{
	memset(&srv, 0, sizeof(srv));
	srv.cfg = cfg;
	srv.e = e;
	srv.pid = (unsigned)getpid();
	srv.tag_listen = TAG_LISTEN;
	srv.tag_wake = TAG_WAKE;
	srv.tag_signal = TAG_SIGNAL;
	metrics_init(&srv.m);
	srv.m.kv_decode = cfg->role == ROLE_DECODE;
	srv.m.kv_prefill = cfg->role == ROLE_PREFILL;
	raise_fd_limit();
	conn_set_handler(server_dispatch);
	if (e) {
		srv.mi = engine_model(e);
		set_model_name(srv.mi->name[0] ? srv.mi->name : cfg->model_label);
		struct engine_stats st;
		engine_stats(e, &st);
		srv.ctx_len = srv.mi->context_length;
		srv.kv_tokens = st.kv_blocks_total * (cfg->block_size > 0 ? cfg->block_size : 16);
		struct engine_kv_layout kl;
		engine_kv_layout(e, &kl);
		srv.fingerprint = kl.fingerprint;
	} else {
		set_model_name("router");
	}

	srv.lfd = listen_on(cfg->host, cfg->port);
	if (srv.lfd < 0)
		return 1;
	srv.epfd = epoll_create1(EPOLL_CLOEXEC);
	srv.wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	sigset_t ss;
	sigemptyset(&ss);
	sigaddset(&ss, SIGTERM);
	sigaddset(&ss, SIGINT);
	srv.sigfd = signalfd(-1, &ss, SFD_NONBLOCK | SFD_CLOEXEC);
	if (srv.epfd < 0 || srv.wakefd < 0 || srv.sigfd < 0) {
		fprintf(stderr, "kpi-infer: cannot create epoll/eventfd/signalfd: %s\n",
			strerror(errno));
		return 1;
	}
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &srv.tag_listen };
	epoll_ctl(srv.epfd, EPOLL_CTL_ADD, srv.lfd, &ev);
	ev.data.ptr = &srv.tag_wake;
	epoll_ctl(srv.epfd, EPOLL_CTL_ADD, srv.wakefd, &ev);
	ev.data.ptr = &srv.tag_signal;
	epoll_ctl(srv.epfd, EPOLL_CTL_ADD, srv.sigfd, &ev);
	return pd_init();
}

/* SIGTERM or SIGINT: the first starts draining; false on a second (exit now). */
static bool on_signals(void)
{
	struct signalfd_siginfo si;
	while (read(srv.sigfd, &si, sizeof(si)) == sizeof(si)) {
		if (srv.draining) {
			fprintf(stderr, "kpi-infer: second signal, exiting now\n");
			return false;
		}
		fprintf(stderr, "kpi-infer: %s: draining %d in-flight requests\n",
			strsignal((int)si.ssi_signo), srv.n_active);
		srv.draining = true;
		if (srv.lfd >= 0) {
			epoll_ctl(srv.epfd, EPOLL_CTL_DEL, srv.lfd, NULL);
			close(srv.lfd);
			srv.lfd = -1;
		}
		sweep(eth_now_ns()); /* closes idle keep-alive connections */
	}
	return true;
}

/* Until drained (returns 0), a second signal or an epoll failure (1). */
static int server_loop(void)
{
	struct epoll_event evs[256];
	uint64_t last_sweep = eth_now_ns();
	for (;;) {
		if (srv.draining && srv.nconns == 0 && srv.n_active == 0)
			return 0; /* idle outbound connections close with the process */
		int n = epoll_wait(srv.epfd, evs, 256, 250);
		if (n < 0 && errno != EINTR) {
			fprintf(stderr, "kpi-infer: epoll_wait: %s\n", strerror(errno));
			return 0;
		}
		for (int i = 0; i < n; i++) {
			int tag = *(int *)evs[i].data.ptr;
			if (tag == TAG_LISTEN) {
				accept_all();
			} else if (tag == TAG_WAKE) {
				fanout_engine_events();
			} else if (tag == TAG_SIGNAL) {
				if (!on_signals())
					return 1;
			} else if (tag == TAG_UPSTREAM || tag == TAG_TIMER) {
				pd_epoll_event(evs[i].data.ptr, evs[i].events);
			} else {
				struct conn *c = evs[i].data.ptr;
				if (c->state != CS_CLOSED)
					conn_event(c, evs[i].events);
			}
		}
		uint64_t now = eth_now_ns();
		if (now - last_sweep > 250000000ull) {
			sweep(now);
			last_sweep = now;
		}
		conn_run_ready();
		conn_reap_dead();
		pd_reap();
	}
}

int server_run(struct engine *e, const struct server_config *cfg)
{
	if (server_setup(e, cfg))
		return 1;
	int rc = e ? eth_start(&srv.eth, e, srv.wakefd) : 0;
	if (rc < 0) {
		fprintf(stderr, "kpi-infer: cannot start the engine thread: %s\n", strerror(-rc));
		return 1;
	}

	const char *h = cfg->host;
	bool v6 = strchr(h, ':') != NULL;
	if (cfg->role == ROLE_COLOCATED)
		printf("listening on http://%s%s%s:%d\n", v6 ? "[" : "", h, v6 ? "]" : "", cfg->port);
	else
		printf("listening on http://%s%s%s:%d (--role %s)\n", v6 ? "[" : "", h, v6 ? "]" : "",
		       cfg->port, server_role_name(cfg->role));
	fflush(stdout);

	if (server_loop())
		return 1;
	if (e)
		eth_stop(&srv.eth);
	req_free_all();
	while (srv.conns)
		conn_close(srv.conns);
	conn_reap_dead();
	pd_close_all();
	pd_free();
	close(srv.wakefd);
	close(srv.sigfd);
	close(srv.epfd);
	return 0;
}
