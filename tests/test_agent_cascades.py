"""Model cascades (issue 32), for real: root, real BPF, real processes.  A
gateway (tests/lib/cascade_gateway.py) asks a small kpi-infer (the tiny
model) first and asks a larger one (the small preset) the same request for a
known share of requests; its log is the truth.  The agent must find every
escalation and no other (the request the same but for its model, after the
first answered): the escalation rate equal to the log's, the latency each
added (the large answer's end minus the small's) within 300 µs of the
capture, the cost of each path from the two servers' priced rows; and
kpi-report tells "escalations rose" from "the escalated model got slower"."""
import http.client, json, os, sys, threading, time

import kpitest
import agenttest as at
import noisetest
import pcaptest

GATEWAY = os.path.join(kpitest.ROOT, "tests", "lib", "cascade_gateway.py")
WIRE_US = 300


def _tmp():
    return kpitest.tmpdir("kpi-agent-cascades-")


def _require():
    at.require_agent_and_infer(capture=True)


def _large_model(d):
    """The small preset (a larger model than the tiny default) in a GGUF of its own."""
    import servertest
    path = os.path.join(d, "small.gguf")
    kpitest.run([servertest.KPI_INFER, "--make-model", path, "--preset", "small", "--seed", "2"], check=True)
    return path


def _ask(port, rid, esc):
    """One chat request to port; esc: its x-cascade header (None: the gateway's own rule)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/v1/chat/completions", headers={"Content-Type": "application/json", "x-request-id": rid,
                                                        **({"x-cascade": esc} if esc else {})},
              body=json.dumps({"messages": [{"role": "user", "content": f"question {rid}"}],
                               "max_tokens": 4, "temperature": 0}))
    r = c.getresponse()
    r.read()
    c.close()
    return r.status


def _send(port, jobs, threads=4):
    """jobs: [(rid, x-cascade header or None)]; {rid: status}."""
    return {rid: st for (rid, _), st in zip(jobs, at.in_threads(jobs, lambda j: _ask(port, *j), threads))}


def _stack(d, gport, log, share):
    import servertest
    small = servertest.Daemon("--max-seqs", 8, "--max-queue", 128)
    large = servertest.Daemon("--max-seqs", 8, "--max-queue", 128, "--model", _large_model(d))
    gw = kpitest.Proc([sys.executable, GATEWAY, str(gport), str(small.port), str(large.port), log,
                       "--share", str(share)])
    gw.wait_line("listening on")
    return small, large, gw


def test_agent_cascade_escalations_against_the_log_and_the_wire():
    """60 requests from 4 clients, 30% escalated by the gateway's own rule:
    every escalation found (and no other), the rate equal to the log's, what
    each added within 300 µs of the capture, both paths priced."""
    _require()
    d = _tmp()
    gport, log = kpitest.free_port(), os.path.join(d, "cascade.jsonl")
    small, large, gw = _stack(d, gport, log, 0.3)
    db = os.path.join(d, "cascade.db")
    agent = at.start_agent(db, "--port", gport, "--pid", large.p.pid, "--flush-ms", 100,
                           "--price-per-hour", 3.6, pid=small.p.pid)
    agent.wait_line(f"attached to pid {gw.pid}", timeout=60)
    agent.wait_line(f"attached to pid {large.p.pid}", timeout=60)
    cap = pcaptest.Capture([small.port, large.port], noise=True)
    got = _send(gport, [(f"casc-{i}", None) for i in range(60)])
    pcap = cap.stop()
    time.sleep(1.0)         # the cost of a request is written a sample or two after it
    assert agent.stop() == 0, agent.lines[-20:]
    assert all(s == 200 for s in got.values()), got
    import cascade_gateway
    truth = cascade_gateway.read_log(log)
    rows = {}
    for r in at.query(db, "SELECT c.*, i.request_id FROM cascade_requests c JOIN requests i "
                      "ON i.hop_id = c.task_id"):
        rows[r["request_id"]] = r
    problems = [f"{rid}: escalated {rows[rid]['escalated'] if rid in rows else '?'}, the log says "
                f"{e['escalated']}" for rid, e in truth.items()
                if rid not in rows or bool(rows[rid]["escalated"]) != e["escalated"]]
    off = at.mono_to_wall(db)
    w_small = {json.loads(x["request_body"])["user"]: x for x in pcaptest.exchanges(pcap, small.port)}
    w_large = {json.loads(x["request_body"])["user"]: x for x in pcaptest.exchanges(pcap, large.port)}
    added = []
    for rid, e in truth.items():
        if e["escalated"] and rid in rows:
            t_a, t_b = w_small[rid]["t_last_byte"], w_large[rid]["t_last_byte"]
            added.append((rows[rid]["added_ns"] - (t_b - t_a), t_a, t_b, rid))
    rate_log = sum(e["escalated"] for e in truth.values()) / len(truth)
    rate = at.query(db, "SELECT AVG(escalated) AS r FROM cascade_requests WHERE comm = ?",
                    rows[next(iter(rows))]["comm"])[0]["r"]
    assert len(added) == sum(e["escalated"] for e in truth.values()), (len(added), problems[:5])
    s = at.stats_us([x for x, _, _, _ in noisetest.judged(added, WIRE_US * 1000, cap.stalls, "added")])
    costs = at.query(db, "SELECT AVG(first_cost_usd) AS small, AVG(escalated_path_cost_usd) AS both "
                     "FROM cascade_requests")[0]
    print(f"     escalation rate {rate:.3f} (log {rate_log:.3f}); added agent - wire, µs (|diff|): {s}; "
          f"mean cost small path ${costs['small']:.3g}, escalated path ${costs['both']:.3g}")
    assert not problems, problems[:10]
    assert abs(rate - rate_log) < 1e-9 and 0 < rate_log < 1, (rate, rate_log)
    assert s["p99"] <= WIRE_US, s
    assert costs["small"] and costs["both"] and costs["both"] > costs["small"], costs
    small.stop()
    large.stop()


test_agent_cascade_escalations_against_the_log_and_the_wire.timeout = 300


def test_agent_cascade_report_tells_escalations_from_a_slower_model():
    """Three stretches of 40 requests: 20% escalated; then 70% escalated; then
    20% again while another client keeps the large model busy.  kpi-report
    names "escalations rose" for the second against the first, and "the
    escalated model got slower" for the third."""
    _require()
    import tracetest
    at.require_built(tracetest.REPORT)
    d = _tmp()
    gport, log = kpitest.free_port(), os.path.join(d, "cascade.jsonl")
    small, large, gw = _stack(d, gport, log, 0)
    db = os.path.join(d, "report.db")
    agent = at.start_agent(db, "--port", gport, "--pid", large.p.pid, "--flush-ms", 100, pid=small.p.pid)
    agent.wait_line(f"attached to pid {gw.pid}", timeout=60)

    def stretch(tag, share):
        k = int(share * 10)
        t0 = time.time()
        _send(gport, [(f"{tag}-{i}", "escalate" if i % 10 < k else "keep") for i in range(40)])
        t1 = time.time()
        time.sleep(1.1)
        return t0 - 0.2, t1 + 0.2
    base = stretch("base", 0.2)
    rose = stretch("rose", 0.7)
    stop = threading.Event()

    def load_large():       # another client of the large model, 3 at a time
        while not stop.is_set():
            _send(large.port, [(f"bg-{time.monotonic_ns()}-{k}", None) for k in range(3)], threads=3)
    bg = [threading.Thread(target=load_large) for _ in range(2)]
    for t in bg:
        t.start()
    slow = stretch("slow", 0.2)
    stop.set()
    for t in bg:
        t.join()
    assert agent.stop() == 0, agent.lines[-20:]
    for window, cause in ((rose, "escalations rose"), (slow, "escalated model slower")):
        p = tracetest.run_tool([tracetest.REPORT, "--db", db, "--from", f"@{window[0]:.3f}", "--to",
                                f"@{window[1]:.3f}", "--baseline", f"@{base[0]:.3f}..@{base[1]:.3f}"])
        assert p.returncode == 0, p.stderr
        causes = [c for *_, c in tracetest.REPORT_FINDING.findall(p.stdout)]
        named = [c for c in causes if c in ("escalations rose", "escalated model slower")]
        print(f"     {cause}: findings {causes}")
        assert named[:1] == [cause], (cause, causes, p.stdout)
    small.stop()
    large.stop()


test_agent_cascade_report_tells_escalations_from_a_slower_model.timeout = 400
