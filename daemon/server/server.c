/* server.c - kpi-infer's I/O thread: the epoll loop, accepting, timeouts,
 * draining and the routes. A connection's life is conn.c, inference requests
 * are generate.c (in) and fanout.c (out). Each SSE token chunk leaves in
 * exactly one send() as soon as its event arrives, because the agent times
 * tokens by the daemon's own writes on the request's fd. */
#include "daemon/server/server_int.h"

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
#include "daemon/server/openai.h"

#define LINGER_NS (2000000000ull)

struct server srv;

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
	struct engine_stats st;
	eth_stats(&srv.eth, &st);
	struct sbuf b = { 0 };
	metrics_render(&srv.m, &st, srv.model_label, &b);
	conn_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len, NULL);
	sbuf_free(&b);
}

void server_dispatch(struct conn *c, const char *body, size_t len)
{
	static const struct {
		const char *path, *method;
	} routes[] = {
		{ "/v1/completions", "POST" }, { "/v1/chat/completions", "POST" },
		{ "/v1/models", "GET" }, { "/health", "GET" }, { "/metrics", "GET" },
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
	switch (route) {
	case 0:
	case 1:
		generate_handle(c, body, len, route == 1);
		break;
	case 2:
		handle_models(c);
		break;
	case 3:
		if (srv.draining)
			conn_reject(c, 503, KPI_REJECT_DRAINING, "the server is shutting down", true,
				    NULL);
		else
			conn_respond(c, 200, "application/json", "{\"status\":\"ok\"}\n", 16, NULL);
		break;
	case 4:
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
	uint64_t req_ns = (uint64_t)srv.cfg->request_timeout_s * 1000000000ull;
	uint64_t idle_ns = (uint64_t)srv.cfg->idle_timeout_s * 1000000000ull;
	for (struct conn *c = srv.conns, *next; c; c = next) {
		next = c->next;
		if ((c->state == CS_HEAD || c->state == CS_BODY) && c->t_first_byte &&
		    now - c->t_first_byte > req_ns) {
			if (!c->rid[0] || c->state == CS_HEAD)
				conn_make_request_id(c, ++srv.seq);
			char msg[128];
			snprintf(msg, sizeof(msg), "request not received within %d s "
				 "(--request-timeout)", srv.cfg->request_timeout_s);
			conn_reject(c, 408, KPI_REJECT_TIMEOUT, msg, true, NULL);
		} else if (c->state == CS_HEAD && !c->t_first_byte &&
			   (now - c->t_activity > idle_ns || srv.draining)) {
			conn_close(c);
		} else if (c->state == CS_LINGER && now - c->t_activity > LINGER_NS) {
			conn_close(c);
		}
	}
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
	srv.mi = engine_model(e);
	srv.pid = (unsigned)getpid();
	srv.tag_listen = TAG_LISTEN;
	srv.tag_wake = TAG_WAKE;
	srv.tag_signal = TAG_SIGNAL;
	metrics_init(&srv.m);
	set_model_name(srv.mi->name[0] ? srv.mi->name : cfg->model_label);
	raise_fd_limit();

	struct engine_stats st;
	engine_stats(e, &st);
	srv.ctx_len = srv.mi->context_length;
	srv.kv_tokens = st.kv_blocks_total * (cfg->block_size > 0 ? cfg->block_size : 16);

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
	return 0;
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
			return 0;
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
		conn_reap_dead();
	}
}

int server_run(struct engine *e, const struct server_config *cfg)
{
	if (server_setup(e, cfg))
		return 1;
	int rc = eth_start(&srv.eth, e, srv.wakefd);
	if (rc < 0) {
		fprintf(stderr, "kpi-infer: cannot start the engine thread: %s\n", strerror(-rc));
		return 1;
	}

	const char *h = cfg->host;
	bool v6 = strchr(h, ':') != NULL;
	printf("listening on http://%s%s%s:%d\n", v6 ? "[" : "", h, v6 ? "]" : "", cfg->port);
	fflush(stdout);

	if (server_loop())
		return 1;
	eth_stop(&srv.eth);
	req_free_all();
	while (srv.conns)
		conn_close(srv.conns);
	conn_reap_dead();
	close(srv.wakefd);
	close(srv.sigfd);
	close(srv.epfd);
	return 0;
}
