"""kpi-agent and a daemon that restarts and serves at once (issue 19): kpi-infer
started and stopped 10 times on one port, loaded the moment /health answers;
every request of every lifetime must be in the trace under its own pid.  Root,
real BPF, real kpi-infer; numbers go to build/reliability/agent_restart.json."""
import os, shutil, signal, statistics, time

import kpitest
import agenttest
import faulttest as ft
import servertest

ROUNDS, PER_ROUND = 10, 20
BEFORE, AFTER = 12, 8       # test_no_exec_hold_is_counted: requests before and after the attach
REPORT = os.path.join(kpitest.BUILD, "reliability", "agent_restart.json")


def _run(mode, name, *agent_args):
    ft.require()
    d = ft.workdir()
    exe = os.path.join(d, name)
    shutil.copy2(servertest.KPI_INFER, exe)
    db = os.path.join(d, "trace.db")
    agent = agenttest.start_agent(db, "--flush-ms", 100, *[a.replace("EXE", exe) for a in agent_args])
    agent.wait_line("writing ", timeout=60)
    lives = agenttest.restart_loop(exe, servertest.tiny_model(), d, kpitest.free_port(), ROUNDS,
                                   PER_ROUND)
    time.sleep(0.3)  # the last lifetime's exit reaches the agent
    assert agent.stop() == 0, "\n".join(agent.lines[-20:])
    # only this test's daemons: a discovery-mode agent also traces any other kpi-infer
    pids = {pid for pid, _ in lives}
    got = {rid: pid for rid, pid in ft.query(db, "SELECT request_id, pid FROM requests")
           if pid in pids}
    served = [(pid, r) for pid, rs in lives for r in rs if r.status == 200 and not r.error]
    missing = [r.rid for pid, r in served if r.rid not in got]
    wrong_pid = [r.rid for pid, r in served if r.rid in got and got[r.rid] != pid]
    attached = agenttest.attached_lines(agent.lines, pids)
    lat = [agenttest.exec_latency(attached.get(pid)) for pid, _ in lives]
    before = dict(ft.query(db, "SELECT key, value FROM meta")).get("before_attach_arrivals")
    res = {"mode": mode, "rounds": ROUNDS, "sent": ROUNDS * PER_ROUND, "served": len(served),
           "recorded": len(served) - len(missing), "wrong_pid": len(wrong_pid),
           "before_attach_arrivals": before,
           "traced_ms": [l[0] if l else None for l in lat],
           "agent_knew_ms": [l[1] if l else None for l in lat]}
    kpitest.merge_json(REPORT, mode, res)
    known = [l for l in lat if l and l[1] is not None]
    print(f"     {mode}: {res['recorded']} of {res['served']} served requests recorded "
          f"(sent {res['sent']}), {len(wrong_pid)} under another pid, {before} arrived before "
          f"the attach completed; exec -> traced ms {res['traced_ms']}, exec -> agent knew "
          f"median {statistics.median(l[1] for l in known) if known else float('nan'):.1f} ms")
    assert len(served) == ROUNDS * PER_ROUND, f"only {len(served)} of {ROUNDS * PER_ROUND} served"
    # Discovery mode meets the file at the first lifetime's exec: the exec
    # program stops that process until the agent has attached the file's
    # probes (10-20 ms), so the first lifetime is traced from its first
    # request like every other one.
    assert not missing and not wrong_pid, (
        f"{len(missing)} of {len(served)} requests not recorded (first {missing[:5]}), "
        f"{len(wrong_pid)} under another pid")
    assert before == 0, f"{before} requests arrived before the attach completed"
    untold = pids - set(attached)
    assert not untold, (f"lifetimes the agent never told of: {untold}; its lines that name them: "
                        + repr([l for l in agent.lines if any(str(p) in l for p in untold)]))
    if mode == "discovery":     # stopped at its exec, continued once traced
        assert "held at its exec" in attached[lives[0][0]], attached[lives[0][0]]
    # every lifetime after the first runs a file whose probes are in place:
    # the exec program makes it a target before its first instruction (a
    # lifetime shorter than the agent's delay on a busy machine is said so)
    for pid, _ in lives[1:]:
        l = attached[pid]
        assert "traced 0.0 ms after its exec" in l or "traced from its exec all the same" in l, l


def test_restart_loop_discovery():
    """Discovery mode (no --pid/--exe): the daemon's executable is named kpi-infer."""
    _run("discovery", "kpi-infer")


def _fresh_connection_requests(port, tag, n):
    """n short requests one after another, each on a connection of its own
    (a keep-alive connection's later requests send no new arrival)."""
    out = []
    for i in range(n):
        res = agenttest.Result(f"{tag}-{i}", i % 2 == 0)
        body = {"prompt": "the cat sat on the mat", "max_tokens": 4, "temperature": 0,
                "stream": res.stream}
        conn = agenttest.Conn(port)
        try:
            conn.completion(res, body)
        finally:
            conn.close()
        out.append(res)
    return out


def test_no_exec_hold_is_counted():
    """--no-exec-hold: a new build of the file runs at once while its probes
    are attached.  The agent is stopped (SIGSTOP) from before that build's
    exec until it has served BEFORE requests, so all of them meet a target
    whose probes are not in place, whatever the machine's load; then it is
    continued and AFTER more are sent.  Every request is on a connection of
    its own: recorded + counted before the attach = sent, exactly (the
    BEFORE ones are counted and have no row under their id, the AFTER ones
    are recorded), and the build was never stopped at its exec."""
    ft.require()
    d = ft.workdir()
    # a name of its own (the exec program matches the first 15 characters of
    # --exe's name): no other kpi-infer on the machine is followed
    exe = os.path.join(d, f"kpinohold{os.getpid() % 100000}")
    shutil.copy2(servertest.KPI_INFER, exe)
    db = os.path.join(d, "trace.db")
    agent = agenttest.start_agent(db, "--flush-ms", 100, "--exe", exe, "--no-exec-hold")
    agent.wait_line("writing ", timeout=60)
    agent.wait_line("waiting for ", timeout=60)
    # a new build (a file of another inode under the same path): its
    # probes are not attached, and the agent cannot attach them while stopped
    os.kill(agent.pid, signal.SIGSTOP)
    kpitest.on_cleanup(lambda: agent.p.poll() is None and os.kill(agent.pid, signal.SIGCONT))
    os.unlink(exe)
    shutil.copy2(servertest.KPI_INFER, exe)
    port = kpitest.free_port()
    daemon = kpitest.Proc([exe, "--model", servertest.tiny_model(), "--port", str(port)])
    daemon.wait_line("listening on http://", timeout=60)
    before = _fresh_connection_requests(port, "before", BEFORE)
    os.kill(agent.pid, signal.SIGCONT)
    line = agent.wait_line(f"attached to pid {daemon.pid} ", timeout=60)
    after = _fresh_connection_requests(port, "after", AFTER)
    assert daemon.stop() == 0, "\n".join(daemon.lines[-20:])
    agent.wait_line(f"detached from pid {daemon.pid}", timeout=30)
    assert agent.stop() == 0, "\n".join(agent.lines[-20:])
    sent = before + after
    bad = [(r.rid, r.status, r.error) for r in sent if r.status != 200 or r.error]
    assert not bad, f"not served: {bad}"
    assert "held at its exec" not in line, line
    ids = {rid for (rid,) in ft.query(db, "SELECT request_id FROM requests WHERE pid = ?", daemon.pid)}
    recorded = [r.rid for r in sent if r.rid in ids]
    counted = int(dict(ft.query(db, "SELECT key, value FROM meta"))["before_attach_arrivals"])
    print(f"     --no-exec-hold: {len(recorded)} recorded + {counted} counted before the attach "
          f"= {len(recorded) + counted} of {len(sent)} sent ({BEFORE} before the attach, {AFTER} after)")
    assert recorded == [r.rid for r in after], f"recorded {recorded}"
    assert counted == BEFORE, f"{counted} arrivals counted before the attach, {BEFORE} sent"
    assert len(recorded) + counted == len(sent)


def test_restart_loop_exe():
    _run("exe", "kpi-infer-restart", "--exe", "EXE")
