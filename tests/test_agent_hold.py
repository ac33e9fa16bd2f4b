"""kpi-agent never leaves a server stopped (issue 29), for real: root, real BPF,
real servers.  The agent stops a new process at its exec (a new build of a file
it follows) or at its listen() on a --port port until the process is traced;
here the agent is itself stopped while it holds one, so the hold is certain,
and then ended the ways an agent ends: SIGTERM (its own teardown continues the
process); SIGKILL of the agent alone (as the OOM killer or a crash ends it:
its guard, kpi-hold-guard, continues the process); SIGKILL of the agent and
its guard (a unit's final SIGKILL of its cgroup) followed by `kpi-agent
--release-held` (what the systemd unit's ExecStopPost= runs) or by a restarted
agent.  Each signal, 8 tries of each hold: the held process runs again
within 1 s of it.  A process someone else
stopped is never continued, however the agent ends.  Times go to
build/reliability/agent_hold.json."""
import os, shutil, signal, statistics, subprocess, sys, time

import kpitest
import agenttest as at
import servertest

# Six listen holds and three exec holds of each signal (each of the three
# ways a SIGKILL ends once for exec): both holds end by the one path, the
# pinned map's entry, so the tail the bound guards against is the release's,
# nine of each signal; an exec hold costs 4 s (a kpi-infer's start), a listen
# hold 1.5. The largest release of the runs before was 243 ms
# (docs/agent.md), a quarter of the bound.
TRIES = {"listen": 6, "exec": 3}
RUNS_AGAIN_S = 1.0      # the bound: signal -> the held process runs again
SERVER = os.path.join(kpitest.ROOT, "tests", "lib", "sse_server.py")
REPORT = os.path.join(kpitest.BUILD, "reliability", "agent_hold.json")


def _require():
    kpitest.require_root("kpi-agent")
    at.require_built(at.AGENT)
    servertest.require_binary()


def _state(pid):
    """The process's state letter (T: stopped), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _until(pid, stopped, timeout):
    """Polls every millisecond until pid is (or is no longer) stopped; the
    CLOCK_MONOTONIC time it saw that at, or None after timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (_state(pid) == "T") == stopped:
            return time.monotonic()
        time.sleep(0.001)
    return None


class _Held:
    """An agent that holds one process: the agent is stopped (SIGSTOP), then
    the process starts and meets the hold (exec: a new build of --exe's file;
    listen: a Python server on the agent's --port), which is certain since
    the stopped agent cannot attach it."""

    def __init__(self, d, kind, k):
        self.d, self.kind, self.db = d, kind, os.path.join(d, f"hold-{kind}-{k}.db")
        self.port = kpitest.free_port()
        if kind == "exec":
            # a name of its own: no other kpi-infer on the machine is followed
            self.exe = os.path.join(d, f"kpihold{os.getpid() % 100000}")
            shutil.copy2(servertest.KPI_INFER, self.exe)
            self.args = ("--flush-ms", 100, "--exe", self.exe)
        else:
            self.args = ("--flush-ms", 100, "--port", self.port)
        self.agent = at.start_agent(self.db, *self.args)
        self.agent.wait_line("waiting for ", timeout=60)
        self.guard = _guard(self.agent.pid)
        os.kill(self.agent.pid, signal.SIGSTOP)
        kpitest.on_cleanup(lambda: self.agent.p.poll() is None and os.kill(self.agent.pid, signal.SIGCONT))
        if kind == "exec":
            os.unlink(self.exe)         # another inode: a file the agent has not attached
            shutil.copy2(servertest.KPI_INFER, self.exe)
            argv = [self.exe, "--model", servertest.tiny_model(), "--port", str(self.port)]
        else:
            argv = [sys.executable, SERVER, str(self.port)]
        self.p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        kpitest.on_cleanup(self.stop_server)
        assert _until(self.p.pid, True, 10), f"{kind}: pid {self.p.pid} was not held ({_state(self.p.pid)})"

    def serves(self):
        """The held server answers once it runs again."""
        deadline = time.monotonic() + 60
        while True:
            try:
                return kpitest.http_request(self.port, "GET", "/health", timeout=5)[0] == 200
            except OSError:
                if time.monotonic() > deadline or self.p.poll() is not None:
                    return False
                time.sleep(0.02)

    def stop_server(self):
        if self.p.poll() is None:
            os.kill(self.p.pid, signal.SIGCONT)
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def _guard(agent, timeout=10):
    """The pid of agent's hold guard: its child, forked before the agent's
    first line, that names itself kpi-hold-guard once it runs."""
    deadline = time.monotonic() + timeout
    while True:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    comm, rest = f.read().rsplit(")", 1)
                if int(rest.split()[1]) == agent and comm.endswith("(kpi-hold-guard"):
                    return int(pid)
            except (OSError, ValueError, IndexError):
                pass
        if time.monotonic() > deadline:
            raise AssertionError(f"kpi-agent {agent} has no kpi-hold-guard child")
        time.sleep(0.001)


def _end(h, how, k):
    """Ends h's agent the way `how` says; returns the seconds from the signal
    to the held process running again."""
    if how == "sigterm":
        t0 = time.monotonic()
        os.kill(h.agent.pid, signal.SIGTERM)
        os.kill(h.agent.pid, signal.SIGCONT)    # the pending SIGTERM runs first
        t1 = _until(h.p.pid, False, 10)
        assert h.agent.stop() == 0, "\n".join(h.agent.lines[-20:])
    elif k % 3 == 0:        # the agent alone (the OOM killer, a crash): its guard
        t0 = time.monotonic()
        os.kill(h.agent.pid, signal.SIGKILL)
        t1 = _until(h.p.pid, False, 10)
        h.agent.p.wait(30)
        # the guard exits once the agent has, and said what it did on the
        # agent's output
        assert _until_gone(h.guard, 10), f"the guard {h.guard} outlived its agent"
        h.agent.drain()
        assert any(f"continued pid {h.p.pid} " in l and "a kpi-agent that is gone" in l
                   for l in h.agent.lines), h.agent.lines[-10:]
    else:
        # a unit's final SIGKILL to its cgroup: the guard goes too (first, so
        # that it cannot continue the process before it dies)
        os.kill(h.guard, signal.SIGKILL)
        assert _until_gone(h.guard, 10), f"the guard {h.guard} survived SIGKILL"
        t0 = time.monotonic()
        os.kill(h.agent.pid, signal.SIGKILL)
        # not reaped first: the kernel takes about a second to tear a dead
        # agent's programs down, and the hold ends from the kill on
        if k % 3 == 1:      # what the systemd unit's ExecStopPost= runs
            r = kpitest.run([at.AGENT, "--release-held"], timeout=30)
            assert r.returncode == 0, r.stdout + r.stderr
            assert f"pid {h.p.pid}" in r.stdout, r.stdout + r.stderr
            t1 = _until(h.p.pid, False, 10)
        else:               # or the agent, restarted
            again = at.start_agent(h.db, *h.args)
            t1 = _until(h.p.pid, False, 10)
            again.wait_line("writing ", timeout=60)
            assert again.stop() == 0, "\n".join(again.lines[-20:])
        h.agent.p.wait(30)
    assert t1, f"pid {h.p.pid} still stopped 10 s after the agent's {how}"
    assert h.serves(), f"pid {h.p.pid} does not answer after its release"
    return t1 - t0


def _until_gone(pid, timeout):
    """pid has exited (a zombie or reaped) within timeout seconds."""
    deadline = time.monotonic() + timeout
    while _state(pid) not in (None, "Z", "X"):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def _tries(kind, how):
    _require()
    d = kpitest.tmpdir("kpi-agent-hold-")
    secs = []
    for k in range(TRIES[kind]):
        h = _Held(d, kind, k)
        secs.append(_end(h, how, k))
        h.stop_server()
    kpitest.merge_json(REPORT, f"{kind}-{how}", {
        "tries": len(secs), "median_ms": round(statistics.median(secs) * 1e3, 2),
        "max_ms": round(max(secs) * 1e3, 2), "ms": [round(s * 1e3, 2) for s in secs]})
    print(f"     {kind} hold, agent ended by {how}: runs again after median "
          f"{statistics.median(secs) * 1e3:.1f} ms, max {max(secs) * 1e3:.1f} ms ({len(secs)} tries"
          + (f"; its guard max {max(secs[0::3]) * 1e3:.1f} ms; with the guard killed too: "
             f"--release-held max {max(secs[1::3]) * 1e3:.1f} ms, a restarted agent max "
             f"{max(secs[2::3]) * 1e3:.1f} ms)" if how == "sigkill" else ")"))
    assert max(secs) <= RUNS_AGAIN_S, sorted(secs)[-3:]


def test_exec_hold_released_on_sigterm():
    _tries("exec", "sigterm")


def test_exec_hold_released_after_sigkill():
    _tries("exec", "sigkill")


def test_listen_hold_released_on_sigterm():
    _tries("listen", "sigterm")


def test_listen_hold_released_after_sigkill():
    _tries("listen", "sigkill")


for _t in (test_exec_hold_released_on_sigterm, test_exec_hold_released_after_sigkill,
           test_listen_hold_released_on_sigterm, test_listen_hold_released_after_sigkill):
    _t.timeout = 600


def test_a_process_stopped_by_someone_else_stays_stopped():
    """A traced kpi-infer that someone else stopped (kill -STOP) is never
    continued: not by the agent's teardown, not by --release-held, not by a
    restarted agent, nor by the guard of an agent killed alone; and a process
    the agent held and that someone else stopped again after its release is
    not either."""
    _require()
    d = kpitest.tmpdir("kpi-agent-hold-")
    db = os.path.join(d, "other.db")
    daemon = servertest.Daemon()
    agent = at.start_agent(db, "--flush-ms", 100, pid=daemon.p.pid)
    os.kill(daemon.p.pid, signal.SIGSTOP)
    kpitest.on_cleanup(lambda: daemon.alive() and os.kill(daemon.p.pid, signal.SIGCONT))
    assert agent.stop() == 0, agent.lines[-20:]
    agent = at.start_agent(db, "--flush-ms", 100, pid=daemon.p.pid)
    os.kill(agent.pid, signal.SIGKILL)
    agent.p.wait(10)
    agent.drain()
    r = kpitest.run([at.AGENT, "--release-held"], timeout=30)
    assert r.returncode == 0 and f"pid {daemon.p.pid}" not in r.stdout, r.stdout + r.stderr
    # an agent started on a host where a process is stopped continues nothing of it
    again = at.start_agent(db, "--flush-ms", 100, "--port", kpitest.free_port())
    again.wait_line("writing ", timeout=60)
    assert again.stop() == 0, again.lines[-20:]
    # nothing that could continue it runs now (a SIGCONT takes effect as it is sent)
    assert _state(daemon.p.pid) == "T", _state(daemon.p.pid)

    # held by the agent, released, then stopped by someone else
    h = _Held(d, "listen", "again")
    os.kill(h.agent.pid, signal.SIGCONT)
    h.agent.wait_line(f"attached to pid {h.p.pid}", timeout=60)
    assert _until(h.p.pid, False, 10), "the agent did not continue what it held once attached"
    os.kill(h.p.pid, signal.SIGSTOP)
    os.kill(h.agent.pid, signal.SIGKILL)    # its guard stays: it must not continue it either
    h.agent.p.wait(10)
    assert _until_gone(h.guard, 10), f"the guard {h.guard} outlived its agent"
    h.agent.drain()
    assert not any(f"pid {h.p.pid} " in l for l in h.agent.lines if "continued" in l), h.agent.lines
    r = kpitest.run([at.AGENT, "--release-held"], timeout=30)
    assert r.returncode == 0 and f"pid {h.p.pid}" not in r.stdout, r.stdout + r.stderr
    assert _state(h.p.pid) == "T", _state(h.p.pid)
    os.kill(daemon.p.pid, signal.SIGCONT)
    os.kill(h.p.pid, signal.SIGCONT)
    assert daemon.json("GET", "/health")[0] == 200 and h.serves()
