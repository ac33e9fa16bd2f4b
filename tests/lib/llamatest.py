"""Helpers for the llama.cpp path's test and bench: the real llama.cpp from npm
(node-llama-cpp, `make node-llama` into build/node-llama) behind
tests/lib/llama_server.mjs, started warm, its own marks, a streaming client;
and tests/lib/llama_run.mjs, llama.cpp run once on a GGUF file (greedy
tokens, logits, decode speed) for the quantization tests and benchmark."""
import http.client, json, os, shutil, subprocess, threading

import kpitest
import agenttest as at
import servertest

SERVER = os.path.join(kpitest.ROOT, "tests", "lib", "llama_server.mjs")
NODE_LLAMA = os.path.join(kpitest.BUILD, "node-llama")
# tests/decode_mark.c: marks taken in the calling thread right around each
# llama_decode call, the reference the agent's uprobes are timed against
DECODE_MARK = os.path.join(kpitest.BUILD, "tests", "libdecodemark.so")


RUN = os.path.join(kpitest.ROOT, "tests", "lib", "llama_run.mjs")


def require():
    """node, node-llama-cpp and a built agent, as root; returns node's path."""
    kpitest.require_root("kpi-agent")
    at.require_built(at.AGENT)
    return require_llama()


def require_llama():
    """node and node-llama-cpp; returns node's path."""
    node = shutil.which("node") or shutil.which("nodejs")
    if not node:
        raise kpitest.Skip("node is not installed (make deps installs it)")
    failed = os.path.join(NODE_LLAMA, "install-failed.txt")
    if os.path.exists(failed):
        raise kpitest.Skip("node-llama-cpp is not installed: " + open(failed).read().strip())
    if not os.path.isdir(os.path.join(NODE_LLAMA, "node_modules", "node-llama-cpp")):
        raise kpitest.Skip("node-llama-cpp is not installed (run make node-llama)")
    at.require_built(DECODE_MARK)
    return node


class Fixture:
    """llama_server.mjs with n_seq sequences on a free port, warmed up."""

    def __init__(self, n_seq, tmp):
        node = require()
        self.marks_path = os.path.join(tmp, "marks.jsonl")
        self.calls_path = os.path.join(tmp, "decode-calls.txt")
        self.port = kpitest.free_port()
        # ahead of the test's own client threads (and the machine's other
        # work) for the CPU: its JavaScript marks are late by less (nice
        # execs: the pid is node's)
        self.proc = kpitest.Proc(["nice", "-n", "-20", node, SERVER, str(self.port),
                                  servertest.tiny_model(), self.marks_path, str(n_seq)],
                                 env={"LD_PRELOAD": DECODE_MARK, "DECODE_MARKS": self.calls_path})
        self.proc.wait_line("listening on", timeout=120)
        self.pid = self.proc.pid
        # its first requests run its JavaScript cold (compiled as it goes,
        # marks late by milliseconds): done before anything is measured
        concurrently(self.port, [(f"warm-{i}", f"warm up {i}", 8) for i in range(n_seq)])
        self.restart_marks()

    def _lines(self, path):
        with open(path) as f:
            return f.readlines()

    def restart_marks(self):
        """Marks read later start from here."""
        self.skip_marks = len(self._lines(self.marks_path))
        self.skip_calls = len(self._lines(self.calls_path))

    def marks(self):
        """(decode-call steps, {request id: request marks}) since the warm-up
        or the last restart_marks().  A step has the JavaScript marks around
        the engine's decode call (t0, t1: before the call, when its promise
        resolved; what the batch held) and the native ones around the
        llama_decode it made (c0, c1, ctid, waited: entry, return, the
        calling thread, how long it waited on a run queue meanwhile), paired
        in order: one context decodes one batch at a time."""
        steps, reqs = [], {}
        for line in self._lines(self.marks_path)[self.skip_marks:]:
            m = json.loads(line)
            if m["kind"] == "step":
                m["t0"], m["t1"] = int(m["t0"]), int(m["t1"])
                steps.append(m)
            else:
                reqs[m["id"]] = m
        calls = [tuple(map(int, l.split())) for l in self._lines(self.calls_path)[self.skip_calls:]]
        assert len(calls) == len(steps), f"{len(calls)} llama_decode calls, {len(steps)} decode steps"
        for s, (c0, c1, tid, waited) in zip(steps, calls):
            assert s["t0"] <= c0 <= c1 <= s["t1"], (s, c0, c1)
            s["c0"], s["c1"], s["ctid"], s["waited"] = c0, c1, tid, waited
        return steps, reqs

    def stop(self):
        self.proc.stop()


def stream(port, rid, prompt, max_tokens):
    """One streamed chat completion; returns its status once it is read."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        c.request("POST", "/v1/chat/completions", headers={
            "Content-Type": "application/json", "x-request-id": rid},
            body=json.dumps({"model": "tiny", "stream": True, "max_tokens": max_tokens,
                             "messages": [{"role": "user", "content": prompt}]}))
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


def concurrently(port, jobs):
    """jobs: (rid, prompt, max_tokens): every connection opened first, then
    the requests written back to back in that order, each response read by a
    thread of its own; returns {rid: status}.  No thread starts between two
    requests, so they arrive together however busy the machine is (the burst
    test needs its 16 to overlap), in order (arrival order = position)."""
    conns, out = [], {}
    for rid, _, _ in jobs:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        c.connect()
        conns.append((rid, c))
    for (rid, c), (_, prompt, n) in zip(conns, jobs):
        c.request("POST", "/v1/chat/completions", headers={
            "Content-Type": "application/json", "x-request-id": rid},
            body=json.dumps({"model": "tiny", "stream": True, "max_tokens": n,
                             "messages": [{"role": "user", "content": prompt}]}))

    def read(rid, c):
        try:
            r = c.getresponse()
            r.read()
            out[rid] = r.status
        finally:
            c.close()
    ts = [threading.Thread(target=read, args=a) for a in conns]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def run(mode, model, *args, timeout=600, env=None):
    """llama_run.mjs MODE MODEL ARGS...: its one JSON line (greedy tokens,
    logits, a decode measurement)."""
    node = require_llama()
    e = dict(os.environ, **(env or {}))
    p = subprocess.run([node, RUN, mode, model, *map(str, args)], capture_output=True, text=True,
                       timeout=timeout, env=e)
    if p.returncode != 0:
        raise AssertionError(f"llama_run.mjs {mode} {model}: exit {p.returncode}: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])
