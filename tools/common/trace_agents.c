/* trace_agents.c - reasoning, tasks and cascades of a trace window, read from
 * requests, tasks, exchanges_out and the view model_call_costs (schema
 * version 11) on a connection of its own; the arithmetic the views leave to
 * their readers (percentiles, the compounded expectation) is done here. */
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "schema/pct.h"
#include "tools/common/trace_agents.h"

struct trace_agents {
	sqlite3 *db;
	sqlite3_stmt *q_reason, *q_tasks, *q_task_win, *q_steps, *q_casc;
	int64_t *scratch;
	size_t cap;
};

/* The first (model) call of each task or request of the window, with its
 * escalation when it had one; costs from the model server's rows. */
static const char casc_sql[] =
	"SELECT f.comm, f.pid, f.model, e.model, e.t_done_ns - f.t_done_ns, e.e2e_ns, f.cost_usd, "
	"e.cost_usd FROM model_call_costs AS f "
	"LEFT JOIN exchanges_out AS x ON x.escalated_from = f.hop_id "
	"LEFT JOIN model_call_costs AS e ON e.hop_id = x.hop_id "
	"WHERE f.task_id IS NOT NULL AND f.t_arrive_ns >= ?1 AND f.t_arrive_ns < ?2 "
	"AND NOT EXISTS (SELECT 1 FROM exchanges_out AS p WHERE p.task_id = f.task_id "
	"AND p.call_kind = 'model' AND p.t_arrive_ns < f.t_arrive_ns) ORDER BY f.pid, f.model";

static const char tasks_sql[] =
	"SELECT k.task_id, k.comm, k.rule, k.pid, k.t_start_ns, k.duration_ns, k.model_ns, k.tool_ns, "
	"k.agent_ns, k.model_calls, k.tool_calls, k.mcp_calls, k.retries, k.errors, k.success, k.http_status, "
	"(SELECT SUM(prompt_tokens) FROM model_call_costs AS m WHERE m.task_id = k.task_id), "
	"(SELECT SUM(output_tokens) FROM model_call_costs AS m WHERE m.task_id = k.task_id), "
	"(SELECT SUM(cost_usd) FROM model_call_costs AS m WHERE m.task_id = k.task_id), "
	"(SELECT GROUP_CONCAT(tool_name, ',') FROM (SELECT tool_name FROM exchanges_out AS o "
	" WHERE o.task_id = k.task_id AND o.rpc_method = 'tools/call' ORDER BY o.t_arrive_ns)) "
	"FROM tasks AS k WHERE k.t_start_ns < ?1 ORDER BY k.t_start_ns DESC LIMIT ?2";

struct trace_agents *trace_agents_open(struct trace *t, char *err, size_t errlen)
{
	struct trace_agents *a = calloc(1, sizeof(*a));

	if (!a)
		abort();
	if (sqlite3_open_v2(trace_path(t), &a->db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "cannot open %s for its tasks: %s", trace_path(t),
			 a->db ? sqlite3_errmsg(a->db) : "out of memory");
		trace_agents_close(a);
		return NULL;
	}
	sqlite3_busy_timeout(a->db, 1000);
	if (sqlite3_prepare_v2(a->db, "SELECT ttft_ns, ttfo_ns, reasoning_ns, reasoning_events FROM requests "
			       "WHERE t_arrive_ns >= ?1 AND t_arrive_ns < ?2 AND ttfo_ns IS NOT NULL"
			       TRACE_TOP_SQL,
			       -1, &a->q_reason, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(a->db, tasks_sql, -1, &a->q_tasks, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(a->db, "SELECT duration_ns, model_ns, tool_ns, agent_ns, success FROM tasks "
			       "WHERE t_start_ns >= ?1 AND t_start_ns < ?2", -1, &a->q_task_win, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(a->db, "SELECT o.call_kind = 'tool', COALESCE(o.tool_name, "
			       "CASE WHEN o.call_kind = 'model' THEN o.model END, o.path), o.e2e_ns, o.call_error, "
			       "o.retry FROM tasks AS k JOIN exchanges_out AS o ON o.task_id = k.task_id "
			       "WHERE k.t_start_ns >= ?1 AND k.t_start_ns < ?2", -1, &a->q_steps, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(a->db, casc_sql, -1, &a->q_casc, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "%s: no tasks (%s): a trace written before schema version 11 has "
			 "neither reasoning, tasks nor cascades", trace_path(t), sqlite3_errmsg(a->db));
		trace_agents_close(a);
		return NULL;
	}
	return a;
}

void trace_agents_close(struct trace_agents *a)
{
	if (!a)
		return;
	sqlite3_finalize(a->q_reason);
	sqlite3_finalize(a->q_tasks);
	sqlite3_finalize(a->q_task_win);
	sqlite3_finalize(a->q_steps);
	sqlite3_finalize(a->q_casc);
	sqlite3_close(a->db);
	free(a->scratch);
	free(a);
}

static void bind_window(sqlite3_stmt *q, int64_t from_ns, int64_t to_ns)
{
	sqlite3_reset(q);
	sqlite3_bind_int64(q, 1, from_ns);
	sqlite3_bind_int64(q, 2, to_ns);
}

static int done(sqlite3_stmt *q, int rc)
{
	sqlite3_reset(q);       /* a statement left stepping holds its snapshot */
	return rc == SQLITE_DONE ? 0 : -1;
}

/* Room for n values in the scratch array the percentiles sort. */
static int scratch_push(struct trace_agents *a, size_t n, int64_t v)
{
	if (n == a->cap) {
		size_t cap = a->cap ? 2 * a->cap : 1024;
		int64_t *p = realloc(a->scratch, cap * sizeof(*p));
		if (!p)
			return -1;
		a->scratch = p;
		a->cap = cap;
	}
	a->scratch[n] = v;
	return 0;
}

static int64_t col_i64(sqlite3_stmt *q, int i, int64_t null)
{
	return sqlite3_column_type(q, i) == SQLITE_NULL ? null : sqlite3_column_int64(q, i);
}

static void col_text(sqlite3_stmt *q, int i, char *out, size_t len)
{
	const unsigned char *s = sqlite3_column_text(q, i);
	snprintf(out, len, "%s", s ? (const char *)s : "");
}

int trace_agents_reasoning(struct trace_agents *a, int64_t from_ns, int64_t to_ns, struct trace_reasoning *out)
{
	double ttft = 0, ttfo = 0, rns = 0, ev = 0;
	size_t n = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	bind_window(a->q_reason, from_ns, to_ns);
	while ((rc = sqlite3_step(a->q_reason)) == SQLITE_ROW) {
		int64_t o = sqlite3_column_int64(a->q_reason, 1);
		if (scratch_push(a, n++, o))
			return done(a->q_reason, SQLITE_NOMEM);
		ttft += (double)col_i64(a->q_reason, 0, o);
		ttfo += (double)o;
		int64_t r = col_i64(a->q_reason, 2, -1), e = col_i64(a->q_reason, 3, 0);
		if (r >= 0 && e > 0) {
			out->reasoning++;
			rns += (double)r;
			ev += (double)e;
		}
	}
	if (done(a->q_reason, rc))
		return -1;
	out->n = (int)n;
	if (n) {
		out->ttft_mean = ttft / (double)n;
		out->ttfo_mean = ttfo / (double)n;
		out->ttfo_p99 = pct_select_i64(a->scratch, n, 99);
	}
	if (out->reasoning) {
		out->reasoning_mean = rns / out->reasoning;
		out->events_mean = ev / out->reasoning;
		out->pace_mean = rns / ev;
	}
	return 0;
}

int trace_agents_tasks(struct trace_agents *a, int64_t to_ns, struct trace_task *out, int max)
{
	sqlite3_stmt *q = a->q_tasks;
	int n = 0, rc;

	sqlite3_reset(q);
	sqlite3_bind_int64(q, 1, to_ns);
	sqlite3_bind_int(q, 2, max);
	while (n < max && (rc = sqlite3_step(q)) == SQLITE_ROW) {
		struct trace_task *k = &out[n++];
		memset(k, 0, sizeof(*k));
		col_text(q, 0, k->id, sizeof(k->id));
		col_text(q, 1, k->comm, sizeof(k->comm));
		col_text(q, 2, k->rule, sizeof(k->rule));
		k->pid = sqlite3_column_int(q, 3);
		k->t_start_ns = sqlite3_column_int64(q, 4);
		k->duration_ns = sqlite3_column_int64(q, 5);
		k->model_ns = sqlite3_column_int64(q, 6);
		k->tool_ns = sqlite3_column_int64(q, 7);
		k->agent_ns = sqlite3_column_int64(q, 8);
		k->model_calls = sqlite3_column_int(q, 9);
		k->tool_calls = sqlite3_column_int(q, 10);
		k->mcp_calls = sqlite3_column_int(q, 11);
		k->retries = sqlite3_column_int(q, 12);
		k->errors = sqlite3_column_int(q, 13);
		k->success = sqlite3_column_int(q, 14);
		k->http_status = (int)col_i64(q, 15, 0);
		k->prompt_tokens = col_i64(q, 16, -1);
		k->output_tokens = col_i64(q, 17, -1);
		k->cost_usd = sqlite3_column_type(q, 18) == SQLITE_NULL ? -1 : sqlite3_column_double(q, 18);
		col_text(q, 19, k->mcp_tools, sizeof(k->mcp_tools));
	}
	if (n == max)
		rc = SQLITE_DONE;
	return done(q, rc) ? -1 : n;
}

/* The step named name of kind tool in w, added when new; the last holds
 * what does not fit. */
static struct trace_task_step *step_of(struct trace_tasks_window *w, int tool, const char *name)
{
	char full[48];

	snprintf(full, sizeof(full), "%s %s", tool ? "tool" : "model", name[0] ? name : "?");
	for (int k = 0; k < w->n_steps; k++)
		if (!strcmp(w->step[k].name, full))
			return &w->step[k];
	if (w->n_steps == TRACE_TASK_STEPS - 1)
		snprintf(w->step[w->n_steps++].name, sizeof(w->step[0].name), "other steps");
	if (w->n_steps == TRACE_TASK_STEPS)
		return &w->step[TRACE_TASK_STEPS - 1];
	struct trace_task_step *s = &w->step[w->n_steps++];
	snprintf(s->name, sizeof(s->name), "%s", full);
	s->tool = tool;
	return s;
}

int trace_agents_task_window(struct trace_agents *a, int64_t from_ns, int64_t to_ns,
			     struct trace_tasks_window *w)
{
	double dur = 0, model = 0, tool = 0, agent = 0;
	size_t n = 0;
	int rc;

	memset(w, 0, sizeof(*w));
	w->expected_success = -1;
	bind_window(a->q_task_win, from_ns, to_ns);
	while ((rc = sqlite3_step(a->q_task_win)) == SQLITE_ROW) {
		int64_t d = sqlite3_column_int64(a->q_task_win, 0);
		if (scratch_push(a, n++, d))
			return done(a->q_task_win, SQLITE_NOMEM);
		dur += (double)d;
		model += (double)sqlite3_column_int64(a->q_task_win, 1);
		tool += (double)sqlite3_column_int64(a->q_task_win, 2);
		agent += (double)sqlite3_column_int64(a->q_task_win, 3);
		w->succeeded += sqlite3_column_int(a->q_task_win, 4) != 0;
	}
	if (done(a->q_task_win, rc))
		return -1;
	w->tasks = (int)n;
	if (!n)
		return 0;
	w->duration_mean = dur / (double)n;
	w->model_mean = model / (double)n;
	w->tool_mean = tool / (double)n;
	w->agent_mean = agent / (double)n;
	w->duration_p99 = pct_select_i64(a->scratch, n, 99);
	bind_window(a->q_steps, from_ns, to_ns);
	while ((rc = sqlite3_step(a->q_steps)) == SQLITE_ROW) {
		char name[40];
		int kind = sqlite3_column_int(a->q_steps, 0) ? 1 : 0;
		col_text(a->q_steps, 1, name, sizeof(name));
		struct trace_task_step *s = step_of(w, kind, name);
		int err = sqlite3_column_int(a->q_steps, 3) != 0;
		s->calls++;
		s->errors += err;
		s->retries += sqlite3_column_int(a->q_steps, 4) != 0;
		s->ns += col_i64(a->q_steps, 2, 0);
		w->calls[kind]++;
		w->errors[kind] += err;
		w->retries += sqlite3_column_int(a->q_steps, 4) != 0;
	}
	if (done(a->q_steps, rc))
		return -1;
	if (w->calls[0] + w->calls[1]) {
		w->expected_success = 1;
		for (int k = 0; k < 2; k++)
			if (w->calls[k])
				w->expected_success *= pow(1 - (double)w->errors[k] / (double)w->calls[k],
							   (double)w->calls[k] / (double)w->tasks);
	}
	return 0;
}

/* Ends c: its escalations' added-latency p99 from the scratch's first k values. */
static void cascade_close(struct trace_agents *a, struct trace_cascade *c, size_t k, double added, double to_e2e,
			  double cf, int ncf, double ce, int nce)
{
	if (c->escalated) {
		c->added_mean = added / c->escalated;
		c->to_e2e_mean = to_e2e / c->escalated;
		c->added_p99 = pct_select_i64(a->scratch, k, 99);
	}
	c->cost_first = ncf ? cf / ncf : -1;
	c->cost_escalated = nce ? ce / nce : -1;
}

int trace_agents_cascades(struct trace_agents *a, int64_t from_ns, int64_t to_ns, struct trace_cascade *out,
			  int max)
{
	sqlite3_stmt *q = a->q_casc;
	struct trace_cascade *c = NULL;
	double added = 0, to_e2e = 0, cf = 0, ce = 0;
	int n = 0, ncf = 0, nce = 0, rc;
	size_t k = 0;

	bind_window(q, from_ns, to_ns);
	while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
		char comm[16], model[64];
		int pid = sqlite3_column_int(q, 1);
		col_text(q, 0, comm, sizeof(comm));
		col_text(q, 2, model, sizeof(model));
		if (!c || c->pid != pid || strcmp(c->from_model, model)) {
			if (c)
				cascade_close(a, c, k, added, to_e2e, cf, ncf, ce, nce);
			if (n == max)
				break;
			c = &out[n++];
			memset(c, 0, sizeof(*c));
			c->pid = pid;
			memcpy(c->comm, comm, sizeof(comm));
			memcpy(c->from_model, model, sizeof(model));
			added = to_e2e = cf = ce = 0;
			ncf = nce = 0;
			k = 0;
		}
		c->requests++;
		bool esc = sqlite3_column_type(q, 4) != SQLITE_NULL;
		double first_cost = sqlite3_column_type(q, 6) == SQLITE_NULL ? -1 : sqlite3_column_double(q, 6);
		if (esc) {
			c->escalated++;
			col_text(q, 3, c->to_model, sizeof(c->to_model));
			int64_t add = sqlite3_column_int64(q, 4);
			if (scratch_push(a, k++, add))
				return done(q, SQLITE_NOMEM);
			added += (double)add;
			to_e2e += (double)col_i64(q, 5, 0);
			if (first_cost >= 0 && sqlite3_column_type(q, 7) != SQLITE_NULL) {
				ce += first_cost + sqlite3_column_double(q, 7);
				nce++;
			}
		} else if (first_cost >= 0) {
			cf += first_cost;
			ncf++;
		}
	}
	if (c)
		cascade_close(a, c, k, added, to_e2e, cf, ncf, ce, nce);
	if (n == max && rc == SQLITE_ROW)
		rc = SQLITE_DONE;
	return done(q, rc) ? -1 : n;
}
