/* agent_target.c - a small stand-in for kpi-infer for the agent's tests: an
 * OpenAI-style /v1/completions server (SSE or JSON, keep-alive, 429 when the
 * queue is full) whose fake engine fires every kpi USDT probe in order. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "kpi_probes.h"
#include "abi/kpi_reasons.h"

#define MAX_CONNS 1024
#define BUF 16384

enum { C_FREE, C_READING, C_QUEUED, C_RUNNING };

struct conn {
	int fd, state, stream, max_tokens, out, prompt;
	uint64_t id;
	size_t len;
	char buf[BUF];
	char reqid[64];
};

static struct conn conns[MAX_CONNS];
static int max_queue = 8, max_running = 4, step_us = 2000, kv_total = 1024;
static uint64_t next_id = 1, step_no;

static void write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		p += w;
		n -= (size_t)w;
	}
}

static void conn_close(struct conn *c)
{
	close(c->fd);
	c->state = C_FREE;
}

static void respond_json(struct conn *c, int status, const char *body)
{
	char hdr[512];
	int n = snprintf(hdr, sizeof(hdr), "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
			 "x-request-id: %s\r\nContent-Length: %zu\r\n\r\n%s", status,
			 status == 200 ? "OK" : status == 429 ? "Too Many Requests" : "Bad Request",
			 c->reqid, strlen(body), body);
	write_all(c->fd, hdr, (size_t)n);
}

static int count_state(int s)
{
	int n = 0;
	for (int i = 0; i < MAX_CONNS; i++)
		n += conns[i].state == s;
	return n;
}

/* A complete request is in c->buf: admit it or reject it. */
static void handle_request(struct conn *c)
{
	const char *p;

	c->stream = strstr(c->buf, "\"stream\": true") || strstr(c->buf, "\"stream\":true");
	p = strstr(c->buf, "\"max_tokens\":");
	c->max_tokens = p ? atoi(p + 13) : 16;
	if (c->max_tokens < 1)
		c->max_tokens = 1;
	p = strcasestr(c->buf, "\r\nx-request-id: ");
	if (p)
		sscanf(p + 16, "%63[^\r\n]", c->reqid);
	else
		snprintf(c->reqid, sizeof(c->reqid), "tgt-%llu", (unsigned long long)next_id);
	c->prompt = 8 + (int)(c->len % 17);
	c->out = 0;
	if (count_state(C_QUEUED) >= max_queue) {
		KPI_REQUEST_REJECTED(c->fd, 429, 1, c->reqid);
		KPI_RESPONSE_START(0, c->fd);
		respond_json(c, 429, "{\"error\":{\"message\":\"queue full\",\"type\":\"overloaded\"}}");
		KPI_RESPONSE_END(0, c->fd, 429);
		c->state = C_READING;
		c->len = 0;
		return;
	}
	c->id = next_id++;
	KPI_REQUEST_ADMITTED(c->id, c->fd, c->prompt, c->max_tokens, c->reqid,
			     strstr(c->buf, "/v1/chat/completions") ? KPI_OP_CHAT : KPI_OP_TEXT_COMPLETION);
	c->state = C_QUEUED;
}

static void on_readable(struct conn *c)
{
	ssize_t r = read(c->fd, c->buf + c->len, BUF - 1 - c->len);
	char *end;

	if (r <= 0) {
		conn_close(c);
		return;
	}
	c->len += (size_t)r;
	c->buf[c->len] = 0;
	end = strstr(c->buf, "\r\n\r\n");
	if (!end)
		return;
	const char *cl = strcasestr(c->buf, "\r\ncontent-length: ");
	size_t body = cl ? (size_t)atol(cl + 18) : 0;
	if ((size_t)(end + 4 - c->buf) + body > c->len)
		return;
	handle_request(c);
}

/* One write per token; the first also carries the headers, as in kpi-infer. */
static void sse_token(struct conn *c)
{
	char ev[256], chunk[640];
	int h = 0;
	if (c->out == 1)
		h = snprintf(chunk, sizeof(chunk), "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
			     "x-request-id: %s\r\nTransfer-Encoding: chunked\r\n\r\n", c->reqid);
	int n = snprintf(ev, sizeof(ev), "data: {\"choices\":[{\"index\":0,\"text\":\"t%d \"}]}\n\n", c->out);
	int m = snprintf(chunk + h, sizeof(chunk) - (size_t)h, "%x\r\n%s\r\n", n, ev);
	write_all(c->fd, chunk, (size_t)(h + m));
}

static void finish(struct conn *c)
{
	char body[512];

	KPI_REQUEST_FINISHED(c->id, c->out, 2);
	if (c->stream) {
		int n = snprintf(body, sizeof(body), "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,"
				 "\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", c->prompt, c->out);
		char chunk[600];
		int m = snprintf(chunk, sizeof(chunk), "%x\r\n%s\r\n0\r\n\r\n", n, body);
		write_all(c->fd, chunk, (size_t)m);
	} else {
		snprintf(body, sizeof(body), "{\"choices\":[{\"index\":0,\"text\":\"x\",\"finish_reason\":\"length\"}],"
			 "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d}}", c->prompt, c->out);
		KPI_RESPONSE_START(c->id, c->fd);
		respond_json(c, 200, body);
	}
	KPI_RESPONSE_END(c->id, c->fd, 200);
	c->state = C_READING;
	c->len = 0;
}

/* One batch step: schedule queued requests, one token for every running one. */
static void step(void)
{
	int running = count_state(C_RUNNING), prefill = 0, decode = 0;
	struct timespec ts = { 0, step_us * 1000L };

	for (int i = 0; i < MAX_CONNS && running < max_running; i++) {
		if (conns[i].state == C_QUEUED) {
			conns[i].state = C_RUNNING;
			KPI_REQUEST_SCHEDULED(conns[i].id);
			prefill += conns[i].prompt;
			running++;
		}
	}
	decode = running;
	/* a local copy: libbpf 1.1 cannot read %rip-relative USDT arguments */
	uint64_t this_step = ++step_no;
	KPI_STEP_BEGIN(this_step, prefill, decode, running * 4, kv_total - running * 4);
	nanosleep(&ts, NULL);
	KPI_STEP_END(this_step);
	for (int i = 0; i < MAX_CONNS; i++) {
		struct conn *c = &conns[i];
		if (c->state != C_RUNNING)
			continue;
		if (c->out++ == 0) {
			KPI_REQUEST_FIRST_TOKEN(c->id);
			if (c->stream)
				KPI_RESPONSE_START(c->id, c->fd);
		}
		if (c->stream)
			sse_token(c);
		if (c->out >= c->max_tokens)
			finish(c);
	}
}

int main(int argc, char **argv)
{
	int port = 0, one = 1, lfd;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	static struct pollfd pfd[MAX_CONNS + 1];

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--port")) port = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--max-queue")) max_queue = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--max-running")) max_running = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--step-us")) step_us = atoi(argv[i + 1]);
		else { fprintf(stderr, "agent-target: unknown flag %s (flags: --port --max-queue --max-running --step-us)\n", argv[i]); return 2; }
	}
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	sa.sin_port = htons((uint16_t)port);
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 512)) {
		fprintf(stderr, "agent-target: cannot listen on 127.0.0.1:%d: %s\n", port, strerror(errno));
		return 1;
	}
	printf("listening on 127.0.0.1:%d\n", port);
	fflush(stdout);
	for (;;) {
		int n = 0, busy = count_state(C_QUEUED) + count_state(C_RUNNING);
		pfd[n++] = (struct pollfd){ .fd = lfd, .events = POLLIN };
		for (int i = 0; i < MAX_CONNS; i++)
			if (conns[i].state == C_READING)
				pfd[n++] = (struct pollfd){ .fd = conns[i].fd, .events = POLLIN };
		if (poll(pfd, (nfds_t)n, busy ? 0 : 100) < 0 && errno != EINTR)
			return 1;
		if (pfd[0].revents & POLLIN) {
			int cfd = accept(lfd, NULL, NULL);
			if (cfd >= 0) {
				setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
				int slot = -1;
				for (int i = 0; i < MAX_CONNS && slot < 0; i++)
					if (conns[i].state == C_FREE)
						slot = i;
				if (slot < 0) {
					close(cfd);
				} else {
					conns[slot] = (struct conn){ .fd = cfd, .state = C_READING };
				}
			}
		}
		for (int j = 1; j < n; j++) {
			if (!pfd[j].revents)
				continue;
			for (int i = 0; i < MAX_CONNS; i++)
				if (conns[i].state == C_READING && conns[i].fd == pfd[j].fd) {
					on_readable(&conns[i]);
					break;
				}
		}
		if (busy || count_state(C_QUEUED))
			step();
	}
}
