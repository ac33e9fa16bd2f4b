/* test_agent_trajectory.c - agent tasks (agent/track/trajectory.c) and the
 * response-id link rule (agent/track/relay_link.c) on hand-made records: the
 * grouping by inbound request, trace id, conversation id and idleness; call
 * kinds, retries, errors, MCP tools; the critical path summing to the span
 * with overlapping calls; escalations only for the same request to another
 * model after an answer; links only where exactly one call matches. */
#include <inttypes.h>
#include "tests/unit/check.h"
#include "agent/track/relay_link.h"
#include "agent/track/trajectory.h"

#define MS 1000000ULL

static struct kpi_task_record tasks[16];
static int n_tasks;

static void on_task(void *ctx, const struct kpi_task_record *k)
{
	(void)ctx;
	if (n_tasks < 16)
		tasks[n_tasks] = *k;
	n_tasks++;
}

static struct kpi_request_record call(uint32_t pid, const char *parent, const char *path, uint64_t t0,
				      uint64_t t1, int status)
{
	struct kpi_request_record r;
	memset(&r, 0, sizeof(r));
	r.pid = pid;
	r.t_arrive = (int64_t)t0;
	r.t_done = (int64_t)t1;
	r.http_status = status;
	r.end_reason = "complete";
	r.prompt_tokens = r.output_tokens = r.content_events = KPI_NULL;
	r.direction = "out";
	snprintf(r.parent_hop_id, sizeof(r.parent_hop_id), "%s", parent);
	snprintf(r.hop_id, sizeof(r.hop_id), "%u.%" PRIu64, pid, t0);
	snprintf(r.path, sizeof(r.path), "%s", path);
	snprintf(r.method, sizeof(r.method), "POST");
	snprintf(r.comm, sizeof(r.comm), "agent");
	snprintf(r.sock_peer, sizeof(r.sock_peer), "127.0.0.1:%d", strstr(path, "tool") ? 9100 : 9000);
	return r;
}

static struct kpi_request_record inbound(uint32_t pid, uint64_t t0, uint64_t t1, int status)
{
	struct kpi_request_record r = call(pid, "", "/task", t0, t1, status);
	r.direction = "in";
	snprintf(r.request_id, sizeof(r.request_id), "task-%" PRIu64, t0);
	return r;
}

/* A server agent: one inbound request, two model calls, a tool that fails
 * and is retried, an MCP call, overlapping a model call; the three times sum
 * to the span, the critical path gives model the overlap. */
static void server_task(void)
{
	struct trajectory *tj = trajectory_new(on_task, NULL, 0);
	n_tasks = 0;
	struct kpi_request_record in = inbound(7, 0, 100 * MS, 200);
	const char *parent = in.hop_id;
	struct kpi_request_record c[5] = {
		call(7, parent, "/v1/chat/completions", 1 * MS, 20 * MS, 200),
		call(7, parent, "/tools/search", 21 * MS, 25 * MS, 503),
		call(7, parent, "/tools/search", 26 * MS, 30 * MS, 200),
		call(7, parent, "/mcp", 35 * MS, 50 * MS, 200),             /* overlaps the next */
		call(7, parent, "/v1/chat/completions", 40 * MS, 90 * MS, 200),
	};
	snprintf(c[3].rpc_method, sizeof(c[3].rpc_method), "tools/call");
	snprintf(c[3].tool_name, sizeof(c[3].tool_name), "lookup");
	for (int i = 0; i < 5; i++)
		trajectory_call(tj, &c[i], true);
	CHECK(!strcmp(c[0].call_kind, "model") && !strcmp(c[1].call_kind, "tool") && !strcmp(c[3].call_kind, "tool"),
	      "kinds");
	CHECK(c[1].call_error == 1 && c[1].retry == 0 && c[2].retry == 1 && c[2].call_error == 0 && c[4].retry == 0,
	      "retry and error: %" PRId64 " %" PRId64 " %" PRId64, c[1].call_error, c[2].retry, c[4].retry);
	CHECK(!strcmp(c[0].task_id, parent) && !c[4].escalated_from[0], "task id and no escalation");
	trajectory_inbound(tj, &in);
	CHECK(n_tasks == 1 && !strcmp(in.task_id, parent), "%d tasks", n_tasks);
	const struct kpi_task_record *k = &tasks[0];
	CHECK(!strcmp(k->rule, "inbound") && k->model_calls == 2 && k->tool_calls == 3 && k->mcp_calls == 1 &&
	      k->retries == 1 && k->errors == 1 && k->success && k->http_status == 200, "counts");
	/* model 1-20 and 40-90; tool 21-25, 26-30, 35-40 (the MCP call's part before the model call) */
	CHECK(k->model_ns == (int64_t)(69 * MS) && k->tool_ns == (int64_t)(13 * MS) &&
	      k->model_ns + k->tool_ns + k->agent_ns == k->duration && k->duration == (int64_t)(100 * MS),
	      "model %" PRId64 " tool %" PRId64 " agent %" PRId64, k->model_ns, k->tool_ns, k->agent_ns);
	/* one model call and nothing else: a gateway's request, not a task */
	struct kpi_request_record in2 = inbound(7, 200 * MS, 300 * MS, 200);
	struct kpi_request_record one = call(7, in2.hop_id, "/v1/completions", 210 * MS, 290 * MS, 200);
	trajectory_call(tj, &one, true);
	trajectory_inbound(tj, &in2);
	CHECK(n_tasks == 1 && !in2.task_id[0] && !strcmp(one.task_id, in2.hop_id), "a single call is no task");
	/* a server's call no rule linked: no task */
	struct kpi_request_record lost = call(7, "", "/v1/completions", 400 * MS, 410 * MS, 200);
	trajectory_call(tj, &lost, true);
	CHECK(!lost.task_id[0], "unlinked call of a server");
	trajectory_free(tj);
}

/* A command-line agent: trace ids, conversation ids, idleness; each task
 * says its rule, and ends when idle (or the agent stops). */
static void cli_tasks(void)
{
	struct trajectory *tj = trajectory_new(on_task, NULL, 300 * MS);
	n_tasks = 0;
	struct kpi_request_record a = call(9, "", "/v1/chat/completions", 0, 10 * MS, 200);
	struct kpi_request_record b = call(9, "", "/tools/x", 11 * MS, 12 * MS, 200);
	snprintf(a.trace_ctx, sizeof(a.trace_ctx), "0af7651916cd43dd8448eb211c80319c");
	memcpy(b.trace_ctx, a.trace_ctx, sizeof(a.trace_ctx));
	struct kpi_request_record c = call(9, "", "/v1/chat/completions", 13 * MS, 20 * MS, 200);
	struct kpi_request_record d = call(9, "", "/v1/chat/completions", 21 * MS, 30 * MS, 200);
	snprintf(c.conversation_id, sizeof(c.conversation_id), "conv-1");
	memcpy(d.conversation_id, c.conversation_id, sizeof(c.conversation_id));
	/* no ids: two tasks 400 ms apart, the second one failing at its end */
	struct kpi_request_record e[4] = {
		call(9, "", "/v1/chat/completions", 100 * MS, 110 * MS, 200),
		call(9, "", "/v1/chat/completions", 120 * MS, 130 * MS, 200),
		call(9, "", "/v1/chat/completions", 530 * MS, 540 * MS, 200),
		call(9, "", "/tools/x", 550 * MS, 560 * MS, 500),
	};
	trajectory_call(tj, &a, false);
	trajectory_call(tj, &b, false);
	trajectory_call(tj, &c, false);
	trajectory_call(tj, &d, false);
	for (int i = 0; i < 4; i++)
		trajectory_call(tj, &e[i], false);
	CHECK(!strcmp(a.task_id, a.trace_ctx) && !strcmp(c.task_id, "conv-1") && strcmp(e[0].task_id, e[2].task_id) &&
	      !strcmp(e[0].task_id, e[1].task_id), "ids %s %s %s %s", a.task_id, c.task_id, e[0].task_id, e[2].task_id);
	CHECK(n_tasks == 1 && !strcmp(tasks[0].rule, "idle_gap") && tasks[0].duration == (int64_t)(30 * MS) &&
	      tasks[0].success, "the first idle task ended at the pause: %d", n_tasks);
	trajectory_expire(tj, 600 * MS);        /* the second idle task: 40 ms idle, not yet */
	CHECK(n_tasks == 1, "%d", n_tasks);
	trajectory_expire(tj, 900 * MS);
	CHECK(n_tasks == 2 && !tasks[1].success && tasks[1].errors == 1, "the second, failed at its end");
	trajectory_forget_pid(tj, 0);           /* the agent stops: the id tasks end */
	CHECK(n_tasks == 4, "%d tasks", n_tasks);
	for (int i = 2; i < 4; i++) {
		const struct kpi_task_record *k = &tasks[i];
		bool tp = !strcmp(k->rule, "traceparent");
		CHECK(tp ? !strcmp(k->request_id, a.trace_ctx) && k->tool_calls == 1 && k->duration == (int64_t)(12 * MS)
			 : !strcmp(k->rule, "conversation") && k->model_calls == 2 && k->duration == (int64_t)(17 * MS),
		      "%s %" PRId64, k->rule, k->duration);
		CHECK(k->model_ns + k->tool_ns + k->agent_ns == k->duration, "sum");
	}
	trajectory_free(tj);
}

/* Escalation: the same request (fingerprint) to another model after the
 * first answered; not when the request differs, nor after a failed first. */
static void escalations(void)
{
	struct trajectory *tj = trajectory_new(on_task, NULL, 0);
	for (int variant = 0; variant < 4; variant++) {
		struct kpi_request_record in = inbound(5, variant * 1000 * MS, variant * 1000 * MS + 500 * MS, 200);
		struct kpi_request_record s = call(5, in.hop_id, "/v1/chat/completions", in.t_arrive + MS,
						   in.t_arrive + 50 * MS, variant == 2 ? 500 : 200);
		struct kpi_request_record l = call(5, in.hop_id, "/v1/chat/completions", in.t_arrive + 51 * MS,
						   in.t_arrive + 400 * MS, 200);
		snprintf(s.model, sizeof(s.model), "small");
		snprintf(l.model, sizeof(l.model), variant == 3 ? "small" : "large");
		s.body_digest_ok = l.body_digest_ok = true;
		s.body_digest = 42;
		l.body_digest = variant == 1 ? 43 : 42;
		trajectory_call(tj, &s, true);
		trajectory_call(tj, &l, true);
		trajectory_inbound(tj, &in);
		bool want = variant == 0;       /* 1: another request; 2: the first failed; 3: the same model */
		CHECK(want ? !strcmp(l.escalated_from, s.hop_id) : !l.escalated_from[0], "variant %d: %s", variant,
		      l.escalated_from);
	}
	trajectory_free(tj);
}

/* ---- the response-id rule ------------------------------------------------ */

static struct kpi_request_record released[16];
static int n_released;

static void on_release(void *ctx, struct kpi_request_record *rec)
{
	(void)ctx;
	if (n_released < 16)
		released[n_released] = *rec;
	n_released++;
}

static struct kpi_request_record relayed(uint32_t pid, uint64_t t0, uint64_t t1, const char *hdr, const char *body)
{
	struct kpi_request_record r = call(pid, "", "/v1/chat/completions", t0, t1, 200);
	snprintf(r.resp_header_id, sizeof(r.resp_header_id), "%s", hdr);
	snprintf(r.resp_body_id, sizeof(r.resp_body_id), "%s", body);
	return r;
}

static void response_id_rule(void)
{
	struct relay_link *rl = relay_link_new(on_release, NULL);
	n_released = 0;
	/* two requests open at once on one process (no thread, no loop rule), their calls relayed */
	struct kpi_request_record c1 = relayed(3, 10, 90, "req-1", "chatcmpl-req-1");
	struct kpi_request_record c2 = relayed(3, 20, 80, "req-2", "chatcmpl-req-2");
	CHECK(relay_link_hold(rl, &c2) && relay_link_hold(rl, &c1) && !n_released, "held");
	struct kpi_request_record i1 = relayed(3, 5, 100, "req-1", "chatcmpl-req-1");
	struct kpi_request_record i2 = relayed(3, 15, 95, "req-2", "chatcmpl-req-2");
	i1.direction = i2.direction = "in";
	relay_link_inbound(rl, &i2);
	relay_link_inbound(rl, &i1);
	CHECK(n_released == 2 && !strcmp(released[0].parent_hop_id, i2.hop_id) &&
	      !strcmp(released[1].parent_hop_id, i1.hop_id) && !strcmp(released[1].link_rule, "response_id"),
	      "linked each to its own");
	/* the body's id alone (no header), shared by two calls: neither is linked, both expire */
	struct kpi_request_record d1 = relayed(3, 200, 290, "", "chatcmpl-test");
	struct kpi_request_record d2 = relayed(3, 210, 280, "", "chatcmpl-test");
	relay_link_hold(rl, &d1);
	relay_link_hold(rl, &d2);
	struct kpi_request_record j = relayed(3, 195, 300, "", "chatcmpl-test");
	relay_link_inbound(rl, &j);
	CHECK(n_released == 2 && relay_link_stats(rl)->ambiguous == 1, "no guess between two");
	/* headers differ, bodies alike: a different call, not a candidate */
	struct kpi_request_record e1 = relayed(3, 400, 450, "srv-1", "chatcmpl-test");
	relay_link_hold(rl, &e1);
	struct kpi_request_record k2 = relayed(3, 395, 460, "srv-2", "chatcmpl-test");
	relay_link_inbound(rl, &k2);
	CHECK(n_released == 2, "a contradicting header links nothing");
	/* a response that ended before its call did: the call finds it when held */
	struct kpi_request_record m = relayed(3, 600, 700, "req-9", "");
	m.direction = "in";
	relay_link_inbound(rl, &m);
	struct kpi_request_record late = relayed(3, 610, 710, "req-9", "");
	relay_link_hold(rl, &late);
	CHECK(n_released == 3 && !strcmp(released[2].parent_hop_id, m.hop_id), "linked to an earlier response");
	/* another process's response never links */
	struct kpi_request_record f = relayed(4, 800, 900, "req-10", "");
	relay_link_hold(rl, &f);
	struct kpi_request_record g = relayed(3, 790, 910, "req-10", "");
	relay_link_inbound(rl, &g);
	CHECK(n_released == 3, "another process");
	relay_link_expire(rl, UINT64_MAX);
	CHECK(n_released == 7 && !released[4].parent_hop_id[0] && !released[4].link_rule &&
	      relay_link_stats(rl)->expired == 4 && relay_link_stats(rl)->linked == 3, "%d released", n_released);
	relay_link_free(rl);
}

int main(void)
{
	RUN(server_task);
	RUN(cli_tasks);
	RUN(escalations);
	RUN(response_id_rule);
	return CHECK_DONE();
}
