/* test_agent_export_otlp.c - the OTLP exporter without a network: the JSON
 * encoding of a request (ids, times, attributes, phase children, escaping),
 * the URL and environment checks, and the accounting when nothing listens:
 * every request is either queued-then-failed or dropped for a full queue. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
#include "tests/unit/check.h"
#include "agent/export_otlp.h"

/* op: gen_ai.operation.name of an admitted request (a 429 is refused first) */
static struct otlp_item item_op(const char *rid, uint32_t pid, int status, const char *op)
{
	struct kpi_request_record r = { .pid = pid, .operation = status == 429 ? NULL : op };
	struct otlp_item it;
	snprintf(r.request_id, sizeof(r.request_id), "%s", rid);
	r.t_arrive = 1000;
	r.t_admit = 1100;
	r.net_in = 100;
	r.itl_p50 = r.itl_p99 = r.itl_max = r.srtt_us = r.runq_ns = KPI_NULL;
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

static char *encode(const struct otlp_item *items, size_t n)
{
	uint8_t ids[24 * 4];
	char *buf = NULL;
	size_t len = 0;
	for (size_t i = 0; i < sizeof(ids); i++)
		ids[i] = (uint8_t)i;
	FILE *f = open_memstream(&buf, &len);
	otlp_encode(f, items, n, 1000000000000ll, ids, "kpi-infer", "host1");
	fclose(f);
	return buf;
}

static int count(const char *s, const char *needle)
{
	int n = 0;
	for (const char *p = s; (p = strstr(p, needle)); p++)
		n++;
	return n;
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
	const char *kids[] = {
		"\"name\":\"net_in\",\"kind\":1,\"startTimeUnixNano\":\"1000000001000\",\"endTimeUnixNano\":\"1000000001100\"",
		"\"name\":\"queue\",\"kind\":1,\"startTimeUnixNano\":\"1000000001100\",\"endTimeUnixNano\":\"1000000001300\"",
		"\"name\":\"prefill\",\"kind\":1,\"startTimeUnixNano\":\"1000000001300\",\"endTimeUnixNano\":\"1000000001600\"",
		"\"name\":\"decode\",\"kind\":1,\"startTimeUnixNano\":\"1000000001600\",\"endTimeUnixNano\":\"1000000002600\"",
		"\"name\":\"net_out\",\"kind\":1,\"startTimeUnixNano\":\"1000000002600\",\"endTimeUnixNano\":\"1000000002700\"",
	};
	for (int i = 0; i < 5; i++)
		CHECK(strstr(j, kids[i]), "child %d: %s", i, j);
	CHECK(j[strlen(j) - 1] == '}' && count(j, "{") == count(j, "}") && count(j, "[") == count(j, "]"),
	      "unbalanced JSON");
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
	CHECK(strstr(j, "\"stringValue\":\"b\\\"\\\\\\u0001\\u00ff\""), "escaping: %s", j);
	free(j);
}

static void server_error_sets_status(void)
{
	struct otlp_item it = item("x", 1, 500);
	char *j = encode(&it, 1);
	CHECK(strstr(j, ",\"status\":{\"code\":2,\"message\":\"500\"}}"), "%s", j);
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

	CHECK(!otlp_start("https://x:4318", &c, err, sizeof(err)) && strstr(err, "http://"), "%s", err);
	CHECK(!otlp_start("http://x:99999", &c, err, sizeof(err)) && strstr(err, "port"), "%s", err);
	CHECK(!otlp_start("http:///v1/traces", &c, err, sizeof(err)) && strstr(err, "host"), "%s", err);
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

int main(void)
{
	RUN(encodes_request_and_phases);
	RUN(rejected_and_grouping_and_escaping);
	RUN(server_error_sets_status);
	RUN(config_and_url_errors);
	RUN(nothing_listening_every_request_accounted);
	return CHECK_DONE();
}
