/* trace_agents.h - what schema version 11 adds for the tools: reasoning per
 * request (TTFO, reasoning time and events), agent tasks (the trajectories
 * view's rows and their steps) and model cascades (escalations), read on a
 * connection of its own (schema/011_tasks.sql, docs/schema.md). */
#ifndef KPI_TRACE_AGENTS_H
#define KPI_TRACE_AGENTS_H

#include <stdint.h>
#include "tools/common/trace.h"

#define TRACE_TASK_STEPS 12     /* step names a window keeps; more go to the last */

struct trace_agents;

/* A reader of t's tasks and cascades; NULL with the reason in err when the
 * trace has none (written before schema version 11). */
struct trace_agents *trace_agents_open(struct trace *t, char *err, size_t errlen);
void trace_agents_close(struct trace_agents *a);

/* ---- reasoning ------------------------------------------------------------ */
/* The requests of a window whose answer event is known (ttfo_ns): their
 * count, and of those the ones that reasoned; means (ns) over them. A
 * reasoning request's TTFO = TTFT + the wait to its first reasoning event's
 * answer, so TTFO's growth splits into the first event's (TTFT: the server)
 * and the reasoning's; the reasoning's into more reasoning events (the model
 * thought longer) and a slower pace per event (the server again). */
struct trace_reasoning {
	int n, reasoning;
	double ttft_mean, ttfo_mean, ttfo_p99;
	double reasoning_mean;          /* reasoning_ns, over the requests that reasoned */
	double events_mean;             /* reasoning events a reasoning request */
	double pace_mean;               /* reasoning_ns / reasoning events, summed over them */
};
int trace_agents_reasoning(struct trace_agents *a, int64_t from_ns, int64_t to_ns,
			   struct trace_reasoning *out);

/* ---- tasks ----------------------------------------------------------------- */
/* One task as the trajectories view has it (times ns; cost -1 unknown). */
struct trace_task {
	char id[64], comm[16], rule[16], mcp_tools[64];
	int pid;
	int64_t t_start_ns, duration_ns, model_ns, tool_ns, agent_ns;
	int model_calls, tool_calls, mcp_calls, retries, errors, success, http_status;
	int64_t prompt_tokens, output_tokens;
	double cost_usd;
};
/* Tasks that started before to_ns, newest first: how many (<= max), or -1. */
int trace_agents_tasks(struct trace_agents *a, int64_t to_ns, struct trace_task *out, int max);

/* A kind of step (a model, a tool): its calls in a window's tasks. */
struct trace_task_step {
	char name[48];                  /* "model NAME", "tool NAME" (the tool's, else the path) */
	int tool;
	int64_t calls, errors, retries;
	int64_t ns;                     /* the calls' summed durations */
};
/* The tasks that started in a window. */
struct trace_tasks_window {
	int tasks, succeeded;
	double duration_mean, duration_p99, model_mean, tool_mean, agent_mean;     /* ns a task */
	int64_t calls[2], errors[2], retries;           /* by kind: [0] model, [1] tool */
	/* the success a task would have if its steps failed independently at
	 * their kind's rate with nothing recovered: the product over kinds of
	 * (1 - errors / calls) ^ (calls a task); -1 without calls */
	double expected_success;
	struct trace_task_step step[TRACE_TASK_STEPS];
	int n_steps;
};
int trace_agents_task_window(struct trace_agents *a, int64_t from_ns, int64_t to_ns,
			     struct trace_tasks_window *w);

/* ---- cascades -------------------------------------------------------------- */
/* The tasks and requests of one process whose first model call went to one
 * model, in a window (by that call's start): how many, how many escalated
 * and to what, what an escalation added (the second answer's end - the
 * first's) and the second model's own time, and the mean cost of each path
 * (the first model alone; both), -1 unknown. */
struct trace_cascade {
	char comm[16], from_model[64], to_model[64];
	int pid, requests, escalated;
	double added_mean, added_p99, to_e2e_mean;
	double cost_first, cost_escalated;
};
/* The window's (process, first model) pairs, by pid then model, those that
 * never escalated included: how many (<= max), or -1. */
int trace_agents_cascades(struct trace_agents *a, int64_t from_ns, int64_t to_ns, struct trace_cascade *out,
			  int max);

#endif
