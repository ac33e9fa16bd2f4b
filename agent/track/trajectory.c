/* trajectory.c - agent tasks: calls grouped by the inbound request they
 * served (or, for a process that serves nothing, by trace id, conversation
 * id or idleness), each call's kind, retry, error and escalation decided as
 * it is written, and each task's critical path swept when it ends. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include "trajectory.h"

#define RETRY_KEYS 16           /* distinct (peer, method, path, tool) a task remembers */

enum { K_MODEL, K_TOOL };

struct tcall {
	uint64_t t0, t1;
	int kind;
};

/* A call's target, and whether its last try failed. */
struct rkey {
	uint64_t key;
	bool failed;
};

struct task {
	UT_hash_handle hh;
	char key[96];                   /* "in:HOP", "tp:PID:TRACE", "cv:PID:CONV", "idle:PID" */
	char task_id[KPI_REQID_LEN];
	char request_id[KPI_REQID_LEN]; /* the trace or conversation id */
	char comm[16];
	uint32_t pid;
	const char *rule;
	uint64_t t_first, t_last;       /* the first call's start, the latest call end */
	uint64_t last_t0;               /* the latest call start */
	bool last_failed;               /* ... whether that call failed */
	int model_calls, tool_calls, mcp_calls, retries, errors;
	struct tcall *calls;
	uint32_t n, cap;
	struct rkey rk[RETRY_KEYS];
	int nrk;
	/* the last model call, which a second model may escalate */
	bool m_have, m_answered, m_digest_ok;
	char m_hop[32], m_model[64], m_peer[48];
	uint64_t m_done, m_digest;
};

struct trajectory {
	struct task *tasks;
	struct trajectory_stats st;
	void (*on_task)(void *ctx, const struct kpi_task_record *k);
	void *ctx;
	uint64_t idle_gap;
};

struct trajectory *trajectory_new(void (*on_task)(void *ctx, const struct kpi_task_record *k), void *ctx,
				  uint64_t idle_gap_ns)
{
	struct trajectory *tj = calloc(1, sizeof(*tj));

	if (tj) {
		tj->on_task = on_task;
		tj->ctx = ctx;
		tj->idle_gap = idle_gap_ns ? idle_gap_ns : TRAJ_IDLE_GAP_NS;
	}
	return tj;
}

static void task_free(struct trajectory *tj, struct task *k)
{
	HASH_DEL(tj->tasks, k);
	free(k->calls);
	free(k);
}

void trajectory_free(struct trajectory *tj)
{
	struct task *k, *tmp;

	if (!tj)
		return;
	HASH_ITER(hh, tj->tasks, k, tmp)
		task_free(tj, k);
	free(tj);
}

static bool ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), k = strlen(tail);

	return n >= k && !strcmp(s + n - k, tail);
}

const char *trajectory_call_kind(const struct kpi_request_record *rec)
{
	static const char *const paths[] = { "/completions", "/responses", "/messages", "/generate",
					     "/api/chat", "/embeddings", "/embed" };

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
		if (ends_with(rec->path, paths[i]))
			return "model";
	if (rec->model[0] && (rec->prompt_tokens != KPI_NULL || rec->output_tokens != KPI_NULL ||
			      (rec->content_events != KPI_NULL && rec->content_events > 0)))
		return "model";
	return "tool";
}

/* The critical path of k over [s, e]: at each instant in a model call if one
 * is open, else in a tool call if one is, else the agent's own work. */
struct cmark {
	uint64_t t;
	int kind, delta;
};

static int cmp_mark(const void *a, const void *b)
{
	const struct cmark *x = a, *y = b;

	return x->t < y->t ? -1 : x->t > y->t;
}

static void critical_path(const struct task *k, uint64_t s, uint64_t e, int64_t *model, int64_t *tool,
			  int64_t *agent)
{
	struct cmark *m = malloc(sizeof(*m) * 2 * (k->n ? k->n : 1));
	size_t n = 0;
	int open[2] = { 0, 0 };
	uint64_t prev = s;

	*model = *tool = *agent = 0;
	if (!m) {
		*agent = (int64_t)(e - s);
		return;
	}
	for (uint32_t i = 0; i < k->n; i++) {
		uint64_t a = k->calls[i].t0 > s ? k->calls[i].t0 : s, b = k->calls[i].t1 < e ? k->calls[i].t1 : e;
		if (a >= b)
			continue;
		m[n++] = (struct cmark){ a, k->calls[i].kind, 1 };
		m[n++] = (struct cmark){ b, k->calls[i].kind, -1 };
	}
	qsort(m, n, sizeof(*m), cmp_mark);
	for (size_t i = 0; i < n; i++) {
		int64_t d = (int64_t)(m[i].t - prev);
		*(open[K_MODEL] ? model : open[K_TOOL] ? tool : agent) += d;
		prev = m[i].t;
		open[m[i].kind] += m[i].delta;
	}
	*agent += (int64_t)(e - prev);
	free(m);
}

/* A task of two model calls, or a model and a tool call, goes out. */
static void task_end(struct trajectory *tj, struct task *k, uint64_t s, uint64_t e, bool success,
		     int64_t status, const char *hop_id)
{
	struct kpi_task_record r;

	if (!(k->model_calls >= 2 || (k->model_calls >= 1 && k->tool_calls >= 1)) || !tj->on_task || e < s)
		return;
	memset(&r, 0, sizeof(r));
	memcpy(r.task_id, k->task_id, sizeof(r.task_id));
	memcpy(r.request_id, k->request_id, sizeof(r.request_id));
	memcpy(r.comm, k->comm, sizeof(r.comm));
	snprintf(r.hop_id, sizeof(r.hop_id), "%s", hop_id ? hop_id : "");
	r.pid = k->pid;
	r.rule = k->rule;
	r.t_start = (int64_t)s;
	r.t_end = (int64_t)e;
	r.duration = (int64_t)(e - s);
	r.model_calls = k->model_calls;
	r.tool_calls = k->tool_calls;
	r.mcp_calls = k->mcp_calls;
	r.retries = k->retries;
	r.errors = k->errors;
	r.success = success;
	r.http_status = status;
	critical_path(k, s, e, &r.model_ns, &r.tool_ns, &r.agent_ns);
	static const char *const rules[4] = { "inbound", "traceparent", "conversation", "idle_gap" };
	for (int i = 0; i < 4; i++)
		tj->st.tasks[i] += !strcmp(k->rule, rules[i]);
	tj->on_task(tj->ctx, &r);
}

/* A task of a process that serves nothing ends: its span is its calls'. */
static void task_end_calls(struct trajectory *tj, struct task *k)
{
	task_end(tj, k, k->t_first, k->t_last, !k->last_failed, KPI_NULL, NULL);
	task_free(tj, k);
}

static struct task *task_get(struct trajectory *tj, const char *key, const struct kpi_request_record *rec,
			     const char *rule, const char *id)
{
	struct task *k;

	HASH_FIND_STR(tj->tasks, key, k);
	if (k)
		return k;
	if (!(k = calloc(1, sizeof(*k))))
		return NULL;
	snprintf(k->key, sizeof(k->key), "%s", key);
	snprintf(k->task_id, sizeof(k->task_id), "%s", id);
	snprintf(k->request_id, sizeof(k->request_id), "%s", strcmp(rule, "inbound") && strcmp(rule, "idle_gap")
		 ? id : "");
	memcpy(k->comm, rec->comm, sizeof(k->comm));
	k->pid = rec->pid;
	k->rule = rule;
	k->t_first = (uint64_t)rec->t_arrive;
	HASH_ADD_STR(tj->tasks, key, k);
	return k;
}

/* The call's retry key: where it went and what it asked. */
static uint64_t call_key(const struct kpi_request_record *rec)
{
	const char *parts[4] = { rec->sock_peer, rec->method, rec->path, rec->tool_name };
	uint64_t h = 0xcbf29ce484222325ULL;

	for (int i = 0; i < 4; i++) {
		for (const char *p = parts[i]; *p; p++)
			h = (h ^ (uint8_t)*p) * 0x100000001b3ULL;
		h = (h ^ 0xff) * 0x100000001b3ULL;
	}
	return h;
}

/* 1 when this call re-sends one of k whose last try failed. */
static int retry_of(struct task *k, uint64_t key, bool failed)
{
	for (int i = 0; i < k->nrk; i++)
		if (k->rk[i].key == key) {
			int again = k->rk[i].failed;
			k->rk[i].failed = failed;
			return again;
		}
	if (k->nrk < RETRY_KEYS)
		k->rk[k->nrk++] = (struct rkey){ key, failed };
	return 0;
}

/* When the call's answer arrived: its end on the critical path. */
static uint64_t answered(const struct kpi_request_record *rec)
{
	return rec->t_answered > 0 && rec->t_answered != KPI_NULL && rec->t_answered <= rec->t_done ?
	       (uint64_t)rec->t_answered : (uint64_t)rec->t_done;
}

/* A model call that asked another model the same request after k's last
 * model call had answered: that call's hop id into rec->escalated_from, and
 * one more in *escalations. */
static void escalation(struct task *k, struct kpi_request_record *rec, bool failed, uint64_t *escalations)
{
	bool other = rec->model[0] && k->m_model[0] ? strcmp(rec->model, k->m_model) != 0
						    : strcmp(rec->sock_peer, k->m_peer) != 0;
	if (k->m_have && k->m_answered && (uint64_t)rec->t_arrive >= k->m_done && other &&
	    rec->body_digest_ok && k->m_digest_ok && rec->body_digest == k->m_digest) {
		memcpy(rec->escalated_from, k->m_hop, sizeof(rec->escalated_from));
		rec->escalation_added = (int64_t)(answered(rec) - k->m_done);
		(*escalations)++;
	}
	k->m_have = true;
	k->m_answered = !failed;
	k->m_digest_ok = rec->body_digest_ok;
	k->m_digest = rec->body_digest;
	k->m_done = answered(rec);
	memcpy(k->m_hop, rec->hop_id, sizeof(k->m_hop));
	memcpy(k->m_model, rec->model, sizeof(k->m_model));
	memcpy(k->m_peer, rec->sock_peer, sizeof(k->m_peer));
}

void trajectory_call(struct trajectory *tj, struct kpi_request_record *rec, bool serves)
{
	char key[96], id[KPI_REQID_LEN];
	const char *rule;
	struct task *k;
	bool failed = rec->http_status == KPI_NULL || rec->http_status <= 0 || rec->http_status >= 400 ||
		      !rec->end_reason || strcmp(rec->end_reason, "complete") || rec->rpc_error;
	int kind = !strcmp(trajectory_call_kind(rec), "model") ? K_MODEL : K_TOOL;

	rec->call_kind = kind == K_MODEL ? "model" : "tool";
	rec->call_error = failed;
	rec->retry = 0;
	rec->task_id[0] = rec->escalated_from[0] = 0;
	rec->escalation_added = KPI_NULL;
	if (rec->parent_hop_id[0]) {
		rule = "inbound";
		snprintf(key, sizeof(key), "in:%s", rec->parent_hop_id);
		snprintf(id, sizeof(id), "%s", rec->parent_hop_id);
	} else if (serves) {
		return;         /* a server's call no rule tied to a request: no task */
	} else if (rec->trace_ctx[0]) {
		rule = "traceparent";
		snprintf(key, sizeof(key), "tp:%u:%s", rec->pid, rec->trace_ctx);
		snprintf(id, sizeof(id), "%s", rec->trace_ctx);
	} else if (rec->conversation_id[0]) {
		rule = "conversation";
		snprintf(key, sizeof(key), "cv:%u:%s", rec->pid, rec->conversation_id);
		snprintf(id, sizeof(id), "%s", rec->conversation_id);
	} else {
		rule = "idle_gap";
		snprintf(key, sizeof(key), "idle:%u", rec->pid);
		HASH_FIND_STR(tj->tasks, key, k);
		if (k && (uint64_t)rec->t_arrive > k->t_last + tj->idle_gap)
			task_end_calls(tj, k);  /* a pause that long: the next task */
		snprintf(id, sizeof(id), "idle-%u-%lld", rec->pid, (long long)rec->t_arrive);
	}
	if (!(k = task_get(tj, key, rec, rule, id)))
		return;
	memcpy(rec->task_id, k->task_id, sizeof(rec->task_id));
	rec->retry = retry_of(k, call_key(rec), failed);
	if (kind == K_MODEL)
		escalation(k, rec, failed, &tj->st.escalations);
	k->model_calls += kind == K_MODEL;
	k->tool_calls += kind == K_TOOL;
	k->mcp_calls += kind == K_TOOL && !strcmp(rec->rpc_method, "tools/call");
	k->retries += (int)rec->retry;
	k->errors += failed;
	if ((uint64_t)rec->t_arrive < k->t_first)
		k->t_first = (uint64_t)rec->t_arrive;
	if (answered(rec) > k->t_last)
		k->t_last = answered(rec);
	if ((uint64_t)rec->t_arrive >= k->last_t0) {
		k->last_t0 = (uint64_t)rec->t_arrive;
		k->last_failed = failed;
	}
	if (k->n == k->cap && k->cap < TRAJ_MAX_CALLS) {
		uint32_t cap = k->cap ? 2 * k->cap : 16;
		struct tcall *c = realloc(k->calls, cap * sizeof(*c));
		if (c) {
			k->calls = c;
			k->cap = cap;
		}
	}
	if (k->n < k->cap)
		k->calls[k->n++] = (struct tcall){ (uint64_t)rec->t_arrive, answered(rec), kind };
}

void trajectory_inbound(struct trajectory *tj, struct kpi_request_record *rec)
{
	char key[96];
	struct task *k;

	if (!rec->hop_id[0])
		return;
	snprintf(key, sizeof(key), "in:%s", rec->hop_id);
	HASH_FIND_STR(tj->tasks, key, k);
	if (!k)
		return;
	bool success = rec->http_status != KPI_NULL && rec->http_status >= 100 && rec->http_status < 400 &&
		       rec->end_reason && !strcmp(rec->end_reason, "complete");
	if (k->model_calls >= 2 || (k->model_calls >= 1 && k->tool_calls >= 1)) {
		memcpy(rec->task_id, k->task_id, sizeof(rec->task_id));
		snprintf(k->request_id, sizeof(k->request_id), "%s", rec->request_id);
	}
	task_end(tj, k, (uint64_t)rec->t_arrive, (uint64_t)rec->t_done, success, rec->http_status, rec->hop_id);
	task_free(tj, k);
}

void trajectory_expire(struct trajectory *tj, uint64_t now)
{
	struct task *k, *tmp;

	HASH_ITER(hh, tj->tasks, k, tmp) {
		if (!strcmp(k->rule, "inbound")) {
			if (now > k->t_last + TRAJ_ORPHAN_NS)
				task_free(tj, k);
		} else if (now > k->t_last + (strcmp(k->rule, "idle_gap") ? TRAJ_ID_IDLE_NS : tj->idle_gap)) {
			task_end_calls(tj, k);
		}
	}
}

void trajectory_forget_pid(struct trajectory *tj, uint32_t pid)
{
	struct task *k, *tmp;

	HASH_ITER(hh, tj->tasks, k, tmp) {
		if (pid && k->pid != pid)
			continue;
		if (!strcmp(k->rule, "inbound"))
			task_free(tj, k);
		else
			task_end_calls(tj, k);
	}
}

const struct trajectory_stats *trajectory_stats(const struct trajectory *tj)
{
	return &tj->st;
}

void trajectory_set_idle_gap(struct trajectory *tj, uint64_t ns)
{
	if (ns)
		tj->idle_gap = ns;
}
