"""Agent trajectories per task (issue 32), for real: root, real BPF, real
processes.  tests/lib/task_agent.py is an agent: a server whose every POST
/task makes 1 to 8 model calls to kpi-infer and 0 to 5 tool calls (REST tools
that fail, time out and are retried; an MCP server over streamable HTTP whose
tools/call names its tool), and the same agent as a command-line process that
serves nothing and ties its calls by traceparent, gen_ai.conversation.id or
idleness.  Its own log is the truth for what it did; a tcpdump capture of
the three ports for when.  Every task the log holds must be in the
trajectories view (two model calls, or a model and a tool call; a lone model
call is no task) with its counts, MCP tools and success equal, and its time
in model calls, tool calls and its own work each within 300 µs of the same
split computed from the capture, the three summing to its duration."""
import http.client, json, os, subprocess, sys, time

import kpitest
import noisetest
import agenttest as at
import pcaptest

AGENT_PY = os.path.join(kpitest.ROOT, "tests", "lib", "task_agent.py")
WIRE_US = 300           # the bound: each time vs the capture's


def _tmp():
    return kpitest.tmpdir("kpi-agent-tasks-")


def _require():
    at.require_agent_and_infer(capture=True)


def _serve(*args):
    p = kpitest.Proc([sys.executable, AGENT_PY, *map(str, args)])
    p.wait_line("listening on")
    return p


def _task(port, tid):
    """POST /task for task tid; its status."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", "/task", body=json.dumps({"task": tid}),
              headers={"Content-Type": "application/json", "x-request-id": tid})
    r = c.getresponse()
    r.read()
    c.close()
    return r.status


def _is_task(e):
    return e["model_calls"] >= 2 or (e["model_calls"] >= 1 and e["tool_calls"] >= 1)


def _task_of(x):
    """The task a call on the wire served: its body says (a model call's
    "user", a REST tool's "key" = task:step, an MCP call's arguments.task)."""
    try:
        b = json.loads(x["request_body"] or b"{}")
    except ValueError:
        return None
    if "user" in b:
        return b["user"]
    if "key" in b:
        return b["key"].rsplit(":", 1)[0]
    return ((b.get("params") or {}).get("arguments") or {}).get("task")


def _split(span, calls):
    """model, tool, own work over span (t0, t1): at each instant a model call
    if one is open, else a tool call, else the agent's own (the agent's rule,
    computed here from the wire)."""
    s, e = span
    marks = []
    for kind, a, b in calls:
        a, b = max(a, s), min(b, e)
        if a < b:
            marks += [(a, kind, 1), (b, kind, -1)]
    marks.sort()
    open_, out, prev = {"model": 0, "tool": 0}, {"model": 0, "tool": 0, "agent": 0}, s
    for t, kind, d in marks:
        out["model" if open_["model"] else "tool" if open_["tool"] else "agent"] += t - prev
        prev = t
        open_[kind] += d
    out["agent"] += e - prev
    return out


def _wire_calls(pcap, model_port, tools_port):
    """{task: [(kind, first byte, end)]} of every call on the wire: its end
    the answer's last byte, or the caller's FIN when it gave up first (a
    timeout: what the server wrote after is no part of the task)."""
    calls = {}
    for port, kind in ((model_port, "model"), (tools_port, "tool")):
        fins = pcaptest.client_fins(pcap, port)
        for x in pcaptest.exchanges(pcap, port):
            task = _task_of(x)
            if task:
                end = min(x["t_last_byte"], fins.get(x["client_port"], x["t_last_byte"]))
                calls.setdefault(task, []).append((kind, x["t_first_byte"], end))
    return calls


def _check_tasks(db, log, span_of, wire, match):
    """The trajectories view against the log and the wire; match(rows, entry)
    finds a logged task's row (None: none).  Returns the (agent - wire)
    differences of the three times and of the start, and the problems."""
    rows = at.query(db, "SELECT * FROM trajectories")
    diffs, problems, used = {"model": [], "tool": [], "agent": [], "start": []}, [], set()
    off = at.mono_to_wall(db)
    for task, e in sorted(log.items()):
        r = match(rows, e)
        if r:
            used.add(r["task_id"])
        if not _is_task(e):
            if r:
                problems.append(f"{task}: {e['model_calls']} model, {e['tool_calls']} tool calls: not a task, "
                                f"yet in trajectories")
            continue
        if not r:
            problems.append(f"{task}: not in trajectories")
            continue
        want = {"model_calls": e["model_calls"], "tool_calls": e["tool_calls"], "retries": e["retries"],
                "errors": e["errors"], "mcp_calls": len(e["mcp_tools"]), "success": int(e["success"]),
                "mcp_tools": ",".join(e["mcp_tools"]) or None}
        have = {k: r[k] for k in want}
        if have != want:
            problems.append(f"{task}: {have} != log {want}")
            continue
        assert r["model_ns"] + r["tool_ns"] + r["agent_ns"] == r["duration_ns"], r
        span = span_of(task)
        if task not in wire or not span:
            problems.append(f"{task}: not on the wire")
            continue
        w = _split(span, wire[task])
        # a stall of the machine within the task's span can move any of its
        # calls' marks (noisetest): the span is where to look for one
        for k in ("model", "tool", "agent"):
            diffs[k].append((r[f"{k}_ns"] - w[k], span[0], span[1], task))
        diffs["start"].append((r["t_start_ns"] + off - span[0], span[0], r["t_start_ns"] + off, task))
        if r["prompt_tokens"] != e["prompt_tokens"] or r["output_tokens"] != e["completion_tokens"]:
            problems.append(f"{task}: tokens {r['prompt_tokens']}/{r['output_tokens']}, log "
                            f"{e['prompt_tokens']}/{e['completion_tokens']}")
    problems += [f"{r['task_id']} ({r['rule']}): in trajectories, not in the log" for r in rows
                 if r["task_id"] not in used]
    return diffs, problems


def _per_call(db, wire, match_rows, log):
    """(agent - wire) of every call's start and end, matched in order within
    its task: what the three times' differences are made of."""
    off = at.mono_to_wall(db)
    starts, ends = [], []
    for task, e in log.items():
        r = match_rows(e)
        if not r or task not in wire:
            continue
        mine = at.query(db, "SELECT t_arrive_ns, COALESCE(t_answered_ns, t_done_ns) AS t1 FROM exchanges_out "
                        "WHERE task_id = ? ORDER BY t_arrive_ns", r["task_id"])
        theirs = sorted(wire[task], key=lambda c: c[1])
        if len(mine) != len(theirs):
            continue
        for m, (_, a, b) in zip(mine, theirs):
            starts.append(m["t_arrive_ns"] + off - a)
            ends.append(m["t1"] + off - b)
    return {"call start": at.stats_us(starts), "call end": at.stats_us(ends)}


def _summary(diffs, stalls, label):
    """The stats of each time's differences, but those a measured stall of
    the machine explains (noisetest), at most its share of the tasks."""
    out = {}
    for k, v in diffs.items():
        kept = noisetest.judged(v, WIRE_US * 1000, stalls, f"{label} {k}")
        out[k] = at.stats_us([x for x, _, _, _ in kept])
    return out


def test_agent_tasks_server_agent_against_its_log_and_the_wire():
    """40 tasks from 4 clients at once on the server agent (one thread a
    task, so its calls are linked by thread): every task found, its counts,
    MCP tools and success equal to the log, its three times within 300 µs of
    the capture's."""
    _require()
    import servertest
    d = _tmp()
    daemon = servertest.Daemon("--max-seqs", 8, "--max-queue", 256)
    tport, aport = kpitest.free_port(), kpitest.free_port()
    log = os.path.join(d, "agent.jsonl")
    _serve("tools", tport)
    ag = _serve("server", aport, daemon.port, tport, log)
    db = os.path.join(d, "tasks.db")
    agent = at.start_agent(db, "--port", aport, "--port", tport, "--flush-ms", 100, "--price-per-hour", 3.6,
                           pid=daemon.p.pid)
    agent.wait_line(f"attached to pid {ag.pid}", timeout=60)
    cap = pcaptest.Capture([aport, tport, daemon.port], noise=1000)
    ids = [f"task-{i}" for i in range(40)]
    got = dict(zip(ids, at.in_threads(ids, lambda tid: _task(aport, tid), 4)))
    pcap = cap.stop()
    time.sleep(0.5)
    assert agent.stop() == 0, agent.lines[-20:]
    import task_agent
    entries = task_agent.read_log(log)
    assert sorted(entries) == sorted(ids), (len(entries), len(ids))
    assert all(got[t] == entries[t]["status"] for t in ids), got
    spans = {x["request_headers"].get("x-request-id"): (x["t_first_byte"], x["t_last_byte"])
             for x in pcaptest.exchanges(pcap, aport)}
    wire = _wire_calls(pcap, daemon.port, tport)

    def match(rows, e):
        found = [r for r in rows if r["request_id"] == e["task"]]
        return found[0] if len(found) == 1 and found[0]["rule"] == "inbound" else None
    diffs, problems = _check_tasks(db, entries, spans.get, wire, match)
    s = _summary(diffs, cap.stalls, "tasks")
    n_tasks = sum(_is_task(e) for e in entries.values())
    rows = at.query(db, "SELECT * FROM trajectories")
    print(f"     {n_tasks} tasks of {len(ids)} (the rest a lone model call); agent - wire, µs (|diff|): {s}; "
          f"per call: {_per_call(db, wire, lambda e: match(rows, e), entries)}")
    assert not problems, problems[:10]
    assert len(diffs["model"]) == n_tasks >= 20, s
    for k in ("model", "tool", "agent", "start"):
        assert s[k]["p99"] <= WIRE_US, (k, s)
    # cost: kpi-infer's rows were priced, and the view sums them per task
    costs = at.query(db, "SELECT cost_usd FROM trajectories")
    assert costs and all(c["cost_usd"] is not None and c["cost_usd"] > 0 for c in costs), costs[:5]
    # kpi-report's section: the measured task success and the calls' success
    import tracetest
    p = tracetest.run_tool([tracetest.REPORT, "--db", db])
    assert p.returncode == 0, p.stderr
    ok = sum(e["success"] for e in entries.values() if _is_task(e))
    assert f"| task success (measured) | {round(100 * ok / n_tasks)}% |" in p.stdout, p.stdout
    # kpitop's task view lists them
    kpitop = os.path.join(kpitest.BIN, "kpitop")
    p = tracetest.run_tool([kpitop, "--db", db, "--once", "--at", "end", "--window", "5m", "--tasks",
                            "--rows", "80", "--width", "140"])
    assert p.returncode == 0 and p.stdout.count(" inbound ") == n_tasks, p.stdout
    daemon.stop()


test_agent_tasks_server_agent_against_its_log_and_the_wire.timeout = 300


def test_agent_tasks_command_line_agent():
    """The agent as a command that serves nothing (traced with --pid, HTTP
    mode): 18 tasks one after the other, 600 ms apart, a third tied by
    traceparent, a third by gen_ai.conversation.id, a third by nothing (the
    idle-gap rule, --task-idle-gap 300ms): every task found under the rule
    that made it, its counts, success and times as for the server."""
    _require()
    import servertest, zlib
    d = _tmp()
    daemon = servertest.Daemon("--max-seqs", 8, "--max-queue", 256)
    tport = kpitest.free_port()
    log = os.path.join(d, "cli.jsonl")
    _serve("tools", tport)
    cli = kpitest.Proc([sys.executable, AGENT_PY, "cli", str(daemon.port), str(tport), log, "--tasks", "18",
                        "--rule", "mixed", "--idle-gap-ms", "600"], stdin=subprocess.PIPE)
    cli.wait_line("ready pid")
    db = os.path.join(d, "cli.db")
    agent = at.start_agent(db, "--pid", cli.pid, "--flush-ms", 100, "--task-idle-gap", "300ms",
                           pid=daemon.p.pid)
    agent.wait_line(f"attached to pid {cli.pid}", timeout=60)
    cap = pcaptest.Capture([tport, daemon.port], noise=1000)
    cli.p.stdin.write(b"go\n")
    cli.p.stdin.flush()
    cli.wait_line("done", timeout=120)
    pcap = cap.stop()
    time.sleep(0.5)
    assert agent.stop() == 0, agent.lines[-20:]
    import task_agent
    entries = task_agent.read_log(log)
    assert len(entries) == 18, entries.keys()
    wire = _wire_calls(pcap, daemon.port, tport)
    spans = {t: (min(a for _, a, _ in c), max(b for _, _, b in c)) for t, c in wire.items()}
    rule_name = {"traceparent": "traceparent", "conversation": "conversation", "idle": "idle_gap"}
    off = at.mono_to_wall(db)

    def match(rows, e):
        rule = rule_name[e["rule"]]
        if rule == "traceparent":
            key = f"{zlib.crc32(e['task'].encode()):032x}"
        elif rule == "conversation":
            key = f"conv-{e['task']}"
        else:   # the one whose span lies within the task's logged span (one clock)
            found = [r for r in rows if r["rule"] == rule and r["t_start_ns"] >= e["t0"] and
                     r["t_end_ns"] <= e["t1"]]
            return found[0] if len(found) == 1 else None
        found = [r for r in rows if r["request_id"] == key and r["rule"] == rule]
        return found[0] if len(found) == 1 else None
    diffs, problems = _check_tasks(db, entries, spans.get, wire, match)
    s = _summary(diffs, cap.stalls, "command-line tasks")
    n_tasks = sum(_is_task(e) for e in entries.values())
    rows = at.query(db, "SELECT * FROM trajectories")
    print(f"     command-line agent: {n_tasks} tasks of 18; agent - wire, µs (|diff|): {s}; "
          f"per call: {_per_call(db, wire, lambda e: match(rows, e), entries)}")
    assert not problems, problems[:10]
    for k in ("model", "tool", "agent", "start"):
        assert len(diffs[k]) == n_tasks and s[k]["p99"] <= WIRE_US, (k, s)
    daemon.stop()


test_agent_tasks_command_line_agent.timeout = 300
