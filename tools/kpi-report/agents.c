/* agents.c - kpi-report's reasoning, agent tasks and model cascades (schema
 * version 11): both windows' figures, the findings that tell the model's own
 * doing (it reasoned longer, escalated more) from the server's (slower per
 * token, a slower escalated model), the task step that grew, and the section
 * that shows them. All data through tools/common/trace_agents.h. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "tools/kpi-report/report.h"

#define MIN_ROWS 5              /* requests (tasks) a window needs before it is compared */

static char *D(char *b, double ns) { return timefmt_dur(b, 16, ns); }

void report_agents_analyze(struct report *r)
{
	struct rp_agents *g = &r->ag;
	struct trace_agents *a = trace_agents_open(r->t, g->why, sizeof(g->why));
	const struct rp_window *w[2] = { &r->base, &r->inc };

	g->have = 0;
	if (!a)
		return;
	for (int k = r->compare ? 0 : 1; k < 2; k++) {
		if (trace_agents_reasoning(a, w[k]->from_ns, w[k]->to_ns, &g->reason[k]) ||
		    trace_agents_task_window(a, w[k]->from_ns, w[k]->to_ns, &g->tasks[k]) ||
		    (g->ncasc[k] = trace_agents_cascades(a, w[k]->from_ns, w[k]->to_ns, g->casc[k], RP_CASCADES)) < 0) {
			snprintf(g->why, sizeof(g->why), "reading the tasks and cascades failed");
			trace_agents_close(a);
			return;
		}
	}
	g->have = 1;
	trace_agents_close(a);
}

/* ---- findings ------------------------------------------------------------- */

/* TTFO grew: how much of it the model's longer reasoning explains (more
 * reasoning events at the baseline's pace) and how much the server (its
 * first token later, each event slower). The larger names the finding. */
static void reasoning_finding(struct report *r)
{
	const struct trace_reasoning *b = &r->ag.reason[0], *i = &r->ag.reason[1];
	char s1[16], s2[16], s3[16], s4[16], s5[16], s6[16];
	struct rp_finding *f;

	if (b->n < MIN_ROWS || i->n < MIN_ROWS || !(i->ttfo_mean > 1.1 * b->ttfo_mean))
		return;
	/* reasoning events a request, over every request with an answer */
	double eb = b->reasoning ? b->events_mean * b->reasoning / b->n : 0;
	double ei = i->reasoning ? i->events_mean * i->reasoning / i->n : 0;
	double pb = b->reasoning ? b->pace_mean : i->pace_mean, pi = i->reasoning ? i->pace_mean : pb;
	double thought = (ei - eb) * pb;                        /* the model reasoned longer */
	double server = (i->ttft_mean - b->ttft_mean) + ei * (pi - pb);  /* first token, pace */
	double grew = i->ttfo_mean - b->ttfo_mean;
	if (thought > server && thought > 0.3 * grew) {
		if (!(f = rp_add_finding(r, "reasoning grew", "reasoning", 2 + fmin(thought / grew, 1), 7)))
			return;
		snprintf(f->title, sizeof(f->title), "Reasoning grew: the model thought longer before it answered "
			 "(%.1f → %.1f reasoning events a request), not the server", eb, ei);
		snprintf(f->evidence, sizeof(f->evidence), "mean time to first output (TTFO) %s (baseline %s); the "
			 "longer reasoning at the baseline's pace explains %.0f%% of its growth; TTFT (the first "
			 "token of any kind) %s (baseline %s), time per reasoning event %s (baseline %s); %d of %d "
			 "requests reasoned (baseline %d of %d)", D(s1, i->ttfo_mean), D(s2, b->ttfo_mean),
			 fmin(thought / grew, 1) * 100, D(s3, i->ttft_mean), D(s4, b->ttft_mean),
			 D(s5, pi), D(s6, pb), i->reasoning, i->n, b->reasoning, b->n);
		snprintf(f->action, sizeof(f->action), "the prompts or the model's reasoning effort changed: "
			 "cap the reasoning (a reasoning budget, max_tokens) or route easy requests to a model "
			 "that thinks less; the server is not slower");
	} else if (server > 0) {
		if (!(f = rp_add_finding(r, "server slower", "reasoning", 1.5 + fmin(server / grew, 1), 7)))
			return;
		snprintf(f->title, sizeof(f->title), "The server was slower: time to first output grew with "
			 "the reasoning as long as before (%.1f → %.1f events a request)", eb, ei);
		snprintf(f->evidence, sizeof(f->evidence), "mean TTFO %s (baseline %s); TTFT %s (baseline %s), "
			 "time per reasoning event %s (baseline %s): %.0f%% of the growth is the server's",
			 D(s1, i->ttfo_mean), D(s2, b->ttfo_mean), D(s3, i->ttft_mean), D(s4, b->ttft_mean),
			 D(s5, pi), D(s6, pb), fmin(server / grew, 1) * 100);
		snprintf(f->action, sizeof(f->action), "the model server slowed down per token: see its queue, "
			 "prefill and decode above");
	}
}

static const struct trace_cascade *cascade_pair(const struct trace_cascade *v, int n,
						const struct trace_cascade *like)
{
	for (int k = 0; k < n; k++)
		if (v[k].pid == like->pid && !strcmp(v[k].from_model, like->from_model))
			return &v[k];
	return NULL;
}

/* A cascade's added latency per request grew: from escalating more often at
 * the baseline's cost per escalation, or from each escalation costing more
 * (the escalated model slower). */
static void cascade_finding(struct report *r)
{
	const struct rp_agents *g = &r->ag;
	char s1[16], s2[16], s3[16], s4[16], s5[16];
	struct rp_finding *f;

	for (int k = 0; k < g->ncasc[1]; k++) {
		const struct trace_cascade *i = &g->casc[1][k], *b = cascade_pair(g->casc[0], g->ncasc[0], i);
		if (!b || b->requests < MIN_ROWS || i->requests < MIN_ROWS || (!b->escalated && !i->escalated))
			continue;
		double rb = (double)b->escalated / b->requests, ri = (double)i->escalated / i->requests;
		double ab = b->escalated ? b->added_mean : i->added_mean, ai = i->escalated ? i->added_mean : ab;
		double rose = (ri - rb) * ab, slower = ri * (ai - ab), grew = ri * ai - rb * ab;
		const char *to = i->to_model[0] ? i->to_model : b->to_model;
		if (!(grew > 0) || grew < 0.05 * (rb * ab + 1))
			continue;
		if (rose >= slower) {
			if (!(f = rp_add_finding(r, "escalations rose", "cascade", 2 + fmin(rose / grew, 1), 8)))
				return;
			snprintf(f->title, sizeof(f->title), "Escalations rose: %.0f%% of %s's requests to %s went on "
				 "to %s (baseline %.0f%%), not a slower %s", ri * 100, i->comm, i->from_model, to,
				 rb * 100, to);
			snprintf(f->evidence, sizeof(f->evidence), "%d of %d escalated (baseline %d of %d); an "
				 "escalation added %s (baseline %s), p99 %s; %s's own time %s (baseline %s); more "
				 "escalations explain %.0f%% of the added latency per request", i->escalated,
				 i->requests, b->escalated, b->requests, D(s1, ai), D(s2, ab), D(s3, i->added_p99), to,
				 D(s4, i->to_e2e_mean), D(s5, b->escalated ? b->to_e2e_mean : i->to_e2e_mean),
				 fmin(rose / grew, 1) * 100);
			snprintf(f->action, sizeof(f->action), "the first model (%s) answered worse or its "
				 "traffic got harder: look at what the gateway escalates on, and the cost of each path "
				 "below", i->from_model);
		} else {
			if (!(f = rp_add_finding(r, "escalated model slower", "cascade", 2 + fmin(slower / grew, 1), 8)))
				return;
			snprintf(f->title, sizeof(f->title), "The escalated model got slower: an escalation from %s "
				 "to %s added %s (baseline %s), at about the same rate (%.0f%%, baseline %.0f%%)",
				 i->from_model, to, D(s1, ai), D(s2, ab), ri * 100, rb * 100);
			snprintf(f->evidence, sizeof(f->evidence), "%s's own time %s (baseline %s); p99 added %s; "
				 "the slower escalations explain %.0f%% of the added latency per request",
				 to, D(s3, i->to_e2e_mean), D(s4, b->escalated ? b->to_e2e_mean : i->to_e2e_mean),
				 D(s1, i->added_p99), fmin(slower / grew, 1) * 100);
			snprintf(f->action, sizeof(f->action), "look at %s's server (its queue, prefill, decode), "
				 "not at the gateway", to);
		}
	}
}

/* Tasks took longer: the step (a model, a tool) whose time a task grew most,
 * or the agent's own work. */
static void task_finding(struct report *r)
{
	const struct trace_tasks_window *b = &r->ag.tasks[0], *i = &r->ag.tasks[1];
	char s[10][16];
	struct rp_finding *f;

	if (b->tasks < MIN_ROWS || i->tasks < MIN_ROWS || !(i->duration_mean > 1.1 * b->duration_mean))
		return;
	double grew = i->duration_mean - b->duration_mean, best = i->agent_mean - b->agent_mean;
	const char *name = "the agent's own work";
	double bv = b->agent_mean, iv = i->agent_mean;
	for (int k = 0; k < i->n_steps; k++) {
		const struct trace_task_step *s = &i->step[k], *o = NULL;
		for (int j = 0; j < b->n_steps; j++)
			if (!strcmp(b->step[j].name, s->name))
				o = &b->step[j];
		double now = (double)s->ns / i->tasks, was = o ? (double)o->ns / b->tasks : 0;
		if (now - was > best) {
			best = now - was;
			name = s->name;
			bv = was;
			iv = now;
		}
	}
	if (!(best > 0) || !(f = rp_add_finding(r, "task step grew", "task", 4 + fmin(best / grew, 1), 9)))
		return;
	snprintf(f->title, sizeof(f->title), "Tasks slowed: %s grew, %.0f%% of the growth of a task", name,
		 fmin(best / grew, 1) * 100);
	snprintf(f->evidence, sizeof(f->evidence), "%d tasks (baseline %d), mean %s (baseline %s); %s took %s a "
		 "task (baseline %s); on the critical path: model calls %s, tool calls %s, the agent's own work "
		 "%s (baseline %s, %s, %s)", i->tasks, b->tasks, D(s[0], i->duration_mean), D(s[1], b->duration_mean),
		 name, D(s[2], iv), D(s[3], bv), D(s[4], i->model_mean), D(s[5], i->tool_mean), D(s[6], i->agent_mean),
		 D(s[7], b->model_mean), D(s[8], b->tool_mean), D(s[9], b->agent_mean));
	snprintf(f->action, sizeof(f->action), "%s", !strncmp(name, "tool", 4) ? "look at that tool's service "
		 "and its retries (the tasks section below)" : !strncmp(name, "model", 5) ? "look at that model "
		 "server's own findings, or the agent asking it more" : "profile the agent process: its own "
		 "work between calls grew");
}

void report_agents_findings(struct report *r)
{
	if (!r->ag.have || !r->compare)
		return;
	reasoning_finding(r);
	cascade_finding(r);
	task_finding(r);
}

/* ---- the section ---------------------------------------------------------- */

static void cell_dur(char *b, size_t n, double ns, int have)
{
	if (have) timefmt_dur(b, n, ns);
	else snprintf(b, n, "-");
}

static void cell_num(char *b, size_t n, const char *fmt, double v, int have)
{
	if (have) snprintf(b, n, fmt, v);
	else snprintf(b, n, "-");
}

static void section(FILE *o, int html, const char *title, const char *note)
{
	if (html) fprintf(o, "<h3>%s</h3>\n<p>%s</p>\n", title, note);
	else fprintf(o, "\n### %s\n\n%s\n\n", title, note);
}

static void table_end(FILE *o, int html)
{
	if (html) fprintf(o, "</table>\n");
}

static void reasoning_rows(const struct report *r, FILE *o, int html)
{
	const struct trace_reasoning *v[2] = { &r->ag.reason[0], &r->ag.reason[1] };
	char b[2][32];
	section(o, html, "Reasoning", "Requests whose answer event is known (event streams traced from their "
		"HTTP exchange). TTFT is the first token of any kind, TTFO the first of the answer; the "
		"reasoning runs from the first reasoning event to the first answer event.");
	rp_table_head(o, html, r->compare);
	for (int row = 0; row < 7; row++) {
		const char *name[] = { "requests with an answer", "of them reasoned", "TTFT mean", "TTFO mean",
				       "TTFO p99", "reasoning events a reasoning request", "time per reasoning event" };
		for (int k = 0; k < 2; k++) {
			const struct trace_reasoning *x = v[k];
			int rs = x->reasoning > 0, any = x->n > 0;
			switch (row) {
			case 0: snprintf(b[k], 32, "%d", x->n); break;
			case 1: snprintf(b[k], 32, "%d", x->reasoning); break;
			case 2: cell_dur(b[k], 32, x->ttft_mean, any); break;
			case 3: cell_dur(b[k], 32, x->ttfo_mean, any); break;
			case 4: cell_dur(b[k], 32, x->ttfo_p99, any); break;
			case 5: cell_num(b[k], 32, "%.1f", x->events_mean, rs); break;
			default: cell_dur(b[k], 32, x->pace_mean, rs); break;
			}
		}
		rp_row(o, html, r->compare, name[row], b[0], b[1]);
	}
	table_end(o, html);
}

static void task_rows(const struct report *r, FILE *o, int html)
{
	const struct trace_tasks_window *v[2] = { &r->ag.tasks[0], &r->ag.tasks[1] };
	char b[2][48], name[64];
	section(o, html, "Agent tasks", "A task: an inbound request whose process made two or more model "
		"calls, or a model and a tool call, or a command-line agent's calls under one trace or "
		"conversation id or between idle gaps (docs/agent.md, Tasks). Step success is 1 - errors / "
		"calls of that kind; the expected task success compounds it over the steps a task takes, as "
		"if nothing failed were retried.");
	rp_table_head(o, html, r->compare);
	for (int row = 0; row < 10; row++) {
		static const char *const names[] = { "tasks", "task success (measured)",
			"task success (expected from the steps)", "model-call success", "tool-call success",
			"retries", "mean duration", "  in model calls", "  in tool calls", "  in the agent's own work" };
		for (int k = 0; k < 2; k++) {
			const struct trace_tasks_window *x = v[k];
			int t = x->tasks > 0;
			switch (row) {
			case 0: snprintf(b[k], 48, "%d", x->tasks); break;
			case 1: cell_num(b[k], 48, "%.0f%%", 100.0 * x->succeeded / (t ? x->tasks : 1), t); break;
			case 2: cell_num(b[k], 48, "%.0f%%", 100 * x->expected_success, x->expected_success >= 0); break;
			case 3: case 4: {
				int kind = row - 3;
				if (x->calls[kind])
					snprintf(b[k], 48, "%.1f%% of %lld", 100.0 * (double)(x->calls[kind] - x->errors[kind]) /
						 (double)x->calls[kind], (long long)x->calls[kind]);
				else
					snprintf(b[k], 48, "-");
				break;
			}
			case 5: snprintf(b[k], 48, "%lld", (long long)x->retries); break;
			case 6: cell_dur(b[k], 48, x->duration_mean, t); break;
			case 7: cell_dur(b[k], 48, x->model_mean, t); break;
			case 8: cell_dur(b[k], 48, x->tool_mean, t); break;
			default: cell_dur(b[k], 48, x->agent_mean, t); break;
			}
		}
		rp_row(o, html, r->compare, names[row], b[0], b[1]);
	}
	/* each step's time a task, calls and errors */
	for (int k = 0; k < v[1]->n_steps; k++) {
		const struct trace_task_step *s = &v[1]->step[k], *p = NULL;
		for (int j = 0; j < v[0]->n_steps; j++)
			if (!strcmp(v[0]->step[j].name, s->name))
				p = &v[0]->step[j];
		char d0[16], d1[16];
		snprintf(name, sizeof(name), "step %s: a task's time (calls, errors)", s->name);
		if (p && v[0]->tasks)
			snprintf(b[0], 48, "%s (%lld, %lld)", D(d0, (double)p->ns / v[0]->tasks), (long long)p->calls,
				 (long long)p->errors);
		else
			snprintf(b[0], 48, "-");
		snprintf(b[1], 48, "%s (%lld, %lld)", D(d1, (double)s->ns / v[1]->tasks), (long long)s->calls,
			 (long long)s->errors);
		rp_row(o, html, r->compare, name, b[0], b[1]);
	}
	table_end(o, html);
}

static void cascade_rows(const struct report *r, FILE *o, int html)
{
	const struct rp_agents *g = &r->ag;
	char b[2][48], name[160];
	section(o, html, "Cascades", "A model call that asked a second, different model the same request "
		"after the first answered is an escalation; what it added is the second answer's end minus "
		"the first's. Cost: the model servers' own rows (kpi-agent --price-per-hour).");
	rp_table_head(o, html, r->compare);
	for (int k = 0; k < g->ncasc[1]; k++) {
		const struct trace_cascade *i = &g->casc[1][k], *p = cascade_pair(g->casc[0], g->ncasc[0], i);
		const struct trace_cascade *v[2] = { p, i };
		if (!i->escalated && (!p || !p->escalated))
			continue;
		for (int row = 0; row < 5; row++) {
			static const char *const what[] = { "escalated", "added by an escalation (mean, p99)",
							     "cost of the first model's path", "cost of the escalated path",
							     "the escalated model's own time" };
			snprintf(name, sizeof(name), "%s %s → %s: %s", i->comm, i->from_model,
				 i->to_model[0] ? i->to_model : p ? p->to_model : "?", what[row]);
			for (int w = 0; w < 2; w++) {
				const struct trace_cascade *x = v[w];
				char d0[16], d1[16];
				if (!x) {
					snprintf(b[w], 48, "-");
					continue;
				}
				switch (row) {
				case 0: snprintf(b[w], 48, "%.0f%% of %d", 100.0 * x->escalated / x->requests, x->requests); break;
				case 1:
					if (x->escalated) snprintf(b[w], 48, "%s, %s", D(d0, x->added_mean), D(d1, x->added_p99));
					else snprintf(b[w], 48, "-");
					break;
				case 2: cell_num(b[w], 48, "$%.3g", x->cost_first, x->cost_first >= 0); break;
				case 3: cell_num(b[w], 48, "$%.3g", x->cost_escalated, x->cost_escalated >= 0); break;
				default: cell_dur(b[w], 48, x->to_e2e_mean, x->escalated > 0); break;
				}
			}
			rp_row(o, html, r->compare, name, b[0], b[1]);
		}
	}
	table_end(o, html);
}

void report_agents_render(const struct report *r, FILE *o, int html)
{
	const struct rp_agents *g = &r->ag;
	int casc = 0;
	if (!g->have)
		return;
	for (int k = 0; k < g->ncasc[1]; k++)
		casc += g->casc[1][k].escalated;
	for (int k = 0; k < g->ncasc[0]; k++)
		casc += g->casc[0][k].escalated;
	if (!g->reason[0].reasoning && !g->reason[1].reasoning && !g->tasks[0].tasks && !g->tasks[1].tasks && !casc)
		return;
	if (html) fprintf(o, "<h2>Reasoning, agent tasks and cascades</h2>\n");
	else fprintf(o, "\n## Reasoning, agent tasks and cascades\n");
	if (g->reason[0].reasoning || g->reason[1].reasoning)
		reasoning_rows(r, o, html);
	if (g->tasks[0].tasks || g->tasks[1].tasks)
		task_rows(r, o, html);
	if (casc)
		cascade_rows(r, o, html);
}
