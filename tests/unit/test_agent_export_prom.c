/* test_agent_export_prom.c - the Prometheus exporter: bucket placement under
 * the le (<=) rule with the GenAI conventions' boundaries, the text format
 * (HELP/TYPE, cumulative buckets, +Inf = count, exact sums, labels), and the
 * loopback HTTP server that serves it. */
#include <math.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include "tests/unit/check.h"
#include "agent/sinks/export_ident.h"
#include "agent/sinks/export_prom.h"
#include "agent/sinks/http_serve.h"
#include "agent/sinks/prom_native.h"
#include "agent/sinks/prom_proto.h"

static struct kpi_request_record req(const char *rid, int64_t ttft_ms, int status, const char *fin)
{
	struct kpi_request_record r = { .pid = (uint32_t)getpid(), .seq_id = 1 };
	snprintf(r.request_id, sizeof(r.request_id), "%s", rid);
	int64_t ms = 1000000;
	r.t_arrive = 1000 * ms;
	r.net_in = 1 * ms;
	r.t_admit = r.t_arrive + r.net_in;
	r.http_status = status;
	r.finish_reason = fin;
	r.operation = status >= 400 ? NULL : "chat";    /* refused before admission: none */
	r.tpot = r.itl_p50 = r.itl_p99 = r.itl_max = r.preemptions = r.srtt_us = r.runq_ns = KPI_NULL;
	r.t_sched = r.t_first = r.t_last = r.t_first_write = KPI_NULL;
	r.queue = r.prefill = r.decode = r.server_wait = KPI_NULL;
	r.source = "usdt";
	if (status >= 400) {
		r.net_out = 2 * ms;
		r.t_done = r.t_admit + r.net_out;
		r.e2e = r.t_done - r.t_arrive;
		r.ttft = KPI_NULL;
		r.prompt_tokens = KPI_NULL;
		r.output_tokens = 0;
		return r;
	}
	r.queue = 3 * ms;
	r.prefill = ttft_ms * ms - r.net_in - r.queue;
	r.decode = 40 * ms;
	r.net_out = 1 * ms;
	r.t_sched = r.t_admit + r.queue;
	r.t_first = r.t_sched + r.prefill;
	r.t_first_write = r.t_arrive + ttft_ms * ms;
	r.t_last = r.t_first + r.decode;
	r.t_done = r.t_last + r.net_out;
	r.ttft = ttft_ms * ms;
	r.e2e = r.t_done - r.t_arrive;
	r.prompt_tokens = 7;
	r.output_tokens = 5;
	r.tpot = 10 * ms;
	return r;
}

static char *render(struct prom_exporter *p)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	CHECK(prom_render(p, f) == 0, "render failed");
	fclose(f);
	return buf;
}

/* The value of the exact series line "name{labels} v" (labels as printed). */
static double value_of(const char *text, const char *series)
{
	size_t n = strlen(series);
	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (!strncmp(l, series, n) && l[n] == ' ')
			return strtod(l + n + 1, NULL);
	return NAN;
}

/* The value of the first line of series name whose labels hold both a and b. */
static double value_with(const char *text, const char *name, const char *a, const char *b)
{
	size_t n = strlen(name);
	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		const char *end = strchr(l, '}'), *eol = strchr(l, '\n');
		if (strncmp(l, name, n) || l[n] != '{' || !end || (eol && end > eol))
			continue;
		const char *pa = strstr(l, a), *pb = strstr(l, b);
		if (pa && pb && pa < end && pb < end)
			return strtod(end + 2, NULL);
	}
	return NAN;
}

/* A row traced from the wire (source http): its server_wait is a phase of
 * its own, queue and prefill are not observed (NULL, not 0), the model label
 * is the one its request asked for, and kpi_source says where it came from. */
static void http_rows(void)
{
	struct prom_exporter *p = prom_new();
	struct kpi_sink s = prom_sink(p);
	struct kpi_request_record r = req("w", 30, 200, "stop");
	r.pid = (uint32_t)getppid();    /* a process with no model file of its own */
	r.source = "http";
	snprintf(r.model, sizeof(r.model), "llama-3-8b");
	r.server_wait = r.queue + r.prefill;
	r.queue = r.prefill = KPI_NULL;
	s.request(s.ctx, &r);
	char *t = render(p);
	const char *who = "kpi_source=\"http\"", *model = "gen_ai_request_model=\"llama-3-8b\"";
	CHECK(value_with(t, "kpi_request_server_wait_seconds_count", who, model) == 1, "%s", t);
	CHECK(fabs(value_with(t, "kpi_request_server_wait_seconds_sum", who, model) - 0.029) < 1e-9, "%s", t);
	CHECK(value_with(t, "kpi_request_decode_seconds_count", who, model) == 1, "%s", t);
	CHECK(value_with(t, "kpi_request_queue_seconds_count", who, model) == 0 &&
	      value_with(t, "kpi_request_prefill_seconds_count", who, model) == 0, "NULL is not 0: %s", t);
	CHECK(value_with(t, "gen_ai_server_time_to_first_token_seconds_count", who, model) == 1, "%s", t);
	free(t);
	prom_free(p);
}

static void conventions_buckets(void)
{
	static const double ttft[] = { 0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
				       0.75, 1.0, 2.5, 5.0, 7.5, 10.0 };
	static const double tpot[] = { 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
				       0.75, 1.0, 2.5 };
	static const double dur[] = { 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12,
				      10.24, 20.48, 40.96, 81.92 };
	struct { const char *name; const double *le; int n; } want[] = {
		{ "gen_ai_server_time_to_first_token_seconds", ttft, 16 },
		{ "gen_ai_server_time_per_output_token_seconds", tpot, 13 },
		{ "gen_ai_server_request_duration_seconds", dur, 14 },
	};
	prom_free(prom_new());
	for (int i = 0; i < 3; i++) {
		const struct prom_buckets *b = prom_buckets_of(want[i].name);
		CHECK(b, "%s: no such family", want[i].name);
		CHECK(b->n == want[i].n, "%s: %d bounds", want[i].name, b->n);
		for (int k = 0; k < b->n; k++)
			CHECK(b->le[k] == want[i].le[k], "%s le[%d] = %g", want[i].name, k, b->le[k]);
	}
}

static void bucket_placement_le_rule(void)
{
	const char *fams[] = { "gen_ai_server_time_to_first_token_seconds",
			       "gen_ai_server_time_per_output_token_seconds",
			       "gen_ai_server_request_duration_seconds",
			       "kpi_request_network_in_seconds", "kpi_request_queue_seconds",
			       "kpi_request_prefill_seconds", "kpi_request_decode_seconds",
			       "kpi_request_network_out_seconds" };
	prom_free(prom_new());
	for (size_t f = 0; f < sizeof(fams) / sizeof(fams[0]); f++) {
		const struct prom_buckets *b = prom_buckets_of(fams[f]);
		CHECK(b, "%s missing", fams[f]);
		CHECK(prom_bucket_index(b, 0) == 0, "%s: 0 not in the first bucket", fams[f]);
		for (int k = 0; k < b->n; k++) {
			int64_t le = b->le_ns[k];
			CHECK(le == llround(b->le[k] * 1e9), "%s: le_ns[%d]", fams[f], k);
			CHECK(k == 0 || le > b->le_ns[k - 1], "%s: bounds not ascending at %d", fams[f], k);
			/* exactly on a bound: that bucket (le means <=); 1 ns more: the next */
			CHECK(prom_bucket_index(b, le) == k, "%s: %lld ns -> %d, want %d", fams[f],
			      (long long)le, prom_bucket_index(b, le), k);
			CHECK(prom_bucket_index(b, le + 1) == k + 1, "%s: %lld+1 ns", fams[f], (long long)le);
			CHECK(prom_bucket_index(b, le - 1) == k, "%s: %lld-1 ns", fams[f], (long long)le);
		}
		CHECK(prom_bucket_index(b, INT64_MAX) == b->n, "%s: huge value not in +Inf", fams[f]);
	}
}

static void format_double_roundtrips(void)
{
	char buf[32];
	const double v[] = { 0.1, 0.001, 1e-05, 2.5e-05, 81.92, 0.3, 1.0 / 3, 123456789.123 };
	const char *want[] = { "0.1", "0.001", "1e-05", "2.5e-05", "81.92", "0.3", NULL, NULL };
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		prom_format_double(buf, sizeof(buf), v[i]);
		CHECK(strtod(buf, NULL) == v[i], "%s does not read back as %.17g", buf, v[i]);
		CHECK(!want[i] || !strcmp(buf, want[i]), "%g printed %s", v[i], buf);
	}
	prom_format_double(buf, sizeof(buf), INFINITY);
	CHECK(!strcmp(buf, "+Inf"), "%s", buf);
	prom_format_double(buf, sizeof(buf), NAN);
	CHECK(!strcmp(buf, "NaN"), "%s", buf);
}

static void exposition_text(void)
{
	struct prom_exporter *p = prom_new();
	struct kpi_sink s = prom_sink(p);
	char lab[256], line[512];
	struct kpi_request_record r;

	/* chat TTFTs 1 ms (on the first bound), 30 ms, 20 s (+Inf); one
	 * text_completion of 30 ms; one 429 refused before admission */
	r = req("a", 1, 200, "stop");   s.request(s.ctx, &r);
	r = req("b", 30, 200, "length"); r.operation = "text_completion"; s.request(s.ctx, &r);
	r = req("c", 30, 200, "stop");  s.request(s.ctx, &r);
	r = req("d", 20000, 200, "stop"); s.request(s.ctx, &r);
	r = req("e", 0, 429, NULL);     s.request(s.ctx, &r);
	/* 250 ms of run-queue wait: 100 behind its own threads, 50 on idle CPUs */
	struct kpi_sample_record smp = { .pid = (uint32_t)getpid(), .queue_depth = 3, .running = 2,
					 .kv_used = 10, .kv_free = 30, .kv_usage = 0.25, .drops = 7,
					 .runq_ns = 250000000, .runq_self_ns = 100000000,
					 .runq_idle_ns = 50000000, .n_runq_by = 3,
					 .runq_by = { { 4242, "hog", 80000000 }, { 0, "(idle)", 50000000 },
						      { KPI_RUNQ_BY_REST, "", 20000000 } } };
	s.sample(s.ctx, &smp);
	s.sample(s.ctx, &smp);  /* a counter: the second sample adds to the first */
	/* three seconds of ring-buffer drops, 3 + 4 + 5, as the ledger's running
	 * totals: the counter is their total (12), not the worst second (5) */
	static const uint64_t drops[] = { 3, 7, 12 };
	for (int k = 0; k < 3; k++) {
		struct kpi_loss_record l = { .t = (uint64_t)k };
		l.total[KPI_LOSS_RINGBUF_DROPS] = drops[k];
		l.total[KPI_LOSS_ORPHANS] = (uint64_t)k;
		s.losses(s.ctx, &l);
	}
	char *t = render(p);

	char tlab[256], nlab[256];
	snprintf(lab, sizeof(lab), "gen_ai_operation_name=\"chat\",gen_ai_request_model=\"unknown\","
		 "server_port=\"0\",pid=\"%d\",kpi_source=\"usdt\"", getpid());
	snprintf(tlab, sizeof(tlab), "gen_ai_operation_name=\"text_completion\","
		 "gen_ai_request_model=\"unknown\",server_port=\"0\",pid=\"%d\",kpi_source=\"usdt\"", getpid());
	/* the 429 came through no known endpoint: no operation label */
	snprintf(nlab, sizeof(nlab), "gen_ai_request_model=\"unknown\",server_port=\"0\",pid=\"%d\",kpi_source=\"usdt\"",
		 getpid());
	const char *h = "gen_ai_server_time_to_first_token_seconds";
	CHECK(strstr(t, "# HELP gen_ai_server_time_to_first_token_seconds "), "no HELP");
	CHECK(strstr(t, "# TYPE gen_ai_server_time_to_first_token_seconds histogram\n"), "no TYPE");
	CHECK(strstr(t, "# TYPE kpi_requests_total counter\n"), "no counter TYPE");
	CHECK(strstr(t, "# TYPE kpi_queue_depth gauge\n"), "no gauge TYPE");
	struct { const char *le; double n; } cum[] = {
		{ "0.001", 1 }, { "0.005", 1 }, { "0.02", 1 }, { "0.04", 2 }, { "10", 2 }, { "+Inf", 3 },
	};
	for (size_t i = 0; i < sizeof(cum) / sizeof(cum[0]); i++) {
		snprintf(line, sizeof(line), "%s_bucket{%s,le=\"%s\"}", h, lab, cum[i].le);
		CHECK(value_of(t, line) == cum[i].n, "%s = %g, want %g", line, value_of(t, line), cum[i].n);
	}
	snprintf(line, sizeof(line), "%s_count{%s}", h, lab);
	CHECK(value_of(t, line) == 3, "%s = %g (the 429 is no success)", line, value_of(t, line));
	snprintf(line, sizeof(line), "%s_sum{%s}", h, lab);
	CHECK(fabs(value_of(t, line) - 20.031) < 1e-12, "%s = %.17g", line, value_of(t, line));
	snprintf(line, sizeof(line), "%s_bucket{%s,le=\"0.02\"}", h, tlab);
	CHECK(value_of(t, line) == 0, "%s = %g", line, value_of(t, line));
	snprintf(line, sizeof(line), "%s_bucket{%s,le=\"0.04\"}", h, tlab);
	CHECK(value_of(t, line) == 1, "%s = %g", line, value_of(t, line));
	snprintf(line, sizeof(line), "%s_count{%s}", h, tlab);
	CHECK(value_of(t, line) == 1, "%s = %g", line, value_of(t, line));
	snprintf(line, sizeof(line), "%s_count{%s}", h, nlab);
	CHECK(isnan(value_of(t, line)), "%s: no TTFT series for the refused request", line);

	/* request duration: successes without error_type, the 429 with it */
	snprintf(line, sizeof(line), "gen_ai_server_request_duration_seconds_count{%s}", lab);
	CHECK(value_of(t, line) == 3, "%s", line);
	snprintf(line, sizeof(line), "gen_ai_server_request_duration_seconds_count{%s}", tlab);
	CHECK(value_of(t, line) == 1, "%s", line);
	snprintf(line, sizeof(line), "gen_ai_server_request_duration_seconds_bucket{%s,error_type=\"429\","
		 "le=\"0.01\"}", nlab);
	CHECK(value_of(t, line) == 1, "%s = %g", line, value_of(t, line));
	snprintf(line, sizeof(line), "gen_ai_server_request_duration_seconds_bucket{%s,error_type=\"429\","
		 "le=\"0.01\"}", lab);
	CHECK(isnan(value_of(t, line)), "the 429 has no operation: %s", line);
	/* phases: the 429 reached net_in and net_out only */
	snprintf(line, sizeof(line), "kpi_request_network_in_seconds_count{%s}", lab);
	CHECK(value_of(t, line) == 3, "%s", line);
	snprintf(line, sizeof(line), "kpi_request_network_in_seconds_count{%s}", nlab);
	CHECK(value_of(t, line) == 1, "%s", line);
	snprintf(line, sizeof(line), "kpi_request_queue_seconds_count{%s}", nlab);
	CHECK(isnan(value_of(t, line)), "%s: never queued", line);
	snprintf(line, sizeof(line), "kpi_request_queue_seconds_count{%s}", lab);
	CHECK(value_of(t, line) == 3, "%s", line);
	snprintf(line, sizeof(line), "kpi_request_queue_seconds_bucket{%s,le=\"0.0025\"}", lab);
	CHECK(value_of(t, line) == 0, "3 ms is above 2.5 ms: %s", line);
	snprintf(line, sizeof(line), "kpi_request_queue_seconds_bucket{%s,le=\"0.005\"}", lab);
	CHECK(value_of(t, line) == 3, "%s", line);
	snprintf(line, sizeof(line), "kpi_request_queue_seconds_bucket{%s,le=\"0.005\"}", tlab);
	CHECK(value_of(t, line) == 1, "%s", line);

	snprintf(line, sizeof(line), "kpi_requests_total{%s,http_response_status_code=\"200\","
		 "gen_ai_response_finish_reason=\"stop\"}", lab);
	CHECK(value_of(t, line) == 3, "%s = %g", line, value_of(t, line));
	snprintf(line, sizeof(line), "kpi_requests_total{%s,http_response_status_code=\"200\","
		 "gen_ai_response_finish_reason=\"length\"}", tlab);
	CHECK(value_of(t, line) == 1, "%s = %g", line, value_of(t, line));
	snprintf(line, sizeof(line), "kpi_requests_total{%s,http_response_status_code=\"429\","
		 "error_type=\"429\"}", nlab);
	CHECK(value_of(t, line) == 1, "%s", line);
	snprintf(line, sizeof(line), "kpi_tokens_total{%s,gen_ai_token_type=\"output\"}", lab);
	CHECK(value_of(t, line) == 15, "%s", line);
	snprintf(line, sizeof(line), "kpi_tokens_total{%s,gen_ai_token_type=\"input\"}", lab);
	CHECK(value_of(t, line) == 21, "%s", line);
	snprintf(line, sizeof(line), "kpi_tokens_total{%s,gen_ai_token_type=\"output\"}", tlab);
	CHECK(value_of(t, line) == 5, "%s", line);
	snprintf(line, sizeof(line), "kpi_tokens_total{%s,gen_ai_token_type=\"input\"}", nlab);
	CHECK(isnan(value_of(t, line)), "%s: a refused request processed no tokens", line);

	char glab[200];
	snprintf(glab, sizeof(glab), "gen_ai_request_model=\"unknown\",server_port=\"0\",pid=\"%d\",kpi_source=\"usdt\"",
		 getpid());
	snprintf(line, sizeof(line), "kpi_queue_depth{%s}", glab);
	CHECK(value_of(t, line) == 3, "%s", line);
	snprintf(line, sizeof(line), "kpi_running_requests{%s}", glab);
	CHECK(value_of(t, line) == 2, "%s", line);
	snprintf(line, sizeof(line), "kpi_kv_cache_usage_ratio{%s}", glab);
	CHECK(value_of(t, line) == 0.25, "%s", line);
	CHECK(value_of(t, "kpi_agent_ringbuf_drops_total") == 12, "drops %g, want the total 12",
	      value_of(t, "kpi_agent_ringbuf_drops_total"));
	CHECK(value_of(t, "kpi_agent_losses_total{cause=\"ringbuf_drops\"}") == 12, "losses: drops");
	CHECK(value_of(t, "kpi_agent_losses_total{cause=\"orphans\"}") == 2, "losses: orphans");
	CHECK(value_of(t, "kpi_agent_losses_total{cause=\"retention_rows\"}") == 0,
	      "losses: every cause has a series, zero included");
	CHECK(strstr(t, "# TYPE kpi_run_queue_wait_seconds_total counter\n"), "no run-queue TYPE");
	static const struct { const char *behind; double s; } rq[] = {
		{ "own_threads", 0.2 }, { "idle_cpu", 0.1 }, { "other_processes", 0.2 },
	};
	for (size_t i = 0; i < sizeof(rq) / sizeof(rq[0]); i++) {
		snprintf(line, sizeof(line), "kpi_run_queue_wait_seconds_total{%s,behind=\"%s\"}", glab, rq[i].behind);
		CHECK(fabs(value_of(t, line) - rq[i].s) < 1e-12, "%s = %g, want %g", line, value_of(t, line), rq[i].s);
	}

	/* every sample line's family was typed before it; buckets never decrease */
	double prev = -1;
	char fam[128] = "";
	for (char *l = t; *l; ) {
		char *nl = strchr(l, '\n');
		CHECK(nl, "last line lacks a newline");
		*nl = 0;
		if (!strncmp(l, "# TYPE ", 7)) {
			sscanf(l + 7, "%127s", fam);
			prev = -1;
		} else if (l[0] != '#') {
			CHECK(!strncmp(l, fam, strlen(fam)), "'%s' outside its family %s", l, fam);
			if (strstr(l, "_bucket{")) {
				double v = strtod(strrchr(l, ' ') + 1, NULL);
				if (strstr(l, "le=\"+Inf\"") == NULL)
					CHECK(v >= prev || prev < 0, "bucket decreased: %s", l);
				prev = strstr(l, "le=\"+Inf\"") ? -1 : v;
			}
		}
		l = nl + 1;
	}
	free(t);
	prom_free(p);
}

static int body_render(void *ctx, FILE *out, bool proto)
{
	fputs(proto ? "P" : (const char *)ctx, out);
	return 0;
}

static int get(int port, const char *req, char *resp, size_t len)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	size_t got = 0;
	ssize_t n;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)))
		return -1;
	if (write(fd, req, strlen(req)) != (ssize_t)strlen(req))
		return -1;
	while (got < len - 1 && (n = read(fd, resp + got, len - 1 - got)) > 0)
		got += (size_t)n;
	resp[got] = 0;
	close(fd);
	return (int)got;
}

static void http_server_on_loopback(void)
{
	char host[64], err[256], resp[4096];
	int port;
	CHECK(http_serve_parse_addr("9464", host, sizeof(host), &port, err, sizeof(err)) == 0 &&
	      !strcmp(host, "127.0.0.1") && port == 9464, "bare port");
	CHECK(http_serve_parse_addr("0.0.0.0:80", host, sizeof(host), &port, err, sizeof(err)) == 0 &&
	      !strcmp(host, "0.0.0.0") && port == 80, "addr:port");
	CHECK(http_serve_parse_addr("[::1]:9", host, sizeof(host), &port, err, sizeof(err)) == 0 &&
	      !strcmp(host, "::1") && port == 9, "[v6]:port");
	CHECK(http_serve_parse_addr("x:70000", host, sizeof(host), &port, err, sizeof(err)) < 0 &&
	      strstr(err, "ADDR:PORT"), "bad port accepted");
	CHECK(http_serve_parse_addr("::1:9", host, sizeof(host), &port, err, sizeof(err)) < 0, "v6 without []");

	struct http_server *s = http_serve_start("0", body_render, "m 1\n", err, sizeof(err));
	CHECK(s, "%s", err);
	const char *b = http_serve_bound(s);
	CHECK(!strncmp(b, "127.0.0.1:", 10), "bound %s", b);
	port = atoi(b + 10);
	CHECK(get(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", resp, sizeof(resp)) > 0, "no answer");
	CHECK(!strncmp(resp, "HTTP/1.1 200 OK\r\n", 17), "%s", resp);
	CHECK(strstr(resp, "Content-Type: text/plain; version=0.0.4"), "%s", resp);
	CHECK(strstr(resp, "Content-Length: 4\r\n") && strstr(resp, "\r\n\r\nm 1\n"), "%s", resp);
	/* Prometheus 2.42 with native histograms on: protobuf first */
	get(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: application/vnd.google.protobuf;"
		  "proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;"
		  "version=0.0.4;q=0.3,*/*;q=0.1\r\n\r\n", resp, sizeof(resp));
	CHECK(strstr(resp, "Content-Type: " PROM_PROTO_TYPE "\r\n") && strstr(resp, "\r\n\r\nP"), "%s", resp);
	get(port, "GET /metrics HTTP/1.1\r\naccept: application/vnd.google.protobuf;"
		  "proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0,text/plain\r\n\r\n",
	    resp, sizeof(resp));
	CHECK(strstr(resp, "\r\n\r\nm 1\n"), "q=0 is a refusal: %s", resp);
	get(port, "GET /metrics HTTP/1.1\r\nAccept: application/vnd.google.protobuf;"
		  "proto=io.prometheus.client.MetricFamily;encoding=text\r\n\r\n", resp, sizeof(resp));
	CHECK(strstr(resp, "\r\n\r\nm 1\n"), "not the delimited encoding: %s", resp);
	get(port, "GET /metrics?x=1 HTTP/1.0\r\n\r\n", resp, sizeof(resp));
	CHECK(!strncmp(resp, "HTTP/1.1 200", 12), "query string: %s", resp);
	get(port, "HEAD /metrics HTTP/1.1\r\n\r\n", resp, sizeof(resp));
	CHECK(!strncmp(resp, "HTTP/1.1 200", 12) && strstr(resp, "\r\n\r\n")[4] == 0, "HEAD: %s", resp);
	get(port, "GET /nope HTTP/1.1\r\n\r\n", resp, sizeof(resp));
	CHECK(!strncmp(resp, "HTTP/1.1 404", 12) && strstr(resp, "\"error\""), "%s", resp);
	get(port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", resp, sizeof(resp));
	CHECK(!strncmp(resp, "HTTP/1.1 405", 12) && strstr(resp, "Allow: GET, HEAD"), "%s", resp);
	get(port, "garbage\r\n\r\n", resp, sizeof(resp));
	CHECK(!strncmp(resp, "HTTP/1.1 400", 12), "%s", resp);
	char big[10000];
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	memcpy(big, "GET /metrics HTTP/1.1\r\nX: ", 26);
	get(port, big, resp, sizeof(resp));
	CHECK(!strncmp(resp, "HTTP/1.1 431", 12), "%s", resp);
	http_serve_stop(s);
	CHECK(get(port, "GET /metrics HTTP/1.1\r\n\r\n", resp, sizeof(resp)) < 0, "still listening");
}

static void wr_str(FILE *f, const char *s)
{
	uint64_t n = strlen(s);
	fwrite(&n, 8, 1, f);
	fwrite(s, 1, n, f);
}

static void gguf_general_name(void)
{
	char path[] = "/tmp/test-agent-export-XXXXXX", name[128];
	int fd = mkstemp(path);
	FILE *f = fdopen(fd, "wb");
	uint32_t u32;
	uint64_t u64;

	CHECK(f, "temp file");
	fwrite("GGUF", 1, 4, f);
	u32 = 3; fwrite(&u32, 4, 1, f);                 /* version */
	u64 = 0; fwrite(&u64, 8, 1, f);                 /* tensors */
	u64 = 4; fwrite(&u64, 8, 1, f);                 /* kvs */
	wr_str(f, "general.architecture"); u32 = 8; fwrite(&u32, 4, 1, f); wr_str(f, "llama");
	wr_str(f, "x.layers"); u32 = 4; fwrite(&u32, 4, 1, f); fwrite(&u32, 4, 1, f);
	wr_str(f, "x.vocab"); u32 = 9; fwrite(&u32, 4, 1, f); u32 = 8; fwrite(&u32, 4, 1, f);
	u64 = 2; fwrite(&u64, 8, 1, f); wr_str(f, "a"); wr_str(f, "bc");
	wr_str(f, "general.name"); u32 = 8; fwrite(&u32, 4, 1, f); wr_str(f, "kpiscope-tiny-s0");
	fclose(f);
	int rc = export_ident_gguf_name(path, name, sizeof(name));
	CHECK(rc == 0 && !strcmp(name, "kpiscope-tiny-s0"), "rc %d name '%s'", rc, rc ? "" : name);
	/* truncated: no name, no crash */
	CHECK(truncate(path, 60) == 0, "truncate");
	CHECK(export_ident_gguf_name(path, name, sizeof(name)) < 0, "truncated file gave a name");
	unlink(path);
	CHECK(export_ident_gguf_name(path, name, sizeof(name)) < 0, "missing file gave a name");
}

/* The weight type from the tensor infos after the metadata: the matrices'
 * types by parameters, most first; 1-D tensors (norms) do not count. */
static void gguf_weight_type(void)
{
	char path[] = "/tmp/test-agent-export-XXXXXX", wt[32];
	int fd = mkstemp(path);
	FILE *f = fdopen(fd, "wb");
	uint32_t u32;
	uint64_t u64;
	struct { const char *name; uint32_t nd; uint64_t ne[2]; uint32_t type; } ts[] = {
		{ "blk.0.ffn_down.weight", 2, { 256, 2 }, 14 },   /* Q6_K, 512 */
		{ "blk.0.attn_norm.weight", 1, { 4096, 1 }, 0 },  /* F32 norm: not a matrix */
		{ "blk.0.ffn_up.weight", 2, { 256, 4 }, 12 },     /* Q4_K, 1024 */
	};

	CHECK(f, "temp file");
	fwrite("GGUF", 1, 4, f);
	u32 = 3; fwrite(&u32, 4, 1, f);
	u64 = 3; fwrite(&u64, 8, 1, f);                 /* tensors */
	u64 = 2; fwrite(&u64, 8, 1, f);                 /* kvs */
	wr_str(f, "general.name"); u32 = 8; fwrite(&u32, 4, 1, f); wr_str(f, "m");
	wr_str(f, "tokenizer.ggml.tokens"); u32 = 9; fwrite(&u32, 4, 1, f); u32 = 8; fwrite(&u32, 4, 1, f);
	u64 = 2; fwrite(&u64, 8, 1, f); wr_str(f, "<s>"); wr_str(f, "</s>");
	for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++) {
		wr_str(f, ts[i].name);
		fwrite(&ts[i].nd, 4, 1, f);
		fwrite(ts[i].ne, 8, ts[i].nd, f);
		fwrite(&ts[i].type, 4, 1, f);
		u64 = 0; fwrite(&u64, 8, 1, f);         /* offset */
	}
	fclose(f);
	int rc = export_ident_gguf_weight_type(path, wt, sizeof(wt));
	CHECK(rc == 0 && !strcmp(wt, "Q4_K+Q6_K"), "rc %d weight type '%s'", rc, rc ? "" : wt);
	CHECK(truncate(path, 120) == 0, "truncate");
	CHECK(export_ident_gguf_weight_type(path, wt, sizeof(wt)) < 0, "a truncated file gave a weight type");
	unlink(path);
}

/* Bucket i of schema 7 holds (2^((i-1)/128), 2^(i/128)] s: a value just
 * above a bound is in the next bucket, the middle of a bucket in it. */
static void native_index(void)
{
	int bad = 0;
	for (int i = -1000; i <= 1000; i += 7) {
		double mid = exp2((i - 0.5) / 128), above = exp2(i / 128.0) * (1 + 1e-12);
		bad += prom_native_index(mid) != i || prom_native_index(above) != i + 1;
	}
	CHECK(!bad, "%d of the indexes wrong", bad);
	CHECK(prom_native_index(1.0) == 0 && prom_native_index(2.0) == 128 && prom_native_index(0.5) == -128,
	      "powers of two: %d %d %d", prom_native_index(1.0), prom_native_index(2.0), prom_native_index(0.5));
	CHECK(prom_native_index(1e-15) == PROM_NATIVE_MIN_INDEX && prom_native_index(1e9) == PROM_NATIVE_MAX_INDEX,
	      "clamped");
}

/* Values from 1 ms to 16000 s (2^24 apart): more than 2048 buckets at
 * schema 7, so the histogram halves to 6; every value counted once, each in
 * the schema-6 bucket its value falls in (worked from the bounds, not from
 * the index code), and at most 2048 buckets kept. */
static void native_halves(void)
{
	struct prom_native h = { 0 };
	double v[] = { 1e-3, 1e-3 * exp2(0.3), 0.5, 1.0, 7.0, 16000.0 };
	int n = (int)(sizeof(v) / sizeof(v[0]));
	for (int i = 0; i < n; i++)
		prom_native_add(&h, (int64_t)llround(v[i] * 1e9));
	uint64_t total = 0;
	for (uint32_t k = 0; k < h.n; k++)
		total += h.c[k];
	CHECK(prom_native_schema(&h) == 6 && h.n <= PROM_NATIVE_MAX_BUCKETS && total == (uint64_t)n,
	      "schema %d, %u buckets, %llu values", prom_native_schema(&h), h.n, (unsigned long long)total);
	int bad = 0;
	for (int i = 0; i < n; i++) {
		double s = (double)llround(v[i] * 1e9) / 1e9;
		int32_t want = (int32_t)ceil(log2(s) * 64);     /* (2^((j-1)/64), 2^(j/64)] */
		int32_t k = want - h.lo;
		bad += k < 0 || (uint32_t)k >= h.n || !h.c[k];
	}
	CHECK(!bad, "%d values not in their schema-6 bucket", bad);
	CHECK(prom_native_halve(3) == 2 && prom_native_halve(4) == 2 && prom_native_halve(-3) == -1 &&
	      prom_native_halve(-4) == -2 && prom_native_halve(0) == 0, "halving");
	prom_native_free(&h);
}

static bool bytes_are(const struct pbuf *b, const uint8_t *want, size_t n)
{
	return b->len == n && !memcmp(b->p, want, n);
}

static void dump(const struct pbuf *b)
{
	for (size_t i = 0; i < b->len; i++)
		fprintf(stderr, "%02x ", b->p[i]);
	fputc('\n', stderr);
}

/* Worked by hand from metrics.proto: 0 ns, two of 1 s (bucket 0), one each
 * in buckets 3, 5 and 10: spans [0, 6) and [10, 11) (the gap of 2 kept
 * inside, of 4 not), deltas 2 -2 0 1 -1 1 0. */
static void native_encoding(void)
{
	struct prom_native h = { 0 };
	const double at[] = { 1.0, 1.0, exp2(2.5 / 128), exp2(4.5 / 128), exp2(9.5 / 128) };
	prom_native_add(&h, 0);
	for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++)
		prom_native_add(&h, (int64_t)llround(at[i] * 1e9));
	struct pbuf b = { 0 };
	prom_native_encode(&h, &b);
	uint8_t want[] = { 0x28, 0x0e,                                  /* schema 7 */
			   0x31, 0, 0, 0, 0, 0, 0, 0, 0,                /* zero_threshold */
			   0x38, 0x01,                                  /* zero_count 1 */
			   0x62, 0x04, 0x08, 0x00, 0x10, 0x06,          /* span 0, 6 */
			   0x62, 0x04, 0x08, 0x08, 0x10, 0x01,          /* span +4, 1 */
			   0x68, 4, 0x68, 3, 0x68, 0, 0x68, 2, 0x68, 1, 0x68, 2, 0x68, 0 };
	double z = PROM_NATIVE_ZERO_S;
	uint64_t u;
	memcpy(&u, &z, 8);
	for (int i = 0; i < 8; i++)
		want[3 + i] = (uint8_t)(u >> (8 * i));
	bool ok = bytes_are(&b, want, sizeof(want));
	if (!ok)
		dump(&b);
	CHECK(ok, "native fields: %zu bytes", b.len);
	pbuf_free(&b);
	prom_native_free(&h);
}

static const struct pbuf *no_native(void *ctx, const char *family, const char *labels)
{
	(void)ctx, (void)family, (void)labels;
	return NULL;
}

/* A counter family as MetricFamily, worked by hand; a family with no
 * sample is left out; a line that is not a sample is refused with its line. */
static void proto_from_text(void)
{
	const char text[] = "# HELP none_total nothing yet\n# TYPE none_total counter\n"
			    "# HELP a_total x\n# TYPE a_total counter\na_total{k=\"v\"} 3\n";
	char *out = NULL, err[256];
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);
	int rc = prom_proto_from_text(text, sizeof(text) - 1, no_native, NULL, f, err, sizeof(err));
	fclose(f);
	uint8_t want[] = { 0x23, 0x0a, 7, 'a', '_', 't', 'o', 't', 'a', 'l', 0x12, 1, 'x', 0x18, 0,
			   0x22, 0x13, 0x0a, 0x06, 0x0a, 1, 'k', 0x12, 1, 'v',
			   0x1a, 0x09, 0x09, 0, 0, 0, 0, 0, 0, 0x08, 0x40 };   /* 3.0 */
	CHECK(rc == 0 && len == sizeof(want) && !memcmp(out, want, len), "rc %d, %zu bytes: %s", rc, len,
	      rc ? err : "");
	free(out);
	const char bad[] = "# TYPE h histogram\nh_bucket{le=\"x\"} 1\n";
	f = open_memstream(&out, &len);
	rc = prom_proto_from_text(bad, sizeof(bad) - 1, no_native, NULL, f, err, sizeof(err));
	fclose(f);
	CHECK(rc < 0 && strstr(err, "line 2") && strstr(err, "le"), "%s", err);
	free(out);
}

/* The exporter's own exposition as protobuf: as many families as the text
 * has families with samples, each histogram series with native buckets. */
static void exposition_proto(void)
{
	struct prom_exporter *p = prom_new();
	struct kpi_sink s = prom_sink(p);
	struct kpi_request_record r = req("a", 30, 200, "stop");
	s.request(s.ctx, &r);
	char *out = NULL, err[256];
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);
	int rc = prom_render_proto(p, f, err, sizeof(err));
	fclose(f);
	CHECK(rc == 0 && len > 0, "%s", err);
	/* the TTFT family: its name, then a histogram with schema 7 */
	const char *name = "gen_ai_server_time_to_first_token";
	void *at = len ? memmem(out, len, name, strlen(name)) : NULL;
	CHECK(at, "no TTFT family");
	const uint8_t schema[] = { 0x28, 0x0e, 0x31 };
	CHECK(at && memmem(at, len - (size_t)((char *)at - out), schema, sizeof(schema)), "no native buckets");
	free(out);
	prom_free(p);
}

int main(void)
{
	RUN(gguf_general_name);
	RUN(gguf_weight_type);
	RUN(conventions_buckets);
	RUN(bucket_placement_le_rule);
	RUN(format_double_roundtrips);
	RUN(exposition_text);
	RUN(http_rows);
	RUN(http_server_on_loopback);
	RUN(native_index);
	RUN(native_encoding);
	RUN(native_halves);
	RUN(proto_from_text);
	RUN(exposition_proto);
	return CHECK_DONE();
}
