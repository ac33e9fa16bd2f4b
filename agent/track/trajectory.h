/* trajectory.h - agent tasks: the calls a process made for one inbound
 * request (or, for a process that serves nothing, under one W3C trace id, one
 * gen_ai.conversation.id, or between idle gaps), each call's kind, retry,
 * error and escalation, and each task's critical path split into model
 * calls, tool calls and the agent's own work (docs/agent.md, Tasks; schema
 * 011). Fed the HTTP path's records before they are written. */
#ifndef KPI_TRAJECTORY_H
#define KPI_TRAJECTORY_H

#include <stdint.h>
#include "agent/record.h"

#define TRAJ_ID_IDLE_NS   (30ULL * 1000000000ULL)       /* a trace or conversation id's task ends this idle */
#define TRAJ_ORPHAN_NS    (600ULL * 1000000000ULL)      /* calls whose inbound request never came: dropped */
#define TRAJ_IDLE_GAP_NS  (2ULL * 1000000000ULL)        /* --task-idle-gap's default */
#define TRAJ_MAX_CALLS    4096                          /* calls a task keeps for its critical path */

struct trajectory;

/* on_task gets each task as it ends; idle_gap_ns: a process that serves
 * nothing and makes calls without ids starts a new task after a pause this
 * long (--task-idle-gap). */
struct trajectory *trajectory_new(void (*on_task)(void *ctx, const struct kpi_task_record *k), void *ctx,
				  uint64_t idle_gap_ns);
void trajectory_free(struct trajectory *tj);

/* An outbound exchange's record (direction out), about to be written: its
 * task (task_id), kind, retry, error and escalation are filled in, and the
 * call is kept for its task. serves: its process serves requests (a call of
 * a server that no rule linked belongs to no task). */
void trajectory_call(struct trajectory *tj, struct kpi_request_record *rec, bool serves);
/* An inbound request's record of an HTTP-mode target, about to be written:
 * when its process's calls for it make a task (two model calls, or a model
 * and a tool call), rec->task_id is set and the task goes to on_task. */
void trajectory_inbound(struct trajectory *tj, struct kpi_request_record *rec);
/* Ends the tasks of processes that serve nothing that went idle before now,
 * and drops calls whose inbound request never came. */
void trajectory_expire(struct trajectory *tj, uint64_t now);
/* The process exited, or (pid 0) the agent stops: its tasks end. */
void trajectory_forget_pid(struct trajectory *tj, uint32_t pid);

/* What the tasks came to. */
struct trajectory_stats {
	uint64_t tasks[4];              /* by rule: inbound, traceparent, conversation, idle_gap */
	uint64_t escalations;
};
const struct trajectory_stats *trajectory_stats(const struct trajectory *tj);
/* --task-idle-gap. */
void trajectory_set_idle_gap(struct trajectory *tj, uint64_t ns);

/* "model" for a call to an inference endpoint (…/completions, …/responses,
 * …/messages, …/generate, /api/chat, …/embeddings), or one whose request named
 * a model and whose response had usage or streamed content; "tool" else. */
const char *trajectory_call_kind(const struct kpi_request_record *rec);

#endif
