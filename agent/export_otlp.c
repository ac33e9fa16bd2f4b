/* export_otlp.c - OTLP/HTTP JSON trace export: the sink copies each request
 * into a bounded queue (never blocking the main loop); a sender thread
 * batches, encodes and POSTs, retrying with exponential backoff on the
 * answers the OTLP spec calls retryable, and counts every request it drops. */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "export_otlp.h"

#define OTLP_BACKOFF_MAX_MS 16000

/* ---- configuration ------------------------------------------------------------------ */

static int env_int(const char *name, int *out, int lo, int hi, char *err, size_t errlen)
{
	const char *s = getenv(name);
	char *end;
	long v;

	if (!s || !*s)
		return 0;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi) {
		snprintf(err, errlen, "%s wants an integer from %d to %d, got '%s'", name, lo, hi, s);
		return -1;
	}
	*out = (int)v;
	return 0;
}

int otlp_config_from_env(struct otlp_config *c, char *err, size_t errlen)
{
	const char *svc = getenv("OTEL_SERVICE_NAME");

	*c = (struct otlp_config){ .max_queue = 2048, .max_batch = 512, .delay_ms = 5000,
				   .timeout_ms = 10000, .max_attempts = 6, .backoff_ms = 500 };
	snprintf(c->service_name, sizeof(c->service_name), "%s", svc && *svc ? svc : "kpi-infer");
	if (env_int("OTEL_BSP_MAX_QUEUE_SIZE", &c->max_queue, 1, 1 << 20, err, errlen) ||
	    env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", &c->max_batch, 1, 1 << 20, err, errlen) ||
	    env_int("OTEL_BSP_SCHEDULE_DELAY", &c->delay_ms, 1, 3600000, err, errlen) ||
	    env_int("OTEL_EXPORTER_OTLP_TIMEOUT", &c->timeout_ms, 1, 600000, err, errlen))
		return -1;
	if (c->max_batch > c->max_queue)
		c->max_batch = c->max_queue;
	return 0;
}

/* ---- encoding ---------------------------------------------------------------------- */

void otlp_item_fill(struct otlp_item *it, const struct kpi_request_record *r)
{
	it->r = *r;
	it->r.token_writes = NULL;
	it->r.n_token_writes = 0;
	snprintf(it->finish, sizeof(it->finish), "%s", r->finish_reason ? r->finish_reason : "");
	snprintf(it->reject, sizeof(it->reject), "%s", r->reject_reason ? r->reject_reason : "");
	snprintf(it->operation, sizeof(it->operation), "%s", r->operation ? r->operation : "");
	it->r.finish_reason = NULL;
	it->r.reject_reason = NULL;
	it->r.operation = NULL;
}

/* A JSON string; bytes outside printable ASCII become \u00XX so that any
 * x-request-id yields valid JSON. */
static void json_str(FILE *out, const char *s)
{
	fputc('"', out);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(out, "\\%c", *p);
		else if (*p < 0x20 || *p >= 0x7f)
			fprintf(out, "\\u%04x", *p);
		else
			fputc(*p, out);
	}
	fputc('"', out);
}

static void hex(FILE *out, const uint8_t *b, int n)
{
	fputc('"', out);
	for (int i = 0; i < n; i++)
		fprintf(out, "%02x", b[i]);
	fputc('"', out);
}

/* attributes are written as a list; *first tracks the comma */
static void attr_str(FILE *out, bool *first, const char *k, const char *v)
{
	fprintf(out, "%s{\"key\":\"%s\",\"value\":{\"stringValue\":", *first ? "" : ",", k);
	json_str(out, v);
	fputs("}}", out);
	*first = false;
}

static void attr_int(FILE *out, bool *first, const char *k, int64_t v)
{
	if (v == KPI_NULL)
		return;
	/* proto3 JSON: int64 as a string */
	fprintf(out, "%s{\"key\":\"%s\",\"value\":{\"intValue\":\"%lld\"}}", *first ? "" : ",", k,
		(long long)v);
	*first = false;
}

static void attr_secs(FILE *out, bool *first, const char *k, int64_t ns)
{
	if (ns == KPI_NULL)
		return;
	fprintf(out, "%s{\"key\":\"%s\",\"value\":{\"doubleValue\":%.9f}}", *first ? "" : ",", k,
		(double)ns / 1e9);
	*first = false;
}

static void attr_str_array(FILE *out, bool *first, const char *k, const char *v)
{
	fprintf(out, "%s{\"key\":\"%s\",\"value\":{\"arrayValue\":{\"values\":[{\"stringValue\":",
		*first ? "" : ",", k);
	json_str(out, v);
	fputs("}]}}}", out);
	*first = false;
}

static int64_t first_set(int n, const int64_t *v)
{
	for (int i = 0; i < n; i++)
		if (v[i] != KPI_NULL)
			return v[i];
	return KPI_NULL;
}

static void span_head(FILE *out, const uint8_t *trace, const uint8_t *span, const uint8_t *parent,
		      const char *name_a, const char *name_b, int kind, int64_t start, int64_t end,
		      int64_t off)
{
	fputs("{\"traceId\":", out);
	hex(out, trace, 16);
	fputs(",\"spanId\":", out);
	hex(out, span, 8);
	if (parent) {
		fputs(",\"parentSpanId\":", out);
		hex(out, parent, 8);
	}
	fputs(",\"name\":", out);
	char name[256];
	snprintf(name, sizeof(name), "%s%s%s", name_a, name_b ? " " : "", name_b ? name_b : "");
	json_str(out, name);
	fprintf(out, ",\"kind\":%d,\"startTimeUnixNano\":\"%lld\",\"endTimeUnixNano\":\"%lld\"",
		kind, (long long)(start + off), (long long)(end + off));
}

static void encode_request(FILE *out, const struct otlp_item *it, int64_t off, const uint8_t *ids)
{
	const struct kpi_request_record *r = &it->r;
	const uint8_t *trace = ids, *root = ids + 16;
	bool first = true, failed;
	char err[24] = "";

	/* the root spans what was seen: arrival (else admission) to the last byte
	 * (else the last mark reached) */
	int64_t start = first_set(2, (const int64_t[]){ r->t_arrive, r->t_admit });
	int64_t end = first_set(5, (const int64_t[]){ r->t_done, r->t_last, r->t_first, r->t_sched,
						      r->t_admit });
	if (start == KPI_NULL)
		start = end;
	if (end == KPI_NULL || end < start)
		end = start;

	if (r->http_status != KPI_NULL && r->http_status >= 400)
		snprintf(err, sizeof(err), "%lld", (long long)r->http_status);
	else if (!strcmp(it->finish, "error") || !strcmp(it->finish, "cancelled"))
		snprintf(err, sizeof(err), "%s", it->finish);
	failed = (r->http_status != KPI_NULL && r->http_status >= 500) || !strcmp(it->finish, "error");

	/* the conventions' span name "{gen_ai.operation.name} {gen_ai.request.model}";
	 * a request refused before admission has no known endpoint: no operation
	 * attribute, and the HTTP conventions' name for an unknown route, "HTTP" */
	if (it->operation[0])
		span_head(out, trace, root, NULL, it->operation, it->id.model, 2, start, end, off);
	else
		span_head(out, trace, root, NULL, "HTTP", NULL, 2, start, end, off);
	fputs(",\"attributes\":[", out);
	if (it->operation[0])
		attr_str(out, &first, "gen_ai.operation.name", it->operation);
	attr_str(out, &first, "gen_ai.system", "kpi-infer");
	attr_str(out, &first, "gen_ai.request.model", it->id.model);
	attr_int(out, &first, "gen_ai.usage.input_tokens", r->prompt_tokens);
	attr_int(out, &first, "gen_ai.usage.output_tokens", r->output_tokens);
	if (it->finish[0])
		attr_str_array(out, &first, "gen_ai.response.finish_reasons", it->finish);
	attr_secs(out, &first, "gen_ai.server.time_to_first_token", r->ttft);
	attr_secs(out, &first, "gen_ai.server.time_per_output_token", r->tpot);
	attr_secs(out, &first, "gen_ai.server.request.duration", r->e2e);
	if (it->id.port)
		attr_int(out, &first, "server.port", it->id.port);
	attr_int(out, &first, "http.response.status_code", r->http_status);
	if (err[0])
		attr_str(out, &first, "error.type", err);
	attr_str_array(out, &first, "http.request.header.x-request-id", r->request_id);
	attr_str(out, &first, "kpi.request_id", r->request_id);
	if (it->reject[0])
		attr_str(out, &first, "kpi.reject_reason", it->reject);
	attr_int(out, &first, "kpi.preemptions", r->preemptions);
	attr_int(out, &first, "kpi.itl_p50_ns", r->itl_p50);
	attr_int(out, &first, "kpi.itl_p99_ns", r->itl_p99);
	attr_int(out, &first, "kpi.itl_max_ns", r->itl_max);
	attr_int(out, &first, "kpi.srtt_us", r->srtt_us);
	attr_int(out, &first, "kpi.runq_ns", r->runq_ns);
	fputs("]", out);
	if (failed)
		fprintf(out, ",\"status\":{\"code\":2,\"message\":\"%s\"}", err);
	fputs("}", out);

	/* children: the phases reached, contiguous by construction (a phase
	 * lasts until the next mark reached), so each starts where the last ended */
	static const char *const names[5] = { "net_in", "queue", "prefill", "decode", "net_out" };
	const int64_t d[5] = { r->net_in, r->queue, r->prefill, r->decode, r->net_out };
	int64_t at = start;
	for (int k = 0; k < 5; k++) {
		uint8_t span[8];
		if (d[k] == KPI_NULL)
			continue;
		memcpy(span, root, 8);
		span[7] ^= (uint8_t)(k + 1);    /* distinct from the root and each other */
		span[0] ^= 0x80;
		fputc(',', out);
		span_head(out, trace, span, root, names[k], NULL, 1, at, at + d[k], off);
		at += d[k];
		first = true;
		fputs(",\"attributes\":[", out);
		attr_str(out, &first, "kpi.phase", names[k]);
		fputs("]}", out);
	}
}

void otlp_encode(FILE *out, const struct otlp_item *items, size_t n, int64_t realtime_off,
		 const uint8_t *ids, const char *service_name, const char *host_name)
{
	bool *done = calloc(n ? n : 1, 1);
	bool first_rs = true;

	fputs("{\"resourceSpans\":[", out);
	/* one resource per traced process */
	for (size_t i = 0; i < n; i++) {
		if (done && done[i])
			continue;
		uint32_t pid = items[i].r.pid;
		bool first = true;
		fputs(first_rs ? "" : ",", out);
		first_rs = false;
		fputs("{\"resource\":{\"attributes\":[", out);
		attr_str(out, &first, "service.name", service_name);
		attr_int(out, &first, "process.pid", pid);
		attr_str(out, &first, "host.name", host_name);
		fputs("]},\"scopeSpans\":[{\"scope\":{\"name\":\"kpi-agent\"},\"spans\":[", out);
		bool first_span = true;
		for (size_t k = i; k < n; k++) {
			if (items[k].r.pid != pid || (done && done[k]))
				continue;
			if (done)
				done[k] = true;
			fputs(first_span ? "" : ",", out);
			first_span = false;
			encode_request(out, &items[k], realtime_off, ids + 24 * k);
			if (!done)
				break;
		}
		fputs("]}]}", out);
	}
	fputs("]}", out);
	free(done);
}

/* ---- the queue and the sender ------------------------------------------------------------ */

struct otlp_exporter {
	struct otlp_config cfg;
	char host[256], port[8], path[512], hostname[256];
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct otlp_item *q;            /* ring of cfg.max_queue */
	size_t head, len;
	bool stopping, joined;
	struct otlp_stats st;
	bool warned;
	uint64_t last_drop_log;         /* mono ms */
};

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int64_t realtime_offset(void)
{
	struct timespec m, r;
	clock_gettime(CLOCK_MONOTONIC, &m);
	clock_gettime(CLOCK_REALTIME, &r);
	return ((int64_t)r.tv_sec - m.tv_sec) * 1000000000ll + (r.tv_nsec - m.tv_nsec);
}

static void on_request(void *ctx, const struct kpi_request_record *r)
{
	struct otlp_exporter *e = ctx;
	const struct export_ident *id = export_ident_get(r->pid);

	pthread_mutex_lock(&e->lock);
	if (e->len == (size_t)e->cfg.max_queue) {
		e->st.dropped_full++;
	} else {
		struct otlp_item *it = &e->q[(e->head + e->len) % (size_t)e->cfg.max_queue];
		otlp_item_fill(it, r);
		it->id = *id;
		e->len++;
		e->st.queued++;
		if (e->len >= (size_t)e->cfg.max_batch)
			pthread_cond_signal(&e->cond);
	}
	pthread_mutex_unlock(&e->lock);
}

struct kpi_sink otlp_sink(struct otlp_exporter *e)
{
	return (struct kpi_sink){ .ctx = e, .request = on_request };
}

/* Waits up to ms for fd to be ready for events; 1 ready, 0 timeout, -1 error. */
static int wait_fd(int fd, short events, int ms)
{
	struct pollfd p = { .fd = fd, .events = events };
	int r;
	do
		r = poll(&p, 1, ms);
	while (r < 0 && errno == EINTR);
	return r < 0 ? -1 : r;
}

/* One POST.  Returns the HTTP status, or -1 (no answer) with why in err. */
static int post(struct otlp_exporter *e, const char *body, size_t len, char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res, *ai;
	uint64_t deadline = mono_ms() + (uint64_t)e->cfg.timeout_ms;
	int fd = -1, rc, status = -1;
	char head[1024], resp[4096];
	size_t got = 0;

	rc = getaddrinfo(e->host, e->port, &hints, &res);
	if (rc) {
		snprintf(err, errlen, "cannot resolve %s: %s", e->host, gai_strerror(rc));
		return -1;
	}
	for (ai = res; ai && fd < 0; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) && errno != EINPROGRESS) {
			snprintf(err, errlen, "connect to %s:%s: %s", e->host, e->port, strerror(errno));
			close(fd);
			fd = -1;
			continue;
		}
		int soerr = 0;
		socklen_t sl = sizeof(soerr);
		if (wait_fd(fd, POLLOUT, e->cfg.timeout_ms) != 1 ||
		    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) || soerr) {
			snprintf(err, errlen, "connect to %s:%s: %s", e->host, e->port,
				 soerr ? strerror(soerr) : "timed out");
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	if (fd < 0)
		return -1;

	int hl = snprintf(head, sizeof(head), "POST %s HTTP/1.1\r\nHost: %s:%s\r\n"
			  "Content-Type: application/json\r\nContent-Length: %zu\r\n"
			  "User-Agent: kpi-agent\r\nConnection: close\r\n\r\n",
			  e->path, e->host, e->port, len);
	const char *parts[2] = { head, body };
	size_t lens[2] = { (size_t)hl, len };
	for (int p = 0; p < 2; p++) {
		size_t off = 0;
		while (off < lens[p]) {
			int left = (int)(deadline - mono_ms());
			if (left <= 0 || wait_fd(fd, POLLOUT, left) != 1) {
				snprintf(err, errlen, "sending to %s:%s timed out", e->host, e->port);
				goto out;
			}
			ssize_t n = send(fd, parts[p] + off, lens[p] - off, MSG_NOSIGNAL);
			if (n < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (n <= 0) {
				snprintf(err, errlen, "sending to %s:%s: %s", e->host, e->port,
					 strerror(errno));
				goto out;
			}
			off += (size_t)n;
		}
	}
	/* the status line is all we need */
	while (got < sizeof(resp) - 1) {
		int left = (int)(deadline - mono_ms());
		if (left <= 0 || wait_fd(fd, POLLIN, left) != 1) {
			snprintf(err, errlen, "no answer from %s:%s within %d ms", e->host, e->port,
				 e->cfg.timeout_ms);
			goto out;
		}
		ssize_t n = recv(fd, resp + got, sizeof(resp) - 1 - got, 0);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
		resp[got] = 0;
		if (strstr(resp, "\r\n"))
			break;
	}
	resp[got] = 0;
	if (sscanf(resp, "HTTP/1.%*d %d", &status) != 1) {
		snprintf(err, errlen, "%s:%s did not answer in HTTP", e->host, e->port);
		status = -1;
	} else {
		snprintf(err, errlen, "%s:%s answered %d", e->host, e->port, status);
	}
out:
	close(fd);
	return status;
}

/* OTLP/HTTP: 429, 502, 503, 504 and no answer at all are worth retrying. */
static bool retryable(int status)
{
	return status < 0 || status == 429 || status == 502 || status == 503 || status == 504;
}

/* Sleeps ms unless stopping; returns true when stopping. */
static bool nap(struct otlp_exporter *e, int ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000l;
	if (ts.tv_nsec >= 1000000000l) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000l;
	}
	pthread_mutex_lock(&e->lock);
	while (!e->stopping && pthread_cond_timedwait(&e->cond, &e->lock, &ts) != ETIMEDOUT)
		;
	bool s = e->stopping;
	pthread_mutex_unlock(&e->lock);
	return s;
}

static void send_batch(struct otlp_exporter *e, const struct otlp_item *items, size_t n)
{
	uint8_t *ids = malloc(24 * n);
	char *body = NULL, err[768];
	size_t len = 0;
	FILE *f;
	int status = -1, delay = e->cfg.backoff_ms;

	if (!ids || getrandom(ids, 24 * n, 0) != (ssize_t)(24 * n) || !(f = open_memstream(&body, &len))) {
		free(ids);
		pthread_mutex_lock(&e->lock);
		e->st.dropped_failed += n;
		pthread_mutex_unlock(&e->lock);
		return;
	}
	otlp_encode(f, items, n, realtime_offset(), ids, e->cfg.service_name, e->hostname);
	fclose(f);
	free(ids);

	for (int attempt = 1;; attempt++) {
		status = post(e, body, len, err, sizeof(err));
		pthread_mutex_lock(&e->lock);
		e->st.posts++;
		bool stopping = e->stopping;
		pthread_mutex_unlock(&e->lock);
		if (status >= 200 && status < 300)
			break;
		if (!retryable(status) || attempt >= e->cfg.max_attempts || stopping)
			break;
		if (!e->warned) {
			fprintf(stderr, "kpi-agent: OTLP export to http://%s:%s%s failed (%s); "
				"retrying with backoff, requests queue meanwhile (up to %d)\n",
				e->host, e->port, e->path, err, e->cfg.max_queue);
			e->warned = true;
		}
		pthread_mutex_lock(&e->lock);
		e->st.retries++;
		pthread_mutex_unlock(&e->lock);
		/* jitter: 75..100% of the delay, so agents restarted together spread out */
		int sleep_ms = delay - (int)((unsigned)rand() % (unsigned)(delay / 4 + 1));
		nap(e, sleep_ms);       /* stopping cuts it short: one last try, then give up */
		delay = delay * 2 > OTLP_BACKOFF_MAX_MS ? OTLP_BACKOFF_MAX_MS : delay * 2;
	}
	pthread_mutex_lock(&e->lock);
	if (status >= 200 && status < 300) {
		e->st.exported += n;
		if (e->warned) {
			fprintf(stderr, "kpi-agent: OTLP export to http://%s:%s%s works again\n",
				e->host, e->port, e->path);
			e->warned = false;
		}
	} else {
		e->st.dropped_failed += n;
		/* once per 10 s at most: an outage must not flood the agent's log */
		uint64_t now = mono_ms();
		if (!e->last_drop_log || now - e->last_drop_log >= 10000) {
			fprintf(stderr, "kpi-agent: OTLP export dropped %zu requests (%llu so far; the "
				"SQLite trace keeps them): %s%s\n", n,
				(unsigned long long)e->st.dropped_failed, err,
				retryable(status) ? "" : " (not retryable: check the URL and the receiver's log)");
			e->last_drop_log = now;
		}
	}
	pthread_mutex_unlock(&e->lock);
	free(body);
}

static void *sender_thread(void *arg)
{
	struct otlp_exporter *e = arg;
	struct otlp_item *batch = malloc(sizeof(*batch) * (size_t)e->cfg.max_batch);
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	if (!batch)
		return NULL;
	for (;;) {
		uint64_t due = mono_ms() + (uint64_t)e->cfg.delay_ms;
		pthread_mutex_lock(&e->lock);
		while (!e->stopping && e->len < (size_t)e->cfg.max_batch && mono_ms() < due) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			uint64_t left = due - mono_ms();
			ts.tv_sec += (time_t)(left / 1000);
			ts.tv_nsec += (long)(left % 1000) * 1000000l;
			if (ts.tv_nsec >= 1000000000l) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000l;
			}
			pthread_cond_timedwait(&e->cond, &e->lock, &ts);
		}
		size_t n = e->len < (size_t)e->cfg.max_batch ? e->len : (size_t)e->cfg.max_batch;
		for (size_t i = 0; i < n; i++)
			batch[i] = e->q[(e->head + i) % (size_t)e->cfg.max_queue];
		e->head = (e->head + n) % (size_t)e->cfg.max_queue;
		e->len -= n;
		bool stop = e->stopping && e->len == 0;
		pthread_mutex_unlock(&e->lock);
		if (n)
			send_batch(e, batch, n);
		if (stop)
			break;
	}
	free(batch);
	return NULL;
}

static int parse_url(struct otlp_exporter *e, const char *url, char *err, size_t errlen)
{
	const char *p, *slash, *colon;

	if (strncmp(url, "http://", 7)) {
		snprintf(err, errlen, "--otlp %s: only http:// URLs are supported (for TLS, send to an "
			 "OpenTelemetry Collector on loopback, e.g. http://127.0.0.1:4318)", url);
		return -1;
	}
	p = url + 7;
	slash = strchr(p, '/');
	size_t hl = slash ? (size_t)(slash - p) : strlen(p);
	char hostport[256];
	if (hl == 0 || hl >= sizeof(hostport)) {
		snprintf(err, errlen, "--otlp %s: no host (expected http://HOST[:PORT][/PATH])", url);
		return -1;
	}
	memcpy(hostport, p, hl);
	hostport[hl] = 0;
	if (hostport[0] == '[') {
		char *rb = strchr(hostport, ']');
		if (!rb) {
			snprintf(err, errlen, "--otlp %s: unclosed [ in the host", url);
			return -1;
		}
		*rb = 0;
		snprintf(e->host, sizeof(e->host), "%s", hostport + 1);
		colon = rb[1] == ':' ? rb + 1 : NULL;
	} else {
		char *c = strrchr(hostport, ':');
		if (c)
			*c = 0;
		memcpy(e->host, hostport, sizeof(e->host));
		colon = c;
	}
	snprintf(e->port, sizeof(e->port), "80");
	if (colon) {
		char *end;
		long v = strtol(colon + 1, &end, 10);
		if (end == colon + 1 || *end || v < 1 || v > 65535) {
			snprintf(err, errlen, "--otlp %s: bad port (expected 1..65535)", url);
			return -1;
		}
		snprintf(e->port, sizeof(e->port), "%ld", v);
	}
	/* like OTEL_EXPORTER_OTLP_ENDPOINT: a bare collector address gets the
	 * signal path */
	snprintf(e->path, sizeof(e->path), "%s", slash && strcmp(slash, "/") ? slash : "/v1/traces");
	return 0;
}

struct otlp_exporter *otlp_start(const char *url, const struct otlp_config *cfg,
				 char *err, size_t errlen)
{
	struct otlp_exporter *e = calloc(1, sizeof(*e));
	if (!e) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	e->cfg = *cfg;
	if (parse_url(e, url, err, errlen))
		goto fail;
	e->q = calloc((size_t)cfg->max_queue, sizeof(*e->q));
	if (!e->q) {
		snprintf(err, errlen, "cannot allocate the OTLP queue (%d requests)", cfg->max_queue);
		goto fail;
	}
	if (gethostname(e->hostname, sizeof(e->hostname)))
		snprintf(e->hostname, sizeof(e->hostname), "unknown");
	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->cond, NULL);
	int rc = pthread_create(&e->thread, NULL, sender_thread, e);
	if (rc) {
		snprintf(err, errlen, "cannot start the OTLP sender thread: %s", strerror(rc));
		goto fail;
	}
	return e;
fail:
	free(e->q);
	free(e);
	return NULL;
}

void otlp_stop_keep(struct otlp_exporter *e)
{
	if (!e || e->joined)
		return;
	pthread_mutex_lock(&e->lock);
	e->stopping = true;
	pthread_cond_broadcast(&e->cond);
	pthread_mutex_unlock(&e->lock);
	pthread_join(e->thread, NULL);
	e->joined = true;
}

void otlp_free(struct otlp_exporter *e)
{
	if (!e)
		return;
	otlp_stop_keep(e);
	pthread_mutex_destroy(&e->lock);
	pthread_cond_destroy(&e->cond);
	free(e->q);
	free(e);
}

void otlp_stats(struct otlp_exporter *e, struct otlp_stats *out)
{
	pthread_mutex_lock(&e->lock);
	*out = e->st;
	pthread_mutex_unlock(&e->lock);
}

void otlp_prom_collect(void *ctx, FILE *out)
{
	struct otlp_exporter *e = ctx;
	struct otlp_stats s;
	size_t len;

	pthread_mutex_lock(&e->lock);
	s = e->st;
	len = e->len;
	pthread_mutex_unlock(&e->lock);
	fprintf(out, "# HELP kpi_otlp_requests_exported_total Requests exported as OTLP traces "
		"and accepted by the receiver.\n# TYPE kpi_otlp_requests_exported_total counter\n"
		"kpi_otlp_requests_exported_total %llu\n", (unsigned long long)s.exported);
	fprintf(out, "# HELP kpi_otlp_requests_dropped_total Requests whose trace was not exported "
		"(the SQLite trace still has them).\n# TYPE kpi_otlp_requests_dropped_total counter\n"
		"kpi_otlp_requests_dropped_total{reason=\"queue_full\"} %llu\n"
		"kpi_otlp_requests_dropped_total{reason=\"export_failed\"} %llu\n",
		(unsigned long long)s.dropped_full, (unsigned long long)s.dropped_failed);
	fprintf(out, "# HELP kpi_otlp_export_retries_total OTLP POSTs retried after a retryable "
		"failure.\n# TYPE kpi_otlp_export_retries_total counter\n"
		"kpi_otlp_export_retries_total %llu\n", (unsigned long long)s.retries);
	fprintf(out, "# HELP kpi_otlp_queue_length Requests waiting for the OTLP sender.\n"
		"# TYPE kpi_otlp_queue_length gauge\nkpi_otlp_queue_length %zu\n", len);
}
