/* upstream.c - outbound HTTP/1.1 exchanges (upstream.h): a pool of keep-alive
 * connections per address, non-blocking connect and send, the answer's head
 * parsed and its body framed, each outcome reported to the owner's ops. */
#include "daemon/pd/upstream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h> /* IOV_MAX: most pieces one sendmsg or readv takes */
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/server/state.h"

#define READ_CHUNK 65536
#define POOL_IDLE_MAX 64  /* idle connections kept per address */

struct upstream_pool {
	char addr[128];
	struct sockaddr_storage sa;
	socklen_t salen;
	struct upstream *idle;
	int n_idle;
	struct upstream_pool *next;
};

static struct upstream_pool *pools;
static struct upstream *all, *dead;

/* ---- addresses ---------------------------------------------------------------- */

/* "host:port" or "[v6]:port" into host and port. */
static bool split_addr(const char *addr, char *host, size_t hn, char *port, size_t pn)
{
	const char *colon = strrchr(addr, ':');
	if (!colon || !colon[1])
		return false;
	const char *h = addr;
	size_t hl = (size_t)(colon - addr);
	if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
		h++;
		hl -= 2;
	}
	if (hl == 0 || hl >= hn || strlen(colon + 1) >= pn)
		return false;
	memcpy(host, h, hl);
	host[hl] = 0;
	snprintf(port, pn, "%s", colon + 1);
	return true;
}

static struct upstream_pool *pool_get(const char *addr, char *err, size_t errlen)
{
	for (struct upstream_pool *p = pools; p; p = p->next)
		if (!strcmp(p->addr, addr))
			return p;
	char host[128], port[16];
	if (strlen(addr) >= sizeof(pools->addr) ||
	    !split_addr(addr, host, sizeof(host), port, sizeof(port))) {
		snprintf(err, errlen, "'%s' is not host:port", addr);
		return NULL;
	}
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV }, *res;
	int rc = getaddrinfo(host, port, &hints, &res);
	if (rc) {
		snprintf(err, errlen, "cannot resolve '%s': %s", addr, gai_strerror(rc));
		return NULL;
	}
	struct upstream_pool *p = calloc(1, sizeof(*p));
	if (!p) {
		freeaddrinfo(res);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	snprintf(p->addr, sizeof(p->addr), "%s", addr);
	memcpy(&p->sa, res->ai_addr, res->ai_addrlen);
	p->salen = res->ai_addrlen;
	freeaddrinfo(res);
	p->next = pools;
	pools = p;
	return p;
}

void upstream_peer(const struct upstream *u, char *out, size_t n)
{
	snprintf(out, n, "%s", u->pool ? u->pool->addr : "");
}

int upstream_fd(const struct upstream *u)
{
	return u->fd;
}

/* ---- lifetime ------------------------------------------------------------------- */

static void set_events(struct upstream *u, uint32_t ev)
{
	if (u->fd < 0 || ev == u->events)
		return;
	struct epoll_event e = { .events = ev, .data.ptr = u };
	epoll_ctl(srv.epfd, EPOLL_CTL_MOD, u->fd, &e);
	u->events = ev;
}

static void close_fd(struct upstream *u)
{
	if (u->fd < 0)
		return;
	epoll_ctl(srv.epfd, EPOLL_CTL_DEL, u->fd, NULL);
	close(u->fd);
	u->fd = -1;
	srv.n_upstream--;
}

static void pool_unidle(struct upstream *u)
{
	struct upstream **pp = &u->pool->idle;
	while (*pp && *pp != u)
		pp = &(*pp)->idle_next;
	if (*pp) {
		*pp = u->idle_next;
		u->pool->n_idle--;
	}
	u->idle_next = NULL;
}

/* Closes u for good; freed at the end of the loop iteration. */
static void destroy(struct upstream *u)
{
	if (u->state == U_CLOSED)
		return;
	if (u->state == U_IDLE)
		pool_unidle(u);
	close_fd(u);
	u->state = U_CLOSED;
	u->ops = NULL;
	if (u->all_prev)
		u->all_prev->all_next = u->all_next;
	else
		all = u->all_next;
	if (u->all_next)
		u->all_next->all_prev = u->all_prev;
	u->dead_next = dead;
	dead = u;
}

void upstream_reap(void)
{
	while (dead) {
		struct upstream *u = dead;
		dead = u->dead_next;
		sbuf_free(&u->out);
		sbuf_free(&u->in);
		sbuf_free(&u->scratch);
		free(u);
	}
}

void upstream_close_all(void)
{
	while (all)
		destroy(all);
	upstream_reap();
	while (pools) {
		struct upstream_pool *p = pools;
		pools = p->next;
		free(p);
	}
}

static void fail(struct upstream *u, enum upstream_error e, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* A fresh socket connecting to the pool's address. */
static int open_socket(struct upstream *u)
{
	const struct upstream_pool *p = u->pool;
	int fd = socket(p->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (const struct sockaddr *)&p->sa, p->salen) < 0 && errno != EINPROGRESS) {
		int e = errno;
		close(fd);
		return -e;
	}
	u->fd = fd;
	u->events = EPOLLOUT | EPOLLRDHUP;
	struct epoll_event ev = { .events = u->events, .data.ptr = u };
	if (epoll_ctl(srv.epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		int e = errno;
		close(fd);
		u->fd = -1;
		return -e;
	}
	srv.n_upstream++;
	u->state = U_CONNECTING;
	u->reused = false;
	return 0;
}

static void reset_exchange(struct upstream *u)
{
	u->out_off = 0;
	u->got_bytes = false;
	sbuf_consume(&u->in, u->in.len);
	sbuf_consume(&u->scratch, u->scratch.len);
	memset(&u->ch, 0, sizeof(u->ch));
	u->body_left = -1;
	u->t_activity = eth_now_ns();
}

struct upstream *upstream_start(const char *addr, const char *req, size_t len,
				const struct upstream_ops *ops, void *owner, char *err, size_t errlen)
{
	struct upstream_pool *p = pool_get(addr, err, errlen);
	if (!p)
		return NULL;
	struct upstream *u = p->idle;
	if (u) {
		pool_unidle(u);
		u->reused = true;
		u->state = U_SENDING;
		set_events(u, EPOLLOUT | EPOLLRDHUP);
	} else {
		u = calloc(1, sizeof(*u));
		if (!u) {
			snprintf(err, errlen, "out of memory");
			return NULL;
		}
		u->tag = TAG_UPSTREAM;
		u->fd = -1;
		u->pool = p;
		int rc = open_socket(u);
		if (rc < 0) {
			snprintf(err, errlen, "cannot connect to %s: %s", addr, strerror(-rc));
			free(u);
			return NULL;
		}
		u->all_next = all;
		if (all)
			all->all_prev = u;
		all = u;
	}
	u->retried = false;
	u->ops = ops;
	u->owner = owner;
	sbuf_consume(&u->out, u->out.len);
	sbuf_add(&u->out, req, len);
	reset_exchange(u);
	return u;
}

void upstream_abort(struct upstream *u)
{
	destroy(u);
}

/* The exchange is over and the connection may carry another: back to the pool. */
static void finish_ok(struct upstream *u)
{
	bool keep = u->resp.keep_alive && u->body_left <= 0 && u->in.len == 0 && u->fd >= 0 &&
		    u->pool->n_idle < POOL_IDLE_MAX && !srv.draining;
	u->ops = NULL;
	u->owner = NULL;
	if (!keep) {
		destroy(u);
		return;
	}
	u->state = U_IDLE;
	u->idle_next = u->pool->idle;
	u->pool->idle = u;
	u->pool->n_idle++;
	u->t_activity = eth_now_ns();
	set_events(u, EPOLLIN | EPOLLRDHUP); /* an idle one that becomes readable has been closed */
}

static void fail(struct upstream *u, enum upstream_error e, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	const struct upstream_ops *ops = u->ops;
	void *owner = u->owner;
	destroy(u);
	if (ops && ops->on_error)
		ops->on_error(u, owner, e, msg);
}

/* A reused keep-alive connection the server had already closed: nothing of
 * this request reached it, so it goes again on a fresh connection, once. */
static bool retry_fresh(struct upstream *u)
{
	if (!u->reused || u->got_bytes || u->retried)
		return false;
	close_fd(u);
	if (open_socket(u) < 0)
		return false;
	u->retried = true;
	reset_exchange(u);
	return true;
}

/* ---- the answer ------------------------------------------------------------------- */

/* Body bytes at p (n of them, framing included): to the owner, then the end. */
static void deliver(struct upstream *u, const char *p, size_t n)
{
	bool last = false;
	if (u->body_left >= 0) {
		u->body_left -= (long long)n;
		last = u->body_left == 0;
	} else if (u->resp.chunked) {
		ssize_t k = http_chunked_feed(&u->ch, p, n, &u->scratch, (size_t)1 << 40);
		sbuf_consume(&u->scratch, u->scratch.len);
		if (k < 0) {
			fail(u, UPSTREAM_PROTOCOL, "bad chunked framing from %s: %s", u->pool->addr,
			     u->ch.error);
			return;
		}
		last = u->ch.done;
		n = (size_t)k;
	}
	u->ops->on_body(u, u->owner, p, n, last);
	if (last && u->state != U_CLOSED && u->ops) /* the owner may have aborted */
		finish_ok(u);
}

static void got_head(struct upstream *u)
{
	struct http_response *h = &u->resp;
	int r = http_parse_response_head(u->in.data, u->in.len, h);
	if (r == 0)
		return;
	if (r < 0) {
		fail(u, UPSTREAM_PROTOCOL, "invalid answer from %s: %s", u->pool->addr, h->error);
		return;
	}
	if (h->status < 200) { /* 100 Continue and friends: skip */
		sbuf_consume(&u->in, (size_t)r);
		return;
	}
	u->body_left = h->chunked ? -1 : h->content_length;
	if (!h->chunked && h->content_length < 0)
		h->keep_alive = false; /* a body that ends at EOF */
	u->state = U_BODY;
	u->ops->on_head(u, u->owner, h, u->in.data);
	if (u->state == U_CLOSED || !u->ops)
		return;
	sbuf_consume(&u->in, (size_t)r);
	if (u->body_left == 0) {
		u->ops->on_body(u, u->owner, "", 0, true);
		if (u->state != U_CLOSED && u->ops)
			finish_ok(u);
		return;
	}
	if (u->in.len) {
		/* body bytes that came with the head */
		struct sbuf rest = u->in;
		u->in = (struct sbuf){ 0 };
		size_t n = rest.len, off = 0;
		if (u->body_left >= 0 && (long long)n > u->body_left)
			n = (size_t)u->body_left;
		while (off < n && u->state == U_BODY && u->ops) {
			struct iovec dst;
			if (!u->ops->body_iov || u->body_left <= 0 ||
			    u->ops->body_iov(u, u->owner, &dst, 1) < 1 || !dst.iov_len) {
				deliver(u, rest.data + off, n - off);
				break;
			}
			size_t k = n - off < dst.iov_len ? n - off : dst.iov_len;
			memcpy(dst.iov_base, rest.data + off, k);
			off += k;
			u->body_left -= (long long)k;
			bool last = u->body_left == 0;
			u->ops->body_got(u, u->owner, k, last);
			if (last && u->state != U_CLOSED && u->ops)
				finish_ok(u);
		}
		sbuf_free(&rest);
	}
}

static void on_readable(struct upstream *u)
{
	if (u->state == U_IDLE) {
		destroy(u); /* the server closed a kept-alive connection, or sent junk */
		return;
	}
	for (int rounds = 0; rounds < 64; rounds++) {
		if (u->state != U_HEAD && u->state != U_BODY)
			return; /* done (back in the pool), failed or aborted */
		struct iovec iov[IOV_MAX];
		int k = 0;
		if (u->state == U_BODY && u->ops->body_iov && u->body_left > 0)
			k = u->ops->body_iov(u, u->owner, iov, IOV_MAX);
		bool direct = k > 0;
		if (direct) {
			/* never past the body: what follows is the next answer's */
			size_t room = (size_t)u->body_left;
			for (int i = 0; i < k; i++) {
				if (iov[i].iov_len >= room) {
					iov[i].iov_len = room;
					k = i + 1;
					break;
				}
				room -= iov[i].iov_len;
			}
		} else {
			sbuf_reserve(&u->in, READ_CHUNK);
			size_t cap = u->in.cap - u->in.len - 1;
			if (u->state == U_BODY && u->body_left > 0 && (long long)cap > u->body_left)
				cap = (size_t)u->body_left;
			iov[0] = (struct iovec){ u->in.data + u->in.len, cap };
			k = 1;
		}
		ssize_t n = readv(u->fd, iov, k);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
				return;
			if (!retry_fresh(u))
				fail(u, UPSTREAM_IO, "connection to %s failed: %s", u->pool->addr,
				     strerror(errno));
			return;
		}
		if (n == 0) {
			if (u->state == U_BODY && u->body_left < 0 && !u->resp.chunked) {
				/* a body delimited by the close */
				u->ops->on_body(u, u->owner, "", 0, true);
				if (u->state != U_CLOSED)
					destroy(u);
			} else if (!retry_fresh(u)) {
				fail(u, UPSTREAM_IO, "%s closed the connection %s", u->pool->addr,
				     u->state == U_BODY ? "in the middle of its answer" :
				     "before answering");
			}
			return;
		}
		u->got_bytes = true;
		u->t_activity = eth_now_ns();
		if (direct) {
			u->body_left -= n;
			bool last = u->body_left == 0;
			u->ops->body_got(u, u->owner, (size_t)n, last);
			if (last && u->state != U_CLOSED && u->ops)
				finish_ok(u);
			continue;
		}
		u->in.len += (size_t)n;
		u->in.data[u->in.len] = 0;
		if (u->state == U_HEAD) {
			got_head(u);
		} else if (u->state == U_BODY) {
			struct sbuf chunk = u->in;
			u->in = (struct sbuf){ 0 };
			deliver(u, chunk.data, chunk.len);
			sbuf_free(&chunk);
		}
	}
}

static void on_writable(struct upstream *u)
{
	if (u->state == U_CONNECTING) {
		int e = 0;
		socklen_t el = sizeof(e);
		getsockopt(u->fd, SOL_SOCKET, SO_ERROR, &e, &el);
		if (e) {
			fail(u, UPSTREAM_CONNECT, "cannot connect to %s: %s", u->pool->addr, strerror(e));
			return;
		}
		u->state = U_SENDING;
	}
	while (u->out_off < u->out.len) {
		ssize_t n = send(u->fd, u->out.data + u->out_off, u->out.len - u->out_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
				return;
			if (!retry_fresh(u))
				fail(u, UPSTREAM_IO, "sending to %s failed: %s", u->pool->addr,
				     strerror(errno));
			return;
		}
		u->out_off += (size_t)n;
		u->t_activity = eth_now_ns();
	}
	u->state = U_HEAD;
	set_events(u, EPOLLIN | EPOLLRDHUP);
}

void upstream_event(struct upstream *u, uint32_t ev)
{
	if (u->state == U_CLOSED)
		return;
	if (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP) && (u->state == U_CONNECTING || u->state == U_SENDING)) {
		on_writable(u);
		if (u->state == U_CLOSED || u->state == U_SENDING || u->state == U_CONNECTING)
			return;
	}
	if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
		on_readable(u);
}

void upstream_sweep(uint64_t now)
{
	uint64_t limit = (uint64_t)srv.cfg->upstream_timeout_s * 1000000000ull;
	uint64_t idle = (uint64_t)srv.cfg->idle_timeout_s * 1000000000ull / 2;
	for (struct upstream *u = all, *next; u; u = next) {
		next = u->all_next;
		if (u->state == U_IDLE) {
			/* closed before the server's own idle timeout would race a request */
			if (now - u->t_activity > idle || srv.draining)
				destroy(u);
		} else if (u->state != U_CLOSED && now - u->t_activity > limit) {
			fail(u, UPSTREAM_TIMEOUT, "%s sent nothing for %d s (--upstream-timeout)",
			     u->pool->addr, srv.cfg->upstream_timeout_s);
		}
	}
}
