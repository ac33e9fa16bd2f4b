/* export_otlp_json.c - the OTLP/HTTP JSON body of a batch of requests: one
 * resource per traced process, a SERVER span per request with GenAI attributes
 * and an INTERNAL child per phase; pure functions, the sender is export_otlp.c. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "export_otlp.h"

void otlp_item_fill(struct otlp_item *it, const struct kpi_request_record *r)
{
	it->r = *r;
	it->r.token_writes = NULL;
	it->r.n_token_writes = 0;
	snprintf(it->finish, sizeof(it->finish), "%s", r->finish_reason ? r->finish_reason : "");
	snprintf(it->reject, sizeof(it->reject), "%s", r->reject_reason ? r->reject_reason : "");
	snprintf(it->operation, sizeof(it->operation), "%s", r->operation ? r->operation : "");
	snprintf(it->source, sizeof(it->source), "%s", r->source ? r->source : "usdt");
	it->r.finish_reason = NULL;
	it->r.reject_reason = NULL;
	it->r.operation = NULL;
	it->r.source = NULL;
	it->r.end_reason = NULL;
	/* pd_role, kv_status, slot_wait, route_policy stay: fixed words of the
	 * agent's own (record.h), never a producer's buffer */
}

/* Length of the well-formed UTF-8 sequence at p (1 to 4 bytes), 0 when none
 * starts there: a stray or missing continuation byte (the NUL included), an
 * overlong form, a surrogate or a code point past U+10FFFF. */
static int utf8_len(const unsigned char *p)
{
	unsigned cp, min;
	int n;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		n = 2, cp = p[0] & 0x1fu, min = 0x80;
	else if ((p[0] & 0xf0) == 0xe0)
		n = 3, cp = p[0] & 0x0fu, min = 0x800;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		n = 4, cp = p[0] & 0x07u, min = 0x10000;
	else
		return 0;
	for (int i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3fu);
	}
	return cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) ? 0 : n;
}

/* A JSON string.  Well-formed UTF-8 passes as it is (a service name or model
 * in any script); control characters are escaped; each byte that is not
 * UTF-8 (an x-request-id can hold anything) becomes U+FFFD, so the body is
 * always valid JSON that receivers accept. */
static void json_str(FILE *out, const char *s)
{
	fputc('"', out);
	for (const unsigned char *p = (const unsigned char *)s; *p;) {
		int n = utf8_len(p);
		if (*p == '"' || *p == '\\')
			fprintf(out, "\\%c", *p);
		else if (*p < 0x20 || *p == 0x7f)
			fprintf(out, "\\u%04x", *p);
		else if (n)
			fwrite(p, 1, (size_t)n, out);
		else
			fputs("\\ufffd", out);
		p += n ? n : 1;
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
	/* a server seen only on the wire: the model its request asked for, and no
	 * gen_ai.system (the agent cannot know which engine answered) */
	bool usdt = !strcmp(it->source, "usdt");
	const bool pd = r->pd_role != NULL;     /* other producers leave its fields 0 */
	const char *model = export_ident_model(&it->id, r->model);
	if (it->operation[0])
		span_head(out, trace, root, NULL, it->operation, model, 2, start, end, off);
	else
		span_head(out, trace, root, NULL, "HTTP", NULL, 2, start, end, off);
	fputs(",\"attributes\":[", out);
	if (it->operation[0])
		attr_str(out, &first, "gen_ai.operation.name", it->operation);
	if (usdt)
		attr_str(out, &first, "gen_ai.system", "kpi-infer");
	attr_str(out, &first, "gen_ai.request.model", model);
	attr_str(out, &first, "kpi.source", it->source);
	if (r->split_rule)      /* queue and prefill inferred from stream timing, by this rule */
		attr_str(out, &first, "kpi.split_rule", r->split_rule);
	attr_int(out, &first, "gen_ai.usage.input_tokens", r->prompt_tokens);
	attr_int(out, &first, "gen_ai.usage.output_tokens", r->output_tokens);
	if (it->finish[0])
		attr_str_array(out, &first, "gen_ai.response.finish_reasons", it->finish);
	attr_secs(out, &first, "gen_ai.server.time_to_first_token", r->ttft);
	/* reasoning (docs/agent.md, Reasoning): the first answer event, the time before it */
	attr_secs(out, &first, "kpi.time_to_first_output", r->ttfo);
	attr_secs(out, &first, "kpi.reasoning", r->reasoning_ns);
	attr_int(out, &first, "kpi.reasoning_events", r->reasoning_events);
	attr_int(out, &first, "kpi.answer_events", r->answer_events);
	attr_int(out, &first, "kpi.reasoning_tokens", r->reasoning_tokens);
	if (r->task_id[0])
		attr_str(out, &first, "kpi.task_id", r->task_id);
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
	if (pd) {
		attr_str(out, &first, "kpi.pd_role", r->pd_role);
		attr_int(out, &first, "kpi.kv_bytes", r->kv_bytes);
		if (r->kv_status)
			attr_str(out, &first, "kpi.kv_status", r->kv_status);
		if (r->slot_wait)
			attr_str(out, &first, "kpi.slot_wait", r->slot_wait);
	}
	fputs("]", out);
	if (failed)
		fprintf(out, ",\"status\":{\"code\":2,\"message\":\"%s\"}", err);
	fputs("}", out);

	/* children: the phases reached, contiguous by construction (a phase
	 * lasts until the next mark reached), so each starts where the last
	 * ended; a disaggregated request's (docs/disaggregation.md) in their order
	 * across its router, prefill and decode workers */
	static const char *const names[9] = { "net_in", "router", "queue", "prefill", "kv_transfer",
					      "decode_queue", "server_wait", "decode", "net_out" };
	const int64_t d[9] = { r->net_in, pd ? r->router_ns : KPI_NULL, r->queue, r->prefill,
			       pd ? r->kv_transfer_ns : KPI_NULL, pd ? r->decode_queue_ns : KPI_NULL,
			       r->server_wait, r->decode, r->net_out };
	int64_t at = start;
	for (int k = 0; k < 9; k++) {
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

/* The process's container and pod, after OpenTelemetry's container and k8s
 * resource conventions; nothing for a host process, each unknown one left out. */
static void resource_container(FILE *out, bool *first, const struct export_ident *id)
{
	const struct container_info *ci = &id->container;

	if (!id->in_container)
		return;
	attr_str(out, first, "container.id", ci->id);
	if (ci->runtime)
		attr_str(out, first, "container.runtime", ci->runtime);
	if (ci->name[0])
		attr_str(out, first, ci->pod_name[0] ? "k8s.container.name" : "container.name", ci->name);
	if (ci->pod_name[0])
		attr_str(out, first, "k8s.pod.name", ci->pod_name);
	if (ci->pod_namespace[0])
		attr_str(out, first, "k8s.namespace.name", ci->pod_namespace);
	if (ci->pod_uid[0])
		attr_str(out, first, "k8s.pod.uid", ci->pod_uid);
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
		resource_container(out, &first, &items[i].id);
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
