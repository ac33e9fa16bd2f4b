-- 011_tasks.sql - kpiscope trace store, schema version 11: reasoning per
-- request, agent trajectories per task, the links that need no propagated
-- id, model cascades (docs/agent.md "Reasoning", "Tasks", "Cascades").
-- Applied on top of the previous version in one transaction; the agent sets
-- user_version.

-- Reasoning, per HTTP exchange (source http; NULL for usdt rows and for
-- responses that are not event streams).  The SSE events the agent already
-- classifies are told apart: reasoning (delta.reasoning,
-- delta.reasoning_content, the Responses API's reasoning deltas, inline
-- content from <think> to </think>) and answer (content, text, tool-call
-- arguments, output text).  ttft_ns keeps its meaning (the first content
-- event of any kind); ttfo_ns is the first answer event's (time to first
-- output); reasoning_ns the first reasoning event to the first answer event
-- (NULL without either); ttftc_ns the first tool-call event's (a tool_calls
-- delta, its name included, or a function-call item); the events counted
-- by kind (an event with any answer byte is an answer event, one with
-- reasoning only a reasoning event, so the two add up to content_events);
-- reasoning_tokens usage's completion_tokens_details (output_tokens_details)
-- .reasoning_tokens when the server sent it; reasoning_shape which of
-- 'field' (a reasoning field), 'responses' or 'think' (inline tags) showed it.
-- conversation_id: the request's gen_ai.conversation.id header.
ALTER TABLE requests ADD COLUMN ttfo_ns INTEGER;
ALTER TABLE requests ADD COLUMN reasoning_ns INTEGER;
ALTER TABLE requests ADD COLUMN reasoning_events INTEGER;
ALTER TABLE requests ADD COLUMN answer_events INTEGER;
ALTER TABLE requests ADD COLUMN ttftc_ns INTEGER;
ALTER TABLE requests ADD COLUMN reasoning_tokens INTEGER;
ALTER TABLE requests ADD COLUMN reasoning_shape TEXT;
ALTER TABLE requests ADD COLUMN conversation_id TEXT;
-- Tasks (below): the task a request is the root of (NULL: none), and, on
-- calls (exchanges_out), the task it is a step of, its kind ('model': an
-- inference endpoint, or a "model" with usage or streamed content; 'tool':
-- any other call), the JSON-RPC method and, for MCP tools/call, the tool's
-- name (metadata; arguments are never read), retry 1 when it re-sends a call
-- of the same task to the same peer, method, path and tool whose last try
-- failed, call_error 1 when it failed (status >= 400, no complete response,
-- a JSON-RPC error or a tool result with isError true), escalated_from the
-- hop id of the model call it escalated (Cascades, below).
ALTER TABLE requests ADD COLUMN task_id TEXT;
ALTER TABLE requests ADD COLUMN call_kind TEXT;
ALTER TABLE requests ADD COLUMN rpc_method TEXT;
ALTER TABLE requests ADD COLUMN tool_name TEXT;
ALTER TABLE requests ADD COLUMN retry INTEGER;
ALTER TABLE requests ADD COLUMN call_error INTEGER;
ALTER TABLE requests ADD COLUMN escalated_from TEXT;
ALTER TABLE exchanges_out ADD COLUMN ttfo_ns INTEGER;
ALTER TABLE exchanges_out ADD COLUMN reasoning_ns INTEGER;
ALTER TABLE exchanges_out ADD COLUMN reasoning_events INTEGER;
ALTER TABLE exchanges_out ADD COLUMN answer_events INTEGER;
ALTER TABLE exchanges_out ADD COLUMN ttftc_ns INTEGER;
ALTER TABLE exchanges_out ADD COLUMN reasoning_tokens INTEGER;
ALTER TABLE exchanges_out ADD COLUMN reasoning_shape TEXT;
ALTER TABLE exchanges_out ADD COLUMN conversation_id TEXT;
ALTER TABLE exchanges_out ADD COLUMN task_id TEXT;
ALTER TABLE exchanges_out ADD COLUMN call_kind TEXT;
ALTER TABLE exchanges_out ADD COLUMN rpc_method TEXT;
ALTER TABLE exchanges_out ADD COLUMN tool_name TEXT;
ALTER TABLE exchanges_out ADD COLUMN retry INTEGER;
ALTER TABLE exchanges_out ADD COLUMN call_error INTEGER;
ALTER TABLE exchanges_out ADD COLUMN escalated_from TEXT;
-- A call's end on a task's critical path: when its answer arrived (the
-- latest data segment its reads carried, tcp_probe), else t_done_ns; a
-- caller late to read its answer spends that time itself.
ALTER TABLE exchanges_out ADD COLUMN t_answered_ns INTEGER;
CREATE INDEX IF NOT EXISTS exchanges_out_task ON exchanges_out(task_id);
CREATE INDEX IF NOT EXISTS exchanges_out_hop ON exchanges_out(hop_id);
CREATE INDEX IF NOT EXISTS exchanges_out_escalated ON exchanges_out(escalated_from)
	WHERE escalated_from IS NOT NULL;

-- One row per task: an inbound request whose process made, while serving
-- it, two or more model calls or a model call and a tool call (rule
-- 'inbound', task_id its hop id), or, for a process that serves nothing, the
-- calls it made under one W3C traceparent trace id ('traceparent', task_id
-- the trace id), one gen_ai.conversation.id ('conversation'), or else with
-- no pause as long as --task-idle-gap between them ('idle_gap', task_id
-- "idle-<pid>-<first call's ns>").  Its span: the inbound request's
-- (t_arrive to t_done), else its first call's start to its last call's end;
-- duration_ns = model_ns + tool_ns + agent_ns exactly: at each instant of
-- the span the task is in a model call if one is open, else in a tool call
-- if one is, else in its own work (the critical path of a task whose calls
-- overlap).  success: the inbound response's status below 400 and complete;
-- without one, the last call's success.
CREATE TABLE IF NOT EXISTS tasks (
	task_id TEXT NOT NULL, pid INTEGER NOT NULL, comm TEXT, run_id INTEGER,
	wall_ns INTEGER NOT NULL, rule TEXT NOT NULL, hop_id TEXT, request_id TEXT,
	t_start_ns INTEGER NOT NULL, t_end_ns INTEGER NOT NULL, duration_ns INTEGER NOT NULL,
	model_calls INTEGER NOT NULL, tool_calls INTEGER NOT NULL, mcp_calls INTEGER NOT NULL,
	retries INTEGER NOT NULL, errors INTEGER NOT NULL,
	model_ns INTEGER NOT NULL, tool_ns INTEGER NOT NULL, agent_ns INTEGER NOT NULL,
	success INTEGER NOT NULL, http_status INTEGER
);
CREATE INDEX IF NOT EXISTS tasks_wall ON tasks(wall_ns);
CREATE INDEX IF NOT EXISTS tasks_id ON tasks(task_id);
CREATE INDEX IF NOT EXISTS tasks_start ON tasks(t_start_ns);
