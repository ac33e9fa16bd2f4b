/* test_agent_export_otlp.c - the OTLP exporter: the JSON encoding of a request
 * (ids, times, attributes, phase children, escaping and UTF-8), the URL and
 * environment checks, and the sender against a receiver on loopback written
 * here: batches over one kept-alive connection, retries honouring Retry-After,
 * answers not worth retrying, partial successes, and nothing listening. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "tests/unit/check.h"
#include "agent/sinks/export_otlp.h"

/* op: gen_ai.operation.name of an admitted request (a 429 is refused first) */
static struct otlp_item item_op(const char *rid, uint32_t pid, int status, const char *op)
{
	struct kpi_request_record r = { .pid = pid, .operation = status == 429 ? NULL : op };
	struct otlp_item it = { 0 };   /* its id (export_ident) is the caller's to fill */
	snprintf(r.request_id, sizeof(r.request_id), "%s", rid);
	r.t_arrive = 1000;
	r.t_admit = 1100;
	r.net_in = 100;
	r.itl_p50 = r.itl_p99 = r.itl_max = r.srtt_us = r.runq_ns = KPI_NULL;
	r.server_wait = KPI_NULL;       /* as the assembler leaves it on a usdt record */
	r.source = "usdt";
	r.preemptions = 0;
	r.http_status = status;
	if (status == 429) {
		r.t_sched = r.t_first = r.t_last = r.t_first_write = KPI_NULL;
		r.queue = r.prefill = r.decode = KPI_NULL;
		r.net_out = 50;
		r.t_done = 1150;
		r.e2e = 150;
		r.ttft = r.tpot = r.prompt_tokens = KPI_NULL;
		r.output_tokens = 0;
		r.reject_reason = "queue_full";
	} else {
		r.t_sched = 1300; r.queue = 200;
		r.t_first = 1600; r.prefill = 300;
		r.t_last = 2600; r.decode = 1000;
		r.t_done = 2700; r.net_out = 100;
		r.t_first_write = 1650;
		r.e2e = 1700; r.ttft = 650; r.tpot = 250;
		r.prompt_tokens = 9; r.output_tokens = 5;
		r.finish_reason = "stop";
	}
	otlp_item_fill(&it, &r);
	snprintf(it.id.model, sizeof(it.id.model), "kpiscope-tiny-s1");
	it.id.port = 8000;
	return it;
}

static struct otlp_item item(const char *rid, uint32_t pid, int status)
{
	return item_op(rid, pid, status, "chat");
}

static char *encode_as(const struct otlp_item *items, size_t n, const char *service)
{
	uint8_t ids[24 * 4];
	char *buf = NULL;
	size_t len = 0;
	for (size_t i = 0; i < sizeof(ids); i++)
		ids[i] = (uint8_t)i;
	FILE *f = open_memstream(&buf, &len);
	otlp_encode(f, items, n, 1000000000000ll, ids, service, "host1");
	fclose(f);
	return buf;
}

static char *encode(const struct otlp_item *items, size_t n)
{
	return encode_as(items, n, "kpi-infer");
}

static int count(const char *s, const char *needle)
{
	int n = 0;
	for (const char *p = s; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

/* The n phase spans names[k], contiguous from at[k] to at[k + 1] (ns after
 * the encoder's wall offset of 1,000 s), each present in j. */
static void children(const char *j, const char *const *names, const int *at, int n)
{
	char want[200];
	for (int k = 0; k < n; k++) {
		snprintf(want, sizeof(want), "\"name\":\"%s\",\"kind\":1,\"startTimeUnixNano\":\"100000000%04d\","
			 "\"endTimeUnixNano\":\"100000000%04d\"", names[k], at[k], at[k + 1]);
		CHECK(strstr(j, want), "child %s: %s", names[k], j);
	}
}

static void encodes_request_and_phases(void)
{
	struct otlp_item it = item("req-1", 42, 200);
	char *j = encode(&it, 1);

	static const char head[] = "{\"resourceSpans\":[{\"resource\":{\"attributes\":["
		       "{\"key\":\"service.name\",\"value\":{\"stringValue\":\"kpi-infer\"}},"
		       "{\"key\":\"process.pid\",\"value\":{\"intValue\":\"42\"}},"
		       "{\"key\":\"host.name\",\"value\":{\"stringValue\":\"host1\"}}]},"
		       "\"scopeSpans\":[{\"scope\":{\"name\":\"kpi-agent\"},\"spans\":[";
	CHECK(!strncmp(j, head, sizeof(head) - 1), "%s", j);
	/* root: ids from the random bytes, SERVER kind, times + the wall offset */
	CHECK(strstr(j, "{\"traceId\":\"000102030405060708090a0b0c0d0e0f\",\"spanId\":\"1011121314151617\","
		      "\"name\":\"chat kpiscope-tiny-s1\",\"kind\":2,\"startTimeUnixNano\":\"1000000001000\","
		      "\"endTimeUnixNano\":\"1000000002700\""), "root: %s", j);
	const char *want[] = {
		"{\"key\":\"gen_ai.operation.name\",\"value\":{\"stringValue\":\"chat\"}}",
		"{\"key\":\"gen_ai.request.model\",\"value\":{\"stringValue\":\"kpiscope-tiny-s1\"}}",
		"{\"key\":\"gen_ai.usage.input_tokens\",\"value\":{\"intValue\":\"9\"}}",
		"{\"key\":\"gen_ai.usage.output_tokens\",\"value\":{\"intValue\":\"5\"}}",
		"{\"key\":\"gen_ai.response.finish_reasons\",\"value\":{\"arrayValue\":{\"values\":[{\"stringValue\":\"stop\"}]}}}",
		"{\"key\":\"gen_ai.server.time_to_first_token\",\"value\":{\"doubleValue\":0.000000650}}",
		"{\"key\":\"server.port\",\"value\":{\"intValue\":\"8000\"}}",
		"{\"key\":\"http.response.status_code\",\"value\":{\"intValue\":\"200\"}}",
		"{\"key\":\"http.request.header.x-request-id\",\"value\":{\"arrayValue\":{\"values\":[{\"stringValue\":\"req-1\"}]}}}",
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		CHECK(strstr(j, want[i]), "missing %s", want[i]);
	CHECK(!strstr(j, "error.type") && !strstr(j, "\"status\""), "a success carries no error");
	CHECK(!strstr(j, "kpi.srtt_us"), "NULL columns are left out");
	/* five children, contiguous, parented to the root */
	CHECK(count(j, "\"parentSpanId\":\"1011121314151617\"") == 5, "children: %s", j);
	children(j, (const char *const[]){ "net_in", "queue", "prefill", "decode", "net_out" },
		 (const int[]){ 1000, 1100, 1300, 1600, 2600, 2700 }, 5);
	CHECK(j[strlen(j) - 1] == '}' && count(j, "{") == count(j, "}") && count(j, "[") == count(j, "]"),
	      "unbalanced JSON");
	CHECK(strstr(j, "{\"key\":\"kpi.source\",\"value\":{\"stringValue\":\"usdt\"}}") &&
	      strstr(j, "\"gen_ai.system\""), "%s", j);
	free(j);
}

/* A request seen only on the wire (source http): the model it asked for
 * names it, no gen_ai.system is claimed, and server_wait (queue and prefill
 * together) sits between net_in and decode, the children still contiguous. */
static void encodes_an_http_row(void)
{
	struct kpi_request_record r = { .pid = 7, .operation = "chat", .source = "http" };
	struct otlp_item it = { 0 };    /* its identity: no model file, no port known */
	snprintf(r.request_id, sizeof(r.request_id), "w-1");
	snprintf(r.model, sizeof(r.model), "llama-3-8b");
	r.t_arrive = 1000;
	r.net_in = 100;
	r.server_wait = 500;
	r.decode = 1000;
	r.net_out = 100;
	r.t_done = 2700;
	r.e2e = 1700;
	r.ttft = 600;
	r.t_admit = r.t_sched = r.t_first = r.t_last = r.t_first_write = KPI_NULL;
	r.queue = r.prefill = r.tpot = r.prompt_tokens = r.output_tokens = KPI_NULL;
	r.itl_p50 = r.itl_p99 = r.itl_max = r.srtt_us = r.runq_ns = r.preemptions = KPI_NULL;
	r.http_status = 200;
	otlp_item_fill(&it, &r);
	char *j = encode(&it, 1);
	CHECK(strstr(j, "\"name\":\"chat llama-3-8b\",\"kind\":2"), "%s", j);
	CHECK(strstr(j, "{\"key\":\"kpi.source\",\"value\":{\"stringValue\":\"http\"}}"), "%s", j);
	CHECK(!strstr(j, "gen_ai.system"), "no engine claimed for a wire-only row: %s", j);
	CHECK(count(j, "\"parentSpanId\"") == 4 && !strstr(j, "\"name\":\"queue\"") &&
	      !strstr(j, "\"name\":\"prefill\""), "%s", j);
	children(j, (const char *const[]){ "net_in", "server_wait", "decode", "net_out" },
		 (const int[]){ 1000, 1100, 1600, 2600, 2700 }, 4);
	free(j);
}

static void rejected_and_grouping_and_escaping(void)
{
	struct otlp_item it[3] = { item("a", 1, 429), item("b\"\\\x01\xff", 2, 200),
				   item_op("c", 1, 200, "text_completion") };
	char *j = encode(it, 3);

	/* the span name and gen_ai.operation.name follow the endpoint; the 429,
	 * refused before admission, has no operation: the HTTP name, no attribute */
	CHECK(count(j, "\"name\":\"chat kpiscope-tiny-s1\"") == 1, "%s", j);
	CHECK(count(j, "\"name\":\"text_completion kpiscope-tiny-s1\"") == 1, "%s", j);
	CHECK(count(j, "\"name\":\"HTTP\",\"kind\":2") == 1, "%s", j);
	CHECK(count(j, "{\"key\":\"gen_ai.operation.name\",\"value\":{\"stringValue\":\"chat\"}}") == 1,
	      "%s", j);
	CHECK(count(j, "{\"key\":\"gen_ai.operation.name\",\"value\":{\"stringValue\":"
		    "\"text_completion\"}}") == 1, "%s", j);
	CHECK(count(j, "\"gen_ai.operation.name\"") == 2, "the 429 has none: %s", j);

	CHECK(count(j, "\"resource\":") == 2, "one resource per pid: %s", j);
	CHECK(strstr(j, "{\"key\":\"error.type\",\"value\":{\"stringValue\":\"429\"}}"), "429 error.type");
	CHECK(strstr(j, "{\"key\":\"kpi.reject_reason\",\"value\":{\"stringValue\":\"queue_full\"}}"), "reason");
	/* a 4xx leaves the server span's status unset (HTTP conventions) */
	CHECK(!strstr(j, "\"status\""), "%s", j);
	/* the rejected request: net_in then net_out, contiguous */
	CHECK(strstr(j, "\"name\":\"net_out\",\"kind\":1,\"startTimeUnixNano\":\"1000000001100\","
		      "\"endTimeUnixNano\":\"1000000001150\""), "%s", j);
	CHECK(strstr(j, "\"stringValue\":\"b\\\"\\\\\\u0001\\ufffd\""), "escaping: %s", j);
	free(j);
}

static void server_error_sets_status(void)
{
	struct otlp_item it = item("x", 1, 500);
	char *j = encode(&it, 1);
	CHECK(strstr(j, ",\"status\":{\"code\":2,\"message\":\"500\"}}"), "%s", j);
	free(j);
}

/* valid UTF-8 as it is, anything else U+FFFD: one per byte that starts no
 * well-formed sequence */
static void utf8_passes_invalid_bytes_become_fffd(void)
{
	struct otlp_config c;
	char err[256];

	setenv("OTEL_SERVICE_NAME", "推理-café 😀", 1);
	CHECK(otlp_config_from_env(&c, err, sizeof(err)) == 0, "%s", err);
	unsetenv("OTEL_SERVICE_NAME");
	/* a stray byte, an overlong '/', a surrogate, a DEL, a sequence cut short */
	struct otlp_item it = item("r\xff" "x\xc0\xaf" "\xed\xa0\x80" "\x7f" "é\xe6\xa8", 1, 200);
	char *j = encode_as(&it, 1, c.service_name);
	CHECK(strstr(j, "{\"key\":\"service.name\",\"value\":{\"stringValue\":\"推理-café 😀\"}}"),
	      "%s", j);
	CHECK(strstr(j, "{\"key\":\"kpi.request_id\",\"value\":{\"stringValue\":"
		      "\"r\\ufffdx\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\u007fé\\ufffd\\ufffd\"}}"), "%s", j);
	free(j);
}

static void config_and_url_errors(void)
{
	struct otlp_config c;
	char err[256];

	setenv("OTEL_BSP_MAX_QUEUE_SIZE", "abc", 1);
	CHECK(otlp_config_from_env(&c, err, sizeof(err)) < 0 && strstr(err, "OTEL_BSP_MAX_QUEUE_SIZE"),
	      "%s", err);
	setenv("OTEL_BSP_MAX_QUEUE_SIZE", "16", 1);
	setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "64", 1);
	CHECK(otlp_config_from_env(&c, err, sizeof(err)) == 0, "%s", err);
	CHECK(c.max_queue == 16 && c.max_batch == 16 && c.delay_ms == 5000 && c.timeout_ms == 10000,
	      "defaults/clamp: %d %d %d %d", c.max_queue, c.max_batch, c.delay_ms, c.timeout_ms);
	CHECK(!strcmp(c.service_name, "kpi-infer"), "%s", c.service_name);
	unsetenv("OTEL_BSP_MAX_QUEUE_SIZE");
	unsetenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE");

	CHECK(!otlp_start("ftp://x:4318", &c, err, sizeof(err)) && strstr(err, "https://"), "%s", err);
	CHECK(!otlp_start("http://x:99999", &c, err, sizeof(err)) && strstr(err, "port"), "%s", err);
	CHECK(!otlp_start("http:///v1/traces", &c, err, sizeof(err)) && strstr(err, "host"), "%s", err);
	struct otlp_exporter *e = otlp_start("https://[::1]:4318", &c, err, sizeof(err));
	CHECK(e, "https is supported: %s", err);
	otlp_free(e);

	/* the CA file: the traces variable wins; one that cannot be read is named */
	setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem", 1);
	CHECK(otlp_config_from_env(&c, err, sizeof(err)) == 0 &&
	      !strcmp(c.certificate, "/nonexistent/ca.pem"), "%s", c.certificate);
	CHECK(!otlp_start("https://127.0.0.1:4318", &c, err, sizeof(err)) &&
	      strstr(err, "OTEL_EXPORTER_OTLP_CERTIFICATE /nonexistent/ca.pem: No such file"), "%s", err);
	setenv("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "/etc/hostname", 1);
	CHECK(otlp_config_from_env(&c, err, sizeof(err)) == 0 && !strcmp(c.certificate, "/etc/hostname"),
	      "%s", c.certificate);
	unsetenv("OTEL_EXPORTER_OTLP_CERTIFICATE");
	unsetenv("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE");
}

static void nothing_listening_every_request_accounted(void)
{
	struct otlp_config c;
	char err[256];
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(a);

	/* a port that refuses: bound, never listened on */
	CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0, "bind");
	getsockname(fd, (struct sockaddr *)&a, &sl);
	char url[64];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", ntohs(a.sin_port));
	otlp_config_from_env(&c, err, sizeof(err));
	c.max_queue = 4;
	c.max_batch = 2;
	c.delay_ms = 10;
	c.backoff_ms = 20;
	struct otlp_exporter *e = otlp_start(url, &c, err, sizeof(err));
	CHECK(e, "%s", err);
	struct kpi_sink s = otlp_sink(e);
	struct otlp_item it = item("r", (uint32_t)getpid(), 200);
	struct kpi_request_record r = it.r;
	r.finish_reason = "stop";
	for (int i = 0; i < 20; i++)
		s.request(s.ctx, &r);
	struct otlp_stats st;
	otlp_stats(e, &st);
	CHECK(st.dropped_full >= 20 - 4 - 2, "queue 4 + a batch of 2: %llu dropped for full",
	      (unsigned long long)st.dropped_full);
	usleep(200000);
	otlp_stats(e, &st);
	CHECK(st.retries >= 1, "no retry after 200 ms with 20 ms backoff");
	otlp_stop_keep(e);
	otlp_stats(e, &st);
	CHECK(st.exported == 0 && st.dropped_full + st.dropped_failed == 20 && st.queued + st.dropped_full == 20,
	      "exported %llu, full %llu, failed %llu, queued %llu", (unsigned long long)st.exported,
	      (unsigned long long)st.dropped_full, (unsigned long long)st.dropped_failed,
	      (unsigned long long)st.queued);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	otlp_prom_collect(e, f);
	fclose(f);
	char want[128];
	snprintf(want, sizeof(want), "kpi_otlp_requests_dropped_total{reason=\"queue_full\"} %llu\n",
		 (unsigned long long)st.dropped_full);
	CHECK(strstr(buf, want) && strstr(buf, "# TYPE kpi_otlp_queue_length gauge"), "%s", buf);
	free(buf);
	otlp_free(e);
	close(fd);
}

/* ---- a receiver on loopback: HTTP/1.1 keep-alive, one connection at a time (the
 * exporter holds one), its answers taken in turn from a script, then 200 {} ---- */

struct rx_answer {
	int status;
	const char *headers;    /* extra header lines, each ending in \r\n */
	const char *body;
};

struct rx {
	int fd, port;
	pthread_t thread;
	atomic_int stop;
	const struct rx_answer *script;
	int n_script;
	pthread_mutex_t lock;
	int accepts, posts;
	uint64_t post_ms[32];   /* when each POST had arrived whole */
	char buf[1 << 20];
};

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void rx_answer(struct rx *x, int c)
{
	static const struct rx_answer ok = { 200, "", "{}" };
	pthread_mutex_lock(&x->lock);
	int k = x->posts++;
	if (k < 32)
		x->post_ms[k] = now_ms();
	pthread_mutex_unlock(&x->lock);
	const struct rx_answer *a = k < x->n_script ? &x->script[k] : &ok;
	dprintf(c, "HTTP/1.1 %d Scripted\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
		"%s\r\n%s", a->status, strlen(a->body), a->headers, a->body);
}

/* Serves requests on c until the client closes it or the test stops. */
static void rx_serve(struct rx *x, int c)
{
	size_t got = 0;

	x->buf[0] = 0;
	while (!x->stop) {
		char *end = memmem(x->buf, got, "\r\n\r\n", 4);
		if (end) {
			const char *cl = strcasestr(x->buf, "content-length:");
			size_t need = (size_t)(end + 4 - x->buf) +
				      (cl && cl < end ? strtoul(cl + 15, NULL, 10) : 0);
			if (got >= need) {
				rx_answer(x, c);
				memmove(x->buf, x->buf + need, got - need);
				got -= need;
				x->buf[got] = 0;
				continue;
			}
		}
		struct pollfd p = { .fd = c, .events = POLLIN };
		if (poll(&p, 1, 50) <= 0)
			continue;
		ssize_t n = recv(c, x->buf + got, sizeof(x->buf) - 1 - got, 0);
		if (n <= 0)
			return;
		got += (size_t)n;
		x->buf[got] = 0;
	}
}

static void *rx_thread(void *arg)
{
	struct rx *x = arg;
	while (!x->stop) {
		struct pollfd p = { .fd = x->fd, .events = POLLIN };
		if (poll(&p, 1, 50) <= 0)
			continue;
		int c = accept(x->fd, NULL, NULL);
		if (c < 0)
			continue;
		pthread_mutex_lock(&x->lock);
		x->accepts++;
		pthread_mutex_unlock(&x->lock);
		rx_serve(x, c);
		close(c);
	}
	return NULL;
}

static struct rx *rx_start(const struct rx_answer *script, int n)
{
	struct rx *x = calloc(1, sizeof(*x));
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(a);

	x->script = script;
	x->n_script = n;
	pthread_mutex_init(&x->lock, NULL);
	x->fd = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(bind(x->fd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(x->fd, 8) == 0, "listen");
	getsockname(x->fd, (struct sockaddr *)&a, &sl);
	x->port = ntohs(a.sin_port);
	pthread_create(&x->thread, NULL, rx_thread, x);
	return x;
}

/* Stops x; what it counted can be read after. */
static void rx_stop(struct rx *x)
{
	x->stop = 1;
	pthread_join(x->thread, NULL);
	close(x->fd);
}

/* What the exporter did with a run of requests against a scripted receiver. */
struct run {
	struct otlp_stats st;
	struct rx *x;           /* stopped: its counts are final; free it */
	char log[8192];         /* the exporter's stderr */
	char *prom;             /* its Prometheus text at the end; free it */
	uint64_t took_ms;
};

/* Sends `requests` requests, one per batch, to a receiver answering `script`
 * (then 200 {}), with max_attempts tries and a 20 ms first backoff; waits (5 s
 * at most) until each is exported or dropped. */
static struct run run_against(const struct rx_answer *script, int n_script, int max_attempts,
			      int requests)
{
	struct run r = { .x = rx_start(script, n_script) };
	struct otlp_item it = item("r", (uint32_t)getpid(), 200);
	struct otlp_config c;
	char err[256], url[64];
	uint64_t t0 = now_ms();

	otlp_config_from_env(&c, err, sizeof(err));
	c.max_queue = 16;
	c.max_batch = 1;
	c.delay_ms = 10;
	c.backoff_ms = 20;
	c.timeout_ms = 5000;
	c.max_attempts = max_attempts;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", r.x->port);
	struct otlp_exporter *e = otlp_start(url, &c, err, sizeof(err));
	CHECK(e, "%s", err);
	struct kpi_sink s = otlp_sink(e);

	/* the log goes to a temporary file meanwhile */
	FILE *tmp = tmpfile();
	int saved = dup(2);
	fflush(stderr);
	dup2(fileno(tmp), 2);
	it.r.finish_reason = "stop";
	for (int i = 0; i < requests; i++)
		s.request(s.ctx, &it.r);
	do {
		usleep(10000);
		otlp_stats(e, &r.st);
	} while (r.st.exported + r.st.dropped_failed < (uint64_t)requests && now_ms() < t0 + 5000);
	r.took_ms = now_ms() - t0;
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	rewind(tmp);
	r.log[fread(r.log, 1, sizeof(r.log) - 1, tmp)] = 0;
	fclose(tmp);

	size_t len = 0;
	FILE *f = open_memstream(&r.prom, &len);
	otlp_prom_collect(e, f);
	fclose(f);
	otlp_free(e);
	rx_stop(r.x);
	return r;
}

static void keepalive_batches_share_one_connection(void)
{
	struct run r = run_against(NULL, 0, 6, 5);

	CHECK(r.st.exported == 5 && r.st.batches == 5 && r.st.posts == 5 && r.st.retries == 0,
	      "exported %llu in %llu batches, %llu posts", (unsigned long long)r.st.exported,
	      (unsigned long long)r.st.batches, (unsigned long long)r.st.posts);
	CHECK(r.x->posts == 5 && r.x->accepts == 1, "%d POSTs over %d connections", r.x->posts,
	      r.x->accepts);
	CHECK(strstr(r.prom, "kpi_otlp_batches_exported_total 5\n") &&
	      strstr(r.prom, "kpi_otlp_requests_exported_total 5\n"), "%s", r.prom);
	free(r.prom);
	free(r.x);
}

static void retry_honours_retry_after(void)
{
	static const struct rx_answer script[] = {
		{ 502, "", "" },                        /* backoff: ~20 ms */
		{ 503, "Retry-After: 1\r\n", "" },      /* the receiver's 1 s */
	};
	struct run r = run_against(script, 2, 6, 1);

	CHECK(r.st.exported == 1 && r.st.retries == 2 && r.st.posts == 3 && r.st.batches == 1,
	      "exported %llu, retries %llu, posts %llu", (unsigned long long)r.st.exported,
	      (unsigned long long)r.st.retries, (unsigned long long)r.st.posts);
	CHECK(strstr(r.log, "failed (the receiver answered 502); retrying with backoff") &&
	      strstr(r.log, "works again"), "%s", r.log);
	CHECK(r.x->posts == 3 && r.x->accepts == 1, "%d POSTs over %d connections", r.x->posts,
	      r.x->accepts);
	uint64_t backoff = r.x->post_ms[1] - r.x->post_ms[0], waited = r.x->post_ms[2] - r.x->post_ms[1];
	CHECK(backoff < 500 && waited >= 980 && waited < 2000, "backoff %llu ms, Retry-After wait %llu ms",
	      (unsigned long long)backoff, (unsigned long long)waited);
	free(r.prom);
	free(r.x);
}

static void failures_not_worth_retrying_drop_at_once(void)
{
	static const struct rx_answer script[] = {
		{ 400, "", "{\"code\":3,\"message\":\"span 7: bad trace id\"}" },
		{ 503, "", "" }, { 503, "", "" }, { 503, "", "" },     /* three tries, all failed */
		{ 429, "Retry-After: 3600\r\n", "" },                 /* too long to wait for */
	};
	struct run r = run_against(script, 5, 3, 3);

	CHECK(r.st.dropped_failed == 3 && r.st.exported == 0 && r.st.posts == 5 && r.st.retries == 2,
	      "dropped %llu, posts %llu, retries %llu", (unsigned long long)r.st.dropped_failed,
	      (unsigned long long)r.st.posts, (unsigned long long)r.st.retries);
	CHECK(r.took_ms < 3000, "a 1 h Retry-After was waited for (%llu ms)",
	      (unsigned long long)r.took_ms);
	/* the first drop is logged with the receiver's reason; the next ones within 10 s are not */
	CHECK(strstr(r.log, "dropped 1 requests (1 so far; the SQLite trace keeps them): the receiver "
		     "answered 400: span 7: bad trace id (not retryable") && !strstr(r.log, "3 so far"),
	      "%s", r.log);
	free(r.prom);
	free(r.x);
}

static void partial_success_counted_and_logged_once(void)
{
	static const struct rx_answer script[] = {
		{ 200, "", "{\"partialSuccess\":{\"rejectedSpans\":\"4\",\"errorMessage\":\"spans too old\"}}" },
		{ 200, "", "{\"partialSuccess\":{\"rejectedSpans\":2,\"errorMessage\":\"spans too old\"}}" },
		{ 200, "", "{\"partialSuccess\":{}}" },
	};
	struct run r = run_against(script, 3, 6, 4);

	CHECK(r.st.exported == 4 && r.st.batches == 4 && r.st.rejected_spans == 6 && r.st.retries == 0,
	      "exported %llu, batches %llu, rejected %llu", (unsigned long long)r.st.exported,
	      (unsigned long long)r.st.batches, (unsigned long long)r.st.rejected_spans);
	CHECK(count(r.log, "spans too old") == 1 && strstr(r.log, "rejected 4 spans since the last "
							       "such message (4 in all"), "%s", r.log);
	CHECK(strstr(r.prom, "# TYPE kpi_otlp_spans_rejected_total counter\n"
		     "kpi_otlp_spans_rejected_total 6\n"), "%s", r.prom);
	free(r.prom);
	free(r.x);
}

/* A process in a pod: OpenTelemetry's k8s and container resource attributes;
 * a container outside a pod: container.name, no k8s.*. */
static void container_resource_attributes(void)
{
	struct otlp_item it[2] = { item("req-k", 51, 200), item("req-c", 52, 200) };
	struct container_info *ci = &it[0].id.container;
	char *j;

	it[0].id.in_container = it[1].id.in_container = true;
	ci->runtime = "containerd";
	snprintf(ci->id, sizeof(ci->id), "%s", "3f1c5e0a9b7d4c2e8f6a1b3c5d7e9f0a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e");
	snprintf(ci->name, sizeof(ci->name), "vllm");
	snprintf(ci->pod_name, sizeof(ci->pod_name), "vllm-0");
	snprintf(ci->pod_namespace, sizeof(ci->pod_namespace), "prod");
	snprintf(ci->pod_uid, sizeof(ci->pod_uid), "11111111-2222-3333-4444-555555555555");
	snprintf(it[1].id.container.id, sizeof(it[1].id.container.id), "abc");
	snprintf(it[1].id.container.name, sizeof(it[1].id.container.name), "side");
	j = encode(it, 2);
	CHECK(strstr(j, "{\"key\":\"host.name\",\"value\":{\"stringValue\":\"host1\"}},"
		     "{\"key\":\"container.id\",\"value\":{\"stringValue\":\"3f1c5e0a9b7d4c2e8f6a1b3c5d7e9f0a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e\"}},"
		     "{\"key\":\"container.runtime\",\"value\":{\"stringValue\":\"containerd\"}},"
		     "{\"key\":\"k8s.container.name\",\"value\":{\"stringValue\":\"vllm\"}},"
		     "{\"key\":\"k8s.pod.name\",\"value\":{\"stringValue\":\"vllm-0\"}},"
		     "{\"key\":\"k8s.namespace.name\",\"value\":{\"stringValue\":\"prod\"}},"
		     "{\"key\":\"k8s.pod.uid\",\"value\":{\"stringValue\":\"11111111-2222-3333-4444-555555555555\"}}]}"),
	      "pod: %s", j);
	CHECK(strstr(j, "{\"key\":\"container.id\",\"value\":{\"stringValue\":\"abc\"}},"
		     "{\"key\":\"container.name\",\"value\":{\"stringValue\":\"side\"}}]}"), "container: %s", j);
	CHECK(count(j, "k8s.pod.name") == 1 && count(j, "container.id") == 2, "%s", j);
	free(j);
}

int main(void)
{
	RUN(encodes_request_and_phases);
	RUN(container_resource_attributes);
	RUN(encodes_an_http_row);
	RUN(rejected_and_grouping_and_escaping);
	RUN(server_error_sets_status);
	RUN(utf8_passes_invalid_bytes_become_fffd);
	RUN(config_and_url_errors);
	RUN(nothing_listening_every_request_accounted);
	RUN(keepalive_batches_share_one_connection);
	RUN(retry_honours_retry_after);
	RUN(failures_not_worth_retrying_drop_at_once);
	RUN(partial_success_counted_and_logged_once);
	return CHECK_DONE();
}
