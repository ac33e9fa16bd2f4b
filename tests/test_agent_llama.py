"""kpi-agent's llama.cpp path (issue 22), for real: root, real BPF, the real
llama.cpp from npm (node-llama-cpp, installed by `make node-llama` into
build/node-llama) behind tests/lib/llama_server.mjs, a Node streaming server
the project does not instrument.  The agent traces it with --port: HTTP from
its sockets, the engine from uprobes on libllama's llama_decode.  Every row is
checked against the server's own CLOCK_MONOTONIC marks around its decode calls
and its tokenizer's counts."""
import os, re, sqlite3, time

import kpitest
import agenttest as at
import llamatest as lt

MARKS_P99_NS = 1_000_000        # the bound: |agent - fixture| p99
WAITED_MAX_NS = 100_000         # a call whose thread waited this long is not timed
PHASES = ("net_in_ns", "queue_ns", "prefill_ns", "decode_ns", "net_out_ns")
LONG = " ".join(f"word{i} of a long shared prompt" for i in range(40))


class Traced:
    """The fixture with n_seq sequences, traced by an agent with --port."""

    def __init__(self, n_seq):
        lt.require()
        d = kpitest.tmpdir("kpi-agent-llama-")
        self.db = os.path.join(d, "llama.db")
        self.fx = lt.Fixture(n_seq, d)
        self.port = self.fx.port
        self.metrics_port = kpitest.free_port()
        self.agent = at.start_agent(self.db, "--flush-ms", 100, "--port", self.port,
                                    "--metrics", f"127.0.0.1:{self.metrics_port}")
        line = self.agent.wait_line(f"attached to pid {self.fx.pid}", timeout=60)
        assert "HTTP mode" in line, line
        line = self.agent.wait_line(f"tracing llama_decode of pid {self.fx.pid}", timeout=30)
        assert "libllama" in line, line

    def metrics(self, n):
        """/metrics once all n requests' records are out (a record waits for
        the engine's marks it joins)."""
        return at.metrics_when(self.metrics_port, lambda m: at.series_sum(
            m, "gen_ai_server_request_duration_seconds_count") >= n)

    def stop(self):
        time.sleep(0.3)
        assert self.agent.stop() == 0, self.agent.lines[-20:]
        said = [l for l in self.agent.lines if l.startswith("libllama:")]
        print("     " + (said[0] if said else "(no libllama line)"))
        self.fx.stop()
        c = sqlite3.connect(self.db)
        c.row_factory = sqlite3.Row
        try:
            self.steps = [dict(r) for r in c.execute(
                "SELECT * FROM steps WHERE source = 'libllama' ORDER BY t_start_ns")]
        finally:
            c.close()
        self.rows = at.rows(self.db)
        self.fx_steps, self.fx_reqs = self.fx.marks()
        return self


def _fixture_marks(steps, req):
    """The fixture's steps (indexes) that scheduled the request, computed its
    first token, and were its last, from its own decode-call records."""
    t_sub, t_end = int(req["t_submit"]), int(req["t_last_tok"])
    mine = [i for i, s in enumerate(steps) if t_sub <= s["t0"] and s["t1"] <= t_end
            and any(it[0] == req["seq"] for it in s["items"])]
    first = next(i for i in mine
                 if any(it[0] == req["seq"] and it[3] > 0 for it in steps[i]["items"]))
    return mine[0], first, mine[-1], len(mine)


def _p(values, p):
    return at.pct([abs(v) for v in values], p)


def _check_rows(t, want):
    missing = [rid for rid in want if rid not in t.rows]
    assert not missing, f"no row for {missing}; agent said:\n" + "\n".join(t.agent.lines[-20:])
    for rid, status in want.items():
        r, fx = t.rows[rid], t.fx_reqs[rid]
        assert status == 200 and r["http_status"] == 200, (rid, status, r["http_status"])
        assert r["source"] == "http+libllama", (rid, r["source"], r["engine_join"])
        assert r["engine_join"] in ("read-order", "read-order+usage", "read-order+tie"), r
        ph = [r[k] for k in PHASES]
        assert all(p is not None and p >= 0 for p in ph), (rid, ph)
        assert sum(ph) == r["e2e_ns"], (rid, ph, r["e2e_ns"])
        assert r["server_wait_ns"] is None, r
        # the tokenizer's count, as the engine computed it: cached + prefilled
        assert r["engine_prompt_tokens"] == fx["prompt_tokens"], (rid, r["engine_prompt_tokens"], fx)
        assert r["prompt_tokens"] == fx["prompt_tokens"], (rid, r["prompt_tokens"], fx)
        assert r["cached_prompt_tokens"] == fx["cached"], (rid, r["cached_prompt_tokens"], fx)
        if r["engine_join"] != "read-order+tie":
            assert r["seq_id"] == fx["seq"], (rid, r["seq_id"], fx["seq"])
    # equals that started in one step (generations that fit the requests'
    # usage equally well): the agent cannot tell which request had which
    # sequence, but the group's sequences are theirs
    ties = {}
    for rid in want:
        r = t.rows[rid]
        if r["engine_join"] == "read-order+tie":
            ties.setdefault(r["t_sched_ns"], []).append(rid)
    for sched, rids in ties.items():
        assert len(rids) > 1, (sched, rids)
        assert sorted(t.rows[rid]["seq_id"] for rid in rids) == \
            sorted(t.fx_reqs[rid]["seq"] for rid in rids), [(rid, t.rows[rid]["seq_id"],
                                                              t.fx_reqs[rid]["seq"]) for rid in rids]
    if ties:
        print(f"     matched among equals: {sum(map(len, ties.values()))} of {len(want)} "
              f"requests in {len(ties)} steps")


def _check_marks(t, rids, timed):
    """Every fixture decode call is one 'libllama' step, inside both of the
    fixture's brackets around it (its JavaScript marks around the engine's
    call, and the native marks tests/decode_mark.c takes around
    llama_decode); each request's scheduled / first-token / last-step marks
    are exactly those of the steps the fixture ran it in; with timed, all of
    them agree with the native marks within 1 ms at p99.  The native marks
    are taken in the calling thread right around the call: the one
    scheduling point between them and the uprobes' is the return to user
    space after a trap, and a call whose thread waited on a run queue for
    WAITED_MAX_NS or more (the shim reads its run_delay around the call) is
    counted and left out of the bound, its lateness explained by the machine.
    The JavaScript marks, a wake-up away (a promise resolved on another
    thread), are late by milliseconds on a busy machine: printed, not
    bounded."""
    assert len(t.steps) == len(t.fx_steps), (len(t.steps), len(t.fx_steps))
    fx = t.fx_steps
    d_start = [a["t_start_ns"] - f["c0"] for a, f in zip(t.steps, fx)]
    d_end = [f["c1"] - a["t_end_ns"] for a, f in zip(t.steps, fx)]
    assert all(d >= 0 for d in d_start + d_end), (min(d_start), min(d_end))
    js = [a["t_start_ns"] - f["t0"] for a, f in zip(t.steps, fx)] + \
        [f["t1"] - a["t_end_ns"] for a, f in zip(t.steps, fx)]
    clean = [f["waited"] < WAITED_MAX_NS for f in fx]
    d_seq = []
    for rid in rids:
        r = t.rows[rid]
        sched, first, last, n = _fixture_marks(fx, t.fx_reqs[rid])
        want = (t.steps[sched]["t_start_ns"], t.steps[first]["t_end_ns"], t.steps[last]["t_end_ns"])
        got = (r["t_sched_ns"], r["t_first_ns"], r["t_last_ns"])
        assert got == want, (rid, got, want, sched, first, last)
        assert 1 <= r["prefill_steps"] <= first - sched + 1, (rid, r["prefill_steps"], sched, first)
        d_seq += [d for d, i in ((got[0] - fx[sched]["c0"], sched), (fx[first]["c1"] - got[1], first),
                                 (fx[last]["c1"] - got[2], last)) if clean[i]]
    kept = [i for i in range(len(fx)) if clean[i]]
    d_start, d_end = [d_start[i] for i in kept], [d_end[i] for i in kept]
    worst = sorted(range(len(kept)), key=lambda k: -max(d_start[k], d_end[k]))[:4]
    worst = "; ".join(f"step {kept[k]}: start +{d_start[k] / 1e3:.0f} µs, end +{d_end[k] / 1e3:.0f} "
                      f"µs, {fx[kept[k]]['items']}" for k in worst)
    us = lambda v, p: round(_p(v, p) / 1e3, 1)
    every = d_start + d_end + d_seq
    waited = sorted(f["waited"] for f in fx if f["waited"] >= WAITED_MAX_NS)
    print(f"     agent vs llama_decode's caller, µs: step start p50 {us(d_start, 50)} p99 "
          f"{us(d_start, 99)}, step end p50 {us(d_end, 50)} p99 {us(d_end, 99)} (n={len(kept)} "
          f"steps); sequence marks p50 {us(d_seq, 50)} p99 {us(d_seq, 99)} (n={len(d_seq)}); all "
          f"marks p99 {us(every, 99)} max {round(max(every) / 1e3, 1)}; {len(waited)} of {len(fx)} "
          f"calls left out, their thread kept waiting {WAITED_MAX_NS // 1000} µs or more "
          f"(up to {round(waited[-1] / 1e3) if waited else 0} µs); the JavaScript marks' distance "
          f"p50 {us(js, 50)} p99 {us(js, 99)} max {round(max(js) / 1e3, 1)}")
    if not timed:
        return
    # most calls run unhindered even on a busy machine (nice -20): fewer
    # would leave the bound to a handful of calls
    assert len(kept) * 2 >= len(fx), f"only {len(kept)} of {len(fx)} calls ran without waiting"
    for name, v in (("step start", d_start), ("step end", d_end), ("all marks", every)):
        assert _p(v, 99) <= MARKS_P99_NS, (name, _p(v, 99), "worst: " + worst)


def test_agent_llama_engine_marks_and_prefix_reuse():
    """Mixed sequential and concurrent requests, then one long prompt sent
    twice: every request gets the engine's marks, its prompt tokens are the
    tokenizer's, the repeat shows the reused tokens, and the marks agree
    with the native ones around llama_decode within 1 ms at p99."""
    t = Traced(4)
    want = {}
    for i in range(4):
        rid = f"l-seq-{i}"
        want[rid] = lt.stream(t.port, rid, f"request {i}: " + "tell me something " * (i + 1), 3 + i)
    want.update(lt.concurrently(t.port, [(f"l-conc-{i}", f"concurrent {i} " + "abc " * (3 * i),
                                        8 + 3 * i) for i in range(8)]))
    for k in range(2):
        rid = f"l-long-{k}"
        want[rid] = lt.stream(t.port, rid, LONG, 4)
    m = t.metrics(len(want))
    t.stop()
    _check_rows(t, want)
    first, again = t.rows["l-long-0"], t.rows["l-long-1"]
    n = t.fx_reqs["l-long-1"]["prompt_tokens"]
    assert again["cached_prompt_tokens"] == n - 1 and first["cached_prompt_tokens"] < n // 2, \
        (first["cached_prompt_tokens"], again["cached_prompt_tokens"], n)
    assert again["prefill_ns"] < first["prefill_ns"], (first["prefill_ns"], again["prefill_ns"])
    # /metrics: the prompt tokens of every joined request (warm-up ones
    # before the attach are not in it), and the part the cache held
    rows = [t.rows[rid] for rid in want]
    for name, col in (("kpi_prompt_tokens_engine_total", "engine_prompt_tokens"),
                      ("kpi_prompt_tokens_cached_total", "cached_prompt_tokens")):
        assert m.get(name) == sum(r[col] for r in rows), (name, m.get(name), col)
    print(f"     long prompt of {n} tokens: {first['cached_prompt_tokens']} reused, prefill "
          f"{first['prefill_ns'] / 1e6:.2f} ms; again: {again['cached_prompt_tokens']} reused, "
          f"prefill {again['prefill_ns'] / 1e6:.2f} ms")
    _check_marks(t, list(want), timed=True)


def test_agent_llama_burst_queue_grows():
    """16 requests at once on 4 sequences: the last ones wait for a sequence,
    and the queue time the agent gives them grows with their position."""
    t = Traced(4)
    want = lt.concurrently(t.port, [(f"l-burst-{i:02d}", f"burst {i} " + "xyz " * 6, 24)
                                  for i in range(16)])
    t.stop()
    _check_rows(t, want)
    _check_marks(t, list(want), timed=False)
    order = sorted(want, key=lambda rid: t.rows[rid]["t_req_read_ns"])
    q = [t.rows[rid]["queue_ns"] for rid in order]
    groups = [sum(q[k:k + 4]) / 4 for k in range(0, 16, 4)]
    print("     queue by position (mean of 4), ms: " + ", ".join(f"{g / 1e6:.2f}" for g in groups))
    assert all(a < b for a, b in zip(groups, groups[1:])), groups
    assert groups[-1] > groups[0] + 1e6, groups


def test_agent_llama_tools_show_prefix_reuse():
    """kpi-report and kpitop on a synthetic trace of a llama.cpp server
    (http+libllama rows): its prefix cache holds 80% of the prompt tokens,
    then for a minute 5%, and the prompts are computed again (prefill x6,
    TTFT with it). kpi-report names the drop; kpitop shows the hit ratio."""
    import tracetest
    tracetest.require(tracetest.REPORT, "tools/kpi-report/")
    tracetest.require(tracetest.KPITOP, "tools/kpitop/")
    db_path = os.path.join(kpitest.tmpdir("kpi-llama-tools-"), "reuse.db")
    db = tracetest.generate(db_path, duration_s=900, rate=10)
    tracetest.migrate(db)
    t0, t1 = tracetest.T0 + 600 * 10**9, tracetest.T0 + 660 * 10**9
    db.execute("UPDATE requests SET source = 'http+libllama', engine_join = 'read-order', "
               "engine_prompt_tokens = prompt_tokens, cached_prompt_tokens = prompt_tokens * 4 / 5")
    db.execute("UPDATE requests SET cached_prompt_tokens = prompt_tokens / 20, "
               "ttft_ns = ttft_ns + 5 * prefill_ns, e2e_ns = e2e_ns + 5 * prefill_ns, "
               "prefill_ns = 6 * prefill_ns WHERE t_arrive_ns >= ? AND t_arrive_ns < ?", (t0, t1))
    db.execute(f"PRAGMA user_version = {tracetest.schema_version()}")
    db.commit()
    db.close()
    p = tracetest.run_tool([tracetest.REPORT, "--db", db_path])
    assert p.returncode == 0, p.stderr
    causes = [c for _, _, c in tracetest.report_findings(p.stdout)]
    assert "prefix-cache reuse dropped" in causes, causes
    m = re.search(r"^\| prompt tokens from the prefix cache % \| (\d+) \| (\d+) \|$", p.stdout, re.M)
    assert m and int(m.group(1)) >= 75 and int(m.group(2)) <= 10, (m and m.groups(), p.stdout)
    print(f"     kpi-report: {causes}; reuse {m.group(1)}% -> {m.group(2)}%")
    p = tracetest.run_tool([tracetest.KPITOP, "--db", db_path, "--once", "--window", "1m",
                            "--at", "+630s", "--width", "200"])
    assert p.returncode == 0, p.stderr
    assert re.search(r"prefix cache: \d+% of prompt tokens reused \(\d+ of \d+ requests\)",
                     p.stdout), p.stdout[:400]
