"""An AI agent and its tools for the trajectory tests (issue 32), in the Python
standard library; its own log is the truth the agent's trajectories are
checked against.  Run:
python3 task_agent.py tools PORT
python3 task_agent.py server PORT MODEL_PORT TOOLS_PORT LOG
python3 task_agent.py cli MODEL_PORT TOOLS_PORT LOG --tasks N [--rule R] [--idle-gap-ms G]
(each prints 'listening on PORT', the cli 'ready pid N' and waits for a line
on stdin before its first task).

tools: POST /tools/NAME answers JSON: search and calc at once, slow after
  300 ms the first time a call key (the body's "key") asks and at once after,
  flaky 503 the first time a call key asks, broken 500 always; POST /mcp is an
  MCP server over streamable HTTP (JSON-RPC 2.0: initialize gives an
  Mcp-Session-Id, notifications/initialized 202, tools/call answered as an
  SSE stream of one message event): tools lookup, and mcp_flaky, whose
  first call per key returns result.isError true.
server: an agent behind POST /task (one thread a task, as a Python agent
  server is): body {"task": ID}; the task's plan comes from its ID (seeded):
  1 to 8 model calls to MODEL_PORT (/v1/chat/completions, streamed or not,
  usage asked for), 0 to 5 tool calls (REST and MCP; a failed call - HTTP
  error, JSON-RPC isError, or a 100 ms timeout - is re-sent once; one that
  fails again ends the task with 502), its own work (0.2-1.5 ms) between
  steps.  Answers 200 {"ok":true} or 502.
cli: the same agent as a command that is not a server: N tasks one after the
  other in one process, its calls tied to their task by R: traceparent (one
  W3C trace id a task), conversation (a gen_ai.conversation.id header), idle
  (nothing: tasks are G ms of idleness apart, default 600, and a task's own
  gaps are under 50 ms), or mixed (the three in turn, always G ms apart).
The log (LOG, one JSON line per task, written when it ends): task, pid, rule,
status, success, model_calls, tool_calls, retries, errors, mcp_tools (the
tools/call names in order), prompt_tokens, completion_tokens, and every call
(kind model|tool, path, tool, status, error, retry, t0/t1 CLOCK_MONOTONIC ns).
Every call's body names its task ("user" for a model call, "key" for a REST
tool, the arguments' "task" for MCP): the tests read it off the wire, the
agent never does."""
import http.client, json, os, random, socket, sys, threading, time, zlib

from httpfixture import Handler, NoDelayServer

TOOL_TIMEOUT_S = 0.1


# ---- tools -----------------------------------------------------------------

_seen, _seen_lock = set(), threading.Lock()


def _first_time(key):
    with _seen_lock:
        new = key not in _seen
        _seen.add(key)
        return new


class Tools(Handler):
    def do_POST(self):
        req = self.json_body()
        if self.path == "/mcp":
            return self.mcp(req)
        name = self.path.rsplit("/", 1)[-1]
        key = f"{name}:{req.get('key')}"
        if name == "broken":
            return self.answer(500, {"error": "the tool is broken"})
        if name == "flaky" and _first_time(key):
            return self.answer(503, {"error": "try again"}, extra={"Retry-After": "0"})
        if name == "slow" and _first_time(key):
            time.sleep(0.3)
        self.answer(200, {"result": f"{name} done"})

    def mcp(self, req):
        method = req.get("method")
        if method == "initialize":
            return self.answer(200, {"jsonrpc": "2.0", "id": req.get("id"), "result": {
                "protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                "serverInfo": {"name": "task-tools", "version": "1"}}},
                extra={"Mcp-Session-Id": "sess-1"})
        if method == "notifications/initialized":
            return self.answer(202, b"")
        if method != "tools/call":
            return self.answer(200, {"jsonrpc": "2.0", "id": req.get("id"),
                                     "error": {"code": -32601, "message": "no such method"}})
        p = req.get("params") or {}
        name, args = p.get("name"), p.get("arguments") or {}
        failed = name == "mcp_flaky" and _first_time(f"{name}:{args.get('task')}:{args.get('n')}")
        result = {"content": [{"type": "text", "text": "failed" if failed else f"{name} done"}],
                  "isError": failed}
        msg = json.dumps({"jsonrpc": "2.0", "id": req.get("id"), "result": result})
        self.answer(200, f"event: message\ndata: {msg}\n\n".encode(), "text/event-stream")


# ---- the agent ---------------------------------------------------------------

def plan_of(task):
    """The steps of a task, from its id alone: [("model", max_tokens, stream) |
    ("tool", name) | ("own", seconds)], 1-8 model calls and at most 5 tool
    calls counting the retries the tools' rules will cause."""
    rng = random.Random(zlib.crc32(task.encode()))
    n_model, budget = rng.randint(1, 8), rng.randint(0, 5)
    tools = []
    while budget > 0:
        name = rng.choice(["search", "calc", "mcp:lookup", "flaky", "slow", "mcp:mcp_flaky",
                           "broken"] if budget >= 2 else ["search", "calc", "mcp:lookup"])
        tools.append(name)
        budget -= 2 if name in ("flaky", "slow", "mcp:mcp_flaky", "broken") else 1
    steps = []
    for i in range(n_model):
        steps.append(("own", rng.uniform(0.0002, 0.0015)))
        steps.append(("model", rng.randint(2, 4), rng.random() < 0.5))
        # the tools go between model calls, the last ones after the last model call
        k = len(tools) if i == n_model - 1 else rng.randint(0, len(tools))
        for name in tools[:k]:
            steps.append(("own", rng.uniform(0.0002, 0.0015)))
            steps.append(("tool", name))
        tools = tools[k:]
    steps.append(("own", rng.uniform(0.0002, 0.0015)))
    return steps


class Agent:
    """Runs tasks against the model and tool servers; headers(task) are the
    ids each of a task's calls carries."""

    def __init__(self, model_port, tools_port, log_path, rule="thread"):
        self.model_port, self.tools_port = model_port, tools_port
        self.log_path, self.rule = log_path, rule
        self.lock = threading.Lock()
        self.mcp_session = None
        self.rpc_id = 0

    def _post(self, port, path, body, headers, timeout=60):
        """status, body bytes, content type; status None on a timeout."""
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            c.request("POST", path, body=json.dumps(body),
                      headers={"Content-Type": "application/json", **headers})
            r = c.getresponse()
            return r.status, r.read(), r.getheader("content-type", ""), r.getheader("mcp-session-id")
        except socket.timeout:
            return None, b"", "", None
        finally:
            c.close()

    def mcp_init(self):
        accept = {"Accept": "application/json, text/event-stream"}
        _, _, _, sid = self._post(self.tools_port, "/mcp", {
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "task-agent", "version": "1"}}}, accept)
        self.mcp_session = sid
        self._post(self.tools_port, "/mcp", {"jsonrpc": "2.0", "method": "notifications/initialized"},
                   {**accept, "Mcp-Session-Id": sid})

    def _model(self, task, max_tokens, stream, headers, log):
        body = {"model": "tiny", "user": task, "max_tokens": max_tokens, "temperature": 0,
                "ignore_eos": True, "messages": [{"role": "user", "content": f"step of {task}"}]}
        if stream:
            body.update(stream=True, stream_options={"include_usage": True})
        t0 = time.monotonic_ns()
        st, data, _, _ = self._post(self.model_port, "/v1/chat/completions", body, headers)
        t1 = time.monotonic_ns()
        usage = {}
        if st == 200:
            if stream:
                for ev in data.split(b"\n\n"):
                    if ev.startswith(b"data: {") and b'"usage":{' in ev:
                        usage = json.loads(ev[6:]).get("usage") or usage
            else:
                usage = json.loads(data).get("usage") or {}
        log["prompt_tokens"] += usage.get("prompt_tokens", 0)
        log["completion_tokens"] += usage.get("completion_tokens", 0)
        log["calls"].append({"kind": "model", "path": "/v1/chat/completions", "tool": None,
                             "status": st, "error": st != 200, "retry": False, "stream": stream,
                             "t0": t0, "t1": t1})
        return st == 200

    def _tool(self, task, name, n, retry, headers, log):
        t0 = time.monotonic_ns()
        if name.startswith("mcp:"):
            tool = name[4:]
            with self.lock:
                self.rpc_id += 1
                rid = self.rpc_id
            st, data, ctype, _ = self._post(self.tools_port, "/mcp", {
                "jsonrpc": "2.0", "id": rid, "method": "tools/call",
                "params": {"name": tool, "arguments": {"task": task, "n": n, "query": "weather"}}},
                {**headers, "Accept": "application/json, text/event-stream",
                 "Mcp-Session-Id": self.mcp_session or ""})
            msg = json.loads(data.split(b"data: ", 1)[1]) if st == 200 else {}
            ok = st == 200 and "error" not in msg and not (msg.get("result") or {}).get("isError")
            path = "/mcp"
        else:
            tool, path = name, f"/tools/{name}"
            st, _, _, _ = self._post(self.tools_port, path, {"key": f"{task}:{n}", "input": "x"},
                                     headers, timeout=TOOL_TIMEOUT_S)
            ok = st == 200
        t1 = time.monotonic_ns()
        log["calls"].append({"kind": "tool", "path": path, "tool": tool, "status": st,
                             "error": not ok, "retry": retry, "mcp": path == "/mcp",
                             "t0": t0, "t1": t1})
        return ok

    def run(self, task, headers=None):
        """One task; returns its log entry (also appended to the log)."""
        headers = headers or {}
        log = {"task": task, "pid": os.getpid(), "rule": self.rule, "prompt_tokens": 0,
               "completion_tokens": 0, "calls": [], "t0": time.monotonic_ns()}
        ok = True
        for i, step in enumerate(plan_of(task)):
            if step[0] == "own":
                end = time.monotonic() + step[1]
                while time.monotonic() < end:      # the agent's own work: CPU
                    pass
            elif step[0] == "model":
                ok = self._model(task, step[1], step[2], headers, log)
            else:
                ok = self._tool(task, step[1], i, False, headers, log) or \
                    self._tool(task, step[1], i, True, headers, log)
            if not ok:
                break
        calls = log["calls"]
        log.update(t1=time.monotonic_ns(), success=ok, status=200 if ok else 502,
                   model_calls=sum(c["kind"] == "model" for c in calls),
                   tool_calls=sum(c["kind"] == "tool" for c in calls),
                   retries=sum(c["retry"] for c in calls), errors=sum(c["error"] for c in calls),
                   mcp_tools=[c["tool"] for c in calls if c.get("mcp")])
        with self.lock, open(self.log_path, "a") as f:
            f.write(json.dumps(log) + "\n")
        return log


class TaskHandler(Handler):
    def do_POST(self):
        req = self.json_body()
        log = AGENT.run(req.get("task") or self.headers.get("x-request-id") or "task")
        self.answer(log["status"], {"ok": log["success"]})


def read_log(path):
    """The tasks of a log, by task id."""
    with open(path) as f:
        return {e["task"]: e for e in map(json.loads, f)}


def _cli(argv):
    model_port, tools_port, log_path = int(argv[0]), int(argv[1]), argv[2]
    opt = lambda name, d: argv[argv.index(name) + 1] if name in argv else d
    n, rule, gap = int(opt("--tasks", "10")), opt("--rule", "idle"), float(opt("--idle-gap-ms", "600")) / 1e3
    agent = Agent(model_port, tools_port, log_path)
    agent.mcp_init()
    print(f"ready pid {os.getpid()}", flush=True)
    sys.stdin.readline()
    rules = ["traceparent", "conversation", "idle"] if rule == "mixed" else [rule]
    for i in range(n):
        r = rules[i % len(rules)]
        task = f"cli-{r}-{i}"
        agent.rule = r
        tid = zlib.crc32(task.encode())
        headers = {"traceparent": f"00-{tid:032x}-{i + 1:016x}-01"} if r == "traceparent" else \
            {"gen_ai.conversation.id": f"conv-{task}"} if r == "conversation" else {}
        if i:
            time.sleep(gap)
        agent.run(task, headers)
    print("done", flush=True)


if __name__ == "__main__":
    role = sys.argv[1]
    if role == "cli":
        _cli(sys.argv[2:])
        sys.exit(0)
    port = int(sys.argv[2])
    if role == "tools":
        srv = NoDelayServer(("127.0.0.1", port), Tools)
    else:
        AGENT = Agent(int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
        AGENT.mcp_init()
        srv = NoDelayServer(("127.0.0.1", port), TaskHandler)
    print(f"listening on {port}", flush=True)
    srv.serve_forever()
