/* http_serve.c - a minimal HTTP/1.1 server (GET/HEAD /metrics, one request
 * per connection) on its own thread: the agent's main loop sleeps inside
 * libbpf's ring_buffer__poll(), whose epoll set cannot carry other fds, and
 * a scrape must neither wait for the next flush nor hold up the ring. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "http_serve.h"
#include "prom_proto.h"

#define HTTP_MAX_CONNS  32
#define HTTP_HEAD_MAX   8192
#define HTTP_TIMEOUT_MS 10000   /* a connection that neither asks nor reads in time */

struct conn {
	int fd;
	uint64_t deadline;
	char head[HTTP_HEAD_MAX];
	size_t head_len;
	char *out;                  /* response being written (malloc) */
	size_t out_len, out_off;
};

struct http_server {
	int listen_fd, wake[2];
	pthread_t thread;
	bool running;
	http_render_fn render;
	void *ctx;
	char bound[96];
	struct conn conns[HTTP_MAX_CONNS];
};

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int http_serve_parse_addr(const char *spec, char *host, size_t hostlen, int *port,
			  char *err, size_t errlen)
{
	const char *colon, *p;
	char *end;
	long v;

	if (spec[0] == '[') {
		const char *rb = strchr(spec, ']');
		if (!rb || rb[1] != ':') {
			snprintf(err, errlen, "'%s': an IPv6 address goes as [ADDR]:PORT", spec);
			return -1;
		}
		if ((size_t)(rb - spec - 1) >= hostlen)
			goto bad;
		snprintf(host, hostlen, "%.*s", (int)(rb - spec - 1), spec + 1);
		p = rb + 2;
	} else if ((colon = strrchr(spec, ':'))) {
		if (strchr(spec, ':') != colon) {
			snprintf(err, errlen, "'%s': an IPv6 address goes as [ADDR]:PORT", spec);
			return -1;
		}
		if ((size_t)(colon - spec) >= hostlen)
			goto bad;
		snprintf(host, hostlen, "%.*s", (int)(colon - spec), spec);
		if (!host[0])
			snprintf(host, hostlen, "127.0.0.1");
		p = colon + 1;
	} else {
		snprintf(host, hostlen, "127.0.0.1");
		p = spec;
	}
	errno = 0;
	v = strtol(p, &end, 10);
	if (errno || end == p || *end || v < 0 || v > 65535)
		goto bad;
	*port = (int)v;
	return 0;
bad:
	snprintf(err, errlen, "'%s' is not ADDR:PORT or PORT (a port from 0 to 65535, e.g. "
		 "127.0.0.1:9464 or 9464)", spec);
	return -1;
}

static int listen_on(const char *host, int port, char *bound, size_t boundlen,
		     char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *res, *ai;
	char ports[8];
	int fd = -1, one = 1, rc, saved = 0;

	snprintf(ports, sizeof(ports), "%d", port);
	rc = getaddrinfo(host, ports, &hints, &res);
	if (rc) {
		snprintf(err, errlen, "cannot resolve '%s': %s", host, gai_strerror(rc));
		return -1;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			saved = errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 64) == 0)
			break;
		saved = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0) {
		snprintf(err, errlen, "cannot listen on %s:%d: %s%s", host, port, strerror(saved),
			 saved == EADDRINUSE ? " (pick another port)" : "");
		return -1;
	}
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char h[INET6_ADDRSTRLEN] = "?";
	getsockname(fd, (struct sockaddr *)&ss, &sl);
	if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
		inet_ntop(AF_INET6, &a->sin6_addr, h, sizeof(h));
		snprintf(bound, boundlen, "[%s]:%d", h, ntohs(a->sin6_port));
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;
		inet_ntop(AF_INET, &a->sin_addr, h, sizeof(h));
		snprintf(bound, boundlen, "%s:%d", h, ntohs(a->sin_port));
	}
	return fd;
}

/* ---- one connection ------------------------------------------------------------------ */

static void conn_close(struct conn *c)
{
	close(c->fd);
	free(c->out);
	c->fd = -1;
	c->out = NULL;
}

static void respond(struct conn *c, int status, const char *reason, const char *ctype,
		    const char *extra, const char *body, size_t body_len, bool head_only)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f) {
		c->out_len = 0;
		return;
	}
	fprintf(f, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
		"Connection: close\r\n\r\n", status, reason, ctype, body_len, extra ? extra : "");
	if (!head_only)
		fwrite(body, 1, body_len, f);
	fclose(f);
	c->out = buf;
	c->out_len = len;
	c->out_off = 0;
}

static void respond_error(struct conn *c, int status, const char *reason, const char *extra,
			  const char *msg)
{
	char body[512];
	int n = snprintf(body, sizeof(body), "{\"error\":{\"code\":%d,\"message\":\"%s\"}}\n",
			 status, msg);
	respond(c, status, reason, "application/json", extra, body, (size_t)n, false);
}

/* Whether the request's Accept header names the protobuf MetricFamily
 * exposition (with a weight above 0). */
static bool accepts_proto(const char *head)
{
	const char *h = head;

	while ((h = strchr(h, '\n'))) {
		h++;
		if (strncasecmp(h, "accept:", 7))
			continue;
		const char *eol = strchr(h, '\n');
		size_t n = eol ? (size_t)(eol - h) : strlen(h);
		char line[1024];
		snprintf(line, sizeof(line), "%.*s", (int)n, h);
		char *save = NULL;
		for (char *tok = strtok_r(line + 7, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
			if (!strstr(tok, PROM_PROTO_ACCEPT) || !strstr(tok, "proto=io.prometheus.client.MetricFamily") ||
			    !strstr(tok, "encoding=delimited"))
				continue;
			const char *q = strstr(tok, "q=");
			return !q || strtod(q + 2, NULL) > 0;
		}
		return false;
	}
	return false;
}

static void handle_request(struct http_server *s, struct conn *c)
{
	char method[16], target[1024], version[16];
	char *eol = strstr(c->head, "\r\n");

	if (!eol)
		eol = strchr(c->head, '\n');
	if (!eol || sscanf(c->head, "%15s %1023s %15s", method, target, version) != 3 ||
	    strncmp(version, "HTTP/1.", 7)) {
		respond_error(c, 400, "Bad Request", NULL,
			      "malformed request line: expected 'GET /metrics HTTP/1.1'");
		return;
	}
	bool head = !strcmp(method, "HEAD");
	if (strcmp(method, "GET") && !head) {
		respond_error(c, 405, "Method Not Allowed", "Allow: GET, HEAD\r\n",
			      "only GET and HEAD are served");
		return;
	}
	char *q = strchr(target, '?');
	if (q)
		*q = 0;
	if (!strcmp(target, "/")) {
		static const char idx[] = "kpi-agent: metrics at /metrics\n";
		respond(c, 200, "OK", "text/plain; charset=utf-8", NULL, idx, sizeof(idx) - 1, head);
		return;
	}
	if (strcmp(target, "/metrics")) {
		respond_error(c, 404, "Not Found", NULL, "no such path: the agent serves /metrics");
		return;
	}
	/* a Prometheus with native histograms on asks for the protobuf
	 * exposition first; anyone else gets the text format */
	bool proto = accepts_proto(c->head);
	char *body = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&body, &len);
	int rc = f ? s->render(s->ctx, f, proto) : -1;
	if (f)
		fclose(f);
	if (rc)
		respond_error(c, 500, "Internal Server Error", NULL, "rendering the metrics failed");
	else
		respond(c, 200, "OK", proto ? PROM_PROTO_TYPE : "text/plain; version=0.0.4; charset=utf-8",
			NULL, body, len, head);
	free(body);
}

/* Reads what is there; a complete head gets its response queued. */
static void conn_read(struct http_server *s, struct conn *c)
{
	for (;;) {
		ssize_t n = recv(c->fd, c->head + c->head_len, HTTP_HEAD_MAX - 1 - c->head_len, 0);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			conn_close(c);
			return;
		}
		if (n < 0)
			return;
		c->head_len += (size_t)n;
		c->head[c->head_len] = 0;
		if (strstr(c->head, "\r\n\r\n") || strstr(c->head, "\n\n")) {
			handle_request(s, c);
			return;
		}
		if (c->head_len == HTTP_HEAD_MAX - 1) {
			respond_error(c, 431, "Request Header Fields Too Large", NULL,
				      "request head over 8 KiB");
			return;
		}
	}
}

static void conn_write(struct conn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0) {
			conn_close(c);
			return;
		}
		c->out_off += (size_t)n;
	}
	shutdown(c->fd, SHUT_WR);
	/* unread request bytes would turn close() into a reset that can destroy
	 * the response in flight (a 431 for an oversized head, say) */
	char sink[4096];
	for (int i = 0; i < 64 && recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++)
		;
	conn_close(c);
}

/* ---- the thread ------------------------------------------------------------------------ */

static void accept_all(struct http_server *s)
{
	for (;;) {
		int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		int i;
		for (i = 0; i < HTTP_MAX_CONNS && s->conns[i].fd >= 0; i++)
			;
		if (i == HTTP_MAX_CONNS) {
			/* busy: refuse rather than queue; Prometheus retries next interval */
			static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\n"
				"Content-Length: 0\r\nConnection: close\r\n\r\n";
			ssize_t w = send(fd, busy, sizeof(busy) - 1, MSG_NOSIGNAL);
			(void)w;
			close(fd);
			continue;
		}
		struct conn *c = &s->conns[i];
		c->fd = fd;
		c->head_len = 0;
		c->out = NULL;
		c->out_len = c->out_off = 0;
		c->deadline = mono_ms() + HTTP_TIMEOUT_MS;
	}
}

static void *serve_thread(void *arg)
{
	struct http_server *s = arg;
	struct pollfd pfd[HTTP_MAX_CONNS + 2];
	int map[HTTP_MAX_CONNS + 2];
	sigset_t all;

	/* signals are the main thread's business */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	for (;;) {
		int n = 0;
		pfd[n++] = (struct pollfd){ .fd = s->wake[0], .events = POLLIN };
		pfd[n++] = (struct pollfd){ .fd = s->listen_fd, .events = POLLIN };
		for (int i = 0; i < HTTP_MAX_CONNS; i++) {
			struct conn *c = &s->conns[i];
			if (c->fd < 0)
				continue;
			map[n] = i;
			pfd[n++] = (struct pollfd){ .fd = c->fd, .events = c->out ? POLLOUT : POLLIN };
		}
		if (poll(pfd, (nfds_t)n, 1000) < 0 && errno != EINTR)
			break;
		if (pfd[0].revents)
			break;
		if (pfd[1].revents & POLLIN)
			accept_all(s);
		uint64_t now = mono_ms();
		for (int k = 2; k < n; k++) {
			struct conn *c = &s->conns[map[k]];
			if (c->fd < 0)
				continue;
			if (pfd[k].revents & (POLLERR | POLLHUP | POLLNVAL) && !(pfd[k].revents & POLLIN)) {
				conn_close(c);
				continue;
			}
			if (!c->out && (pfd[k].revents & POLLIN))
				conn_read(s, c);
			if (c->fd >= 0 && c->out)
				conn_write(c);
			if (c->fd >= 0 && now > c->deadline)
				conn_close(c);
		}
	}
	return NULL;
}

struct http_server *http_serve_start(const char *spec, http_render_fn render, void *ctx,
				     char *err, size_t errlen)
{
	char host[256];
	int port;
	struct http_server *s;

	if (http_serve_parse_addr(spec, host, sizeof(host), &port, err, errlen))
		return NULL;
	s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	for (int i = 0; i < HTTP_MAX_CONNS; i++)
		s->conns[i].fd = -1;
	s->render = render;
	s->ctx = ctx;
	s->wake[0] = s->wake[1] = -1;
	s->listen_fd = listen_on(host, port, s->bound, sizeof(s->bound), err, errlen);
	if (s->listen_fd < 0)
		goto fail;
	if (pipe2(s->wake, O_CLOEXEC)) {
		snprintf(err, errlen, "pipe: %s", strerror(errno));
		goto fail;
	}
	int rc = pthread_create(&s->thread, NULL, serve_thread, s);
	if (rc) {
		snprintf(err, errlen, "cannot start the metrics thread: %s", strerror(rc));
		goto fail;
	}
	s->running = true;
	return s;
fail:
	if (s->listen_fd >= 0)
		close(s->listen_fd);
	if (s->wake[0] >= 0) {
		close(s->wake[0]);
		close(s->wake[1]);
	}
	free(s);
	return NULL;
}

const char *http_serve_bound(const struct http_server *s)
{
	return s->bound;
}

void http_serve_stop(struct http_server *s)
{
	if (!s)
		return;
	if (s->running) {
		ssize_t w = write(s->wake[1], "x", 1);
		(void)w;
		pthread_join(s->thread, NULL);
	}
	for (int i = 0; i < HTTP_MAX_CONNS; i++)
		if (s->conns[i].fd >= 0)
			conn_close(&s->conns[i]);
	close(s->listen_fd);
	close(s->wake[0]);
	close(s->wake[1]);
	free(s);
}
