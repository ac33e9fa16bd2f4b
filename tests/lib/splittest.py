"""Helpers for the engine split kpi-agent infers from stream timing (issue 33): a
closed-loop streaming load of 1-1,500-token prompts, the truth each kind of server
gives (kpi-infer's USDT rows, a llama.cpp server's http+libllama rows, the log of
tests/lib/batch_server.py), and the error of the inferred split against it.

Truth and inference are put on one frame: both start at the request's read
(t_req_read of the HTTP row), so queue = t_sched - t_req_read and prefill =
t_first - t_sched, t_sched the start of the first batch step that held the
request's prompt and t_first the end of the step that gave its first token."""
import bisect, json, math, os, random, sqlite3

import agenttest as at
import benchtest


def prompt_lengths(n, seed=1, lo=1, hi=1500):
    """n prompt lengths in tokens, log-uniform over [lo, hi]."""
    rnd = random.Random(seed)
    return [int(round(math.exp(rnd.uniform(math.log(lo), math.log(hi))))) for _ in range(n)]


def closed_loop(port, concurrency, n, tmp, endpoint="completions", seed=1, max_tokens="uniform:16:48",
                longest=1500, shortest=1):
    """n streamed requests from kpi-bench keeping `concurrency` in flight (closed
    loop, keep-alive), prompts of 1 to `longest` tokens (log-uniform, in bytes: the
    byte tokenizer of the tiny model and of batch_server.py; `shortest` to
    `longest`), --ignore-eos.
    Returns kpi-bench's CSV rows (request_id the server's x-request-id)."""
    lens = os.path.join(tmp, f"prompt-lens-{seed}.txt")
    with open(lens, "w") as f:
        f.write("\n".join(map(str, prompt_lengths(max(n, 100), seed, lo=shortest, hi=longest))) + "\n")
    csv_path = os.path.join(tmp, f"bench-{port}-{concurrency}-{seed}.csv")
    p = benchtest.kpi_bench("--url", f"http://127.0.0.1:{port}", "--endpoint", endpoint,
                            "--concurrency", concurrency, "--requests", n,
                            "--prompt-len", f"file:{lens}", "--max-tokens", max_tokens,
                            "--ignore-eos", "--temperature", 0, "--seed", seed,
                            "--csv", csv_path, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    return benchtest.read_csv(csv_path)


# ---- truth ------------------------------------------------------------------

def truth_from_rows(db, source):
    """{request id: (t_sched, t_first)} of the rows of db whose split was measured
    by the engine's probes (source 'usdt' or 'http+libllama')."""
    return {r["request_id"]: (r["t_sched_ns"], r["t_first_ns"])
            for r in at.query(db, "SELECT request_id, t_sched_ns, t_first_ns FROM requests "
                                  "WHERE source = ? AND t_sched_ns IS NOT NULL "
                                  "AND t_first_ns IS NOT NULL", source)}


def truth_from_log(path):
    """{request id: (t_sched, t_first)} from batch_server.py's log."""
    out = {}
    with open(path) as f:
        for line in f:
            m = json.loads(line)
            if m["kind"] == "req" and m["t_sched"] is not None and m["t_first"] is not None:
                out[m["id"]] = (m["t_sched"], m["t_first"])
    return out


def steps_from_log(path):
    """batch_server.py's steps, in order: dicts with t0, t1, replica, prefill."""
    with open(path) as f:
        return [m for m in map(json.loads, f) if m["kind"] == "step"]


# ---- did the server meet the rules' assumptions? ------------------------------
# The rules assume the server writes each step's tokens together, soon after the
# step: a server that lags behind its engine (a busy writer, a machine short of
# CPU) breaks that, and the agent must decline there.  Each emission is paired
# with the write the agent timed for it, from the server's own truth.

def lags_batch(log_path, http_db):
    """[(step end, write time)] of every token batch_server.py emitted: its
    k-th emission of a request against the agent's k-th content write of it
    (a --token-detail trace)."""
    writes, out = token_writes(http_db), []
    with open(log_path) as f:
        for m in map(json.loads, f):
            if m["kind"] == "req":
                out += list(zip(m["emits"], writes.get(m["id"], [])))
    return out


def lags_usdt(truth_db):
    """[(step end, write time)] of every token of kpi-infer, from the USDT
    agent's trace (--token-detail): a request's first token's step is the last
    to end by its t_first, its k-th token the k-th step after (every running
    sequence gets one a step); requests whose tokens shared a write are left out."""
    ends = [r["t_end_ns"] for r in at.query(truth_db, "SELECT t_end_ns FROM steps "
                                                      "WHERE t_end_ns IS NOT NULL ORDER BY t_end_ns")]
    writes, out = token_writes(truth_db), []
    for r in at.query(truth_db, "SELECT request_id, t_first_ns, output_tokens FROM requests "
                                "WHERE source = 'usdt' AND t_first_ns IS NOT NULL"):
        w = writes.get(r["request_id"], [])
        f = bisect.bisect_right(ends, r["t_first_ns"]) - 1
        if f < 0 or len(w) != r["output_tokens"] or f + len(w) > len(ends):
            continue
        out += [(ends[f + k], w[k]) for k in range(len(w) - 1)]     # the last rides with the end
    return out


# the window kpi-agent looks at around a request (agent/track/split_infer.c):
# this many decode steps either side, clamped to [MIN, MAX] ns
WINDOW_STEPS, WINDOW_MIN_NS, WINDOW_MAX_NS = 8, 100_000_000, 2_000_000_000


def assumptions_met(lags, truth, share=0.3):
    """{request id: True} for the requests around whose prompt the server met
    the rules' assumption, tokens of one step written together: every step
    of the window the agent judges the request by (WINDOW_STEPS decode steps,
    the median step, either side of its prompt's first step and its first
    token, as agent/track/split_infer.c looks) had all its tokens written
    within `share` of a decode step (the 10th percentile of the steps'
    lengths) of each other (the agent's own bound), and before the next step
    ended.  A late write anywhere in that window rightly declines the row, so
    it is counted only where the whole window held."""
    ends = sorted({e for e, _ in lags})
    if len(ends) < 2:
        return {}
    first, last = {}, {}
    for e, w in lags:
        first[e] = min(first.get(e, w), w)
        last[e] = max(last.get(e, w), w)
    gaps = [b - a for a, b in zip(ends, ends[1:])]
    short = at.pct(gaps, 10)
    span = min(max(WINDOW_STEPS * at.pct(gaps, 50), WINDOW_MIN_NS), WINDOW_MAX_NS)
    ok = {e: last[e] - first[e] <= share * short and (i + 1 == len(ends) or last[e] < ends[i + 1])
          for i, e in enumerate(ends)}
    met = {}
    for rid, (t_sched, t_first) in truth.items():
        lo = max(bisect.bisect_right(ends, t_sched - span) - 1, 0)
        hi = min(bisect.bisect_right(ends, t_first + span) + 1, len(ends))
        met[rid] = all(ok[e] for e in ends[lo:hi])
    return met


# ---- the inferred split against the truth -----------------------------------

def http_rows(db):
    """The streamed 200 rows of an HTTP-mode trace with a first content write."""
    return at.query(db, "SELECT * FROM requests WHERE source = 'http' AND http_status = 200 "
                        "AND stream = 1 AND t_first_write_ns IS NOT NULL "
                        "AND t_req_read_ns IS NOT NULL")


def errors(rows, truth, split_of):
    """Compares split_of(row) -> (queue, prefill, rule) or None with the truth
    of the same request.  Returns a dict: n (rows with a truth), inferred,
    share, per rule counts, queue and prefill |error| p50/p90/max in ms,
    within (the share of inferred rows whose prefill is within max(20%, 2 ms)
    of the truth) and within_queue (likewise their queue)."""
    n, rules, qe, pe, within, within_q, detail = 0, {}, [], [], 0, 0, []
    for r in rows:
        t = truth.get(r["request_id"])
        if not t:
            continue
        n += 1
        s = split_of(r)
        if s is None:
            continue
        q, p, rule = s
        rules[rule] = rules.get(rule, 0) + 1
        tq, tp = t[0] - r["t_req_read_ns"], t[1] - t[0]
        qe.append(abs(q - tq))
        pe.append(abs(p - tp))
        within += abs(p - tp) <= max(0.2 * tp, 2e6)
        within_q += abs(q - tq) <= max(0.2 * tq, 2e6)
        detail.append((r["request_id"], rule, q, p, tq, tp))
    k = len(pe)

    def ms(v):
        return {"p50": round(at.pct(v, 50) / 1e6, 3), "p90": round(at.pct(v, 90) / 1e6, 3),
                "max": round(max(v) / 1e6, 3) if v else 0}
    return {"n": n, "inferred": k, "share": round(k / n, 3) if n else 0, "rules": rules,
            "queue_ms": ms(qe), "prefill_ms": ms(pe),
            "within": round(within / k, 3) if k else 0,
            "within_queue": round(within_q / k, 3) if k else 0, "detail": detail}


def stored_split(r):
    """The split the agent stored on an http row (None where it declined)."""
    if r.get("split_rule") is None or r.get("queue_ns") is None:
        return None
    return r["queue_ns"], r["prefill_ns"], r["split_rule"]


def token_writes(db):
    """{request id: [content write times]} of a --token-detail trace."""
    c = sqlite3.connect(db)
    try:
        out = {}
        for rid, t in c.execute("SELECT request_id, t_write_ns FROM tokens ORDER BY request_id, idx"):
            out.setdefault(rid, []).append(t)
        return out
    finally:
        c.close()


# ---- one measured case ------------------------------------------------------------

def _http_agent(db, *args, pid=None):
    """The black-box agent: --http-only, every token's write kept."""
    return at.start_agent(db, "--flush-ms", 200, "--http-only", "--token-detail", *args, pid=pid)


def _split_line(agent):
    return next((ln for ln in agent.lines if ln.startswith("split:")), "")


def _stop(agent):
    assert agent.stop() == 0, agent.lines[-20:]
    return _split_line(agent)


def run_kpi(tmp, concurrency, n, chunked, preset="tiny", longest=1500, shortest=1,
            max_tokens="uniform:16:48"):
    """kpi-infer (--threads 1, nice -20: the reference ahead of the load for
    the CPU) traced at once by a USDT agent (the truth) and an --http-only one.
    chunked: a 256-token budget a step, else one no prompt fills (32768).
    Prompts of shortest to longest tokens, max_tokens kpi-bench's."""
    import benchtest as bt, kpitest, servertest
    model = servertest.tiny_model() if preset == "tiny" else bt.preset_model(preset)
    port = kpitest.free_port()
    daemon = kpitest.Proc(["nice", "-n", "-20", at.INFER, "--model", model, "--port", str(port),
                           "--threads", "1", "--max-seqs", "64", "--max-queue", "1024",
                           "--max-batched-tokens", "256" if chunked else "32768"])
    daemon.wait_line("listening on", timeout=120)
    truth_db, http_db = os.path.join(tmp, "truth.db"), os.path.join(tmp, "http.db")
    truth_agent = at.start_agent(truth_db, "--flush-ms", 200, "--token-detail", pid=daemon.pid)
    http_agent = _http_agent(http_db, pid=daemon.pid)
    closed_loop(port, concurrency, n, tmp, longest=longest, shortest=shortest, max_tokens=max_tokens)
    _stop(truth_agent)
    said = _stop(http_agent)
    daemon.stop()
    truth = truth_from_rows(truth_db, "usdt")
    return measure(http_db, truth, assumptions_met(lags_usdt(truth_db), truth), said, concurrency)


def run_batch(tmp, concurrency, n, *server_args, script="batch_server.py", longest=1500,
              shortest=1):
    """tests/lib/batch_server.py, or another stand-in that logs as it does
    (script: vllm_server.py), at nice -20, traced by an --http-only agent; its
    log is the truth.  Prompts of shortest to longest tokens."""
    import kpitest, sys
    port, log = kpitest.free_port(), os.path.join(tmp, "server.log")
    srv = kpitest.Proc(["nice", "-n", "-20", sys.executable,
                        os.path.join(kpitest.ROOT, "tests", "lib", script), str(port), log,
                        *map(str, server_args)])
    srv.wait_line("listening on", timeout=60)
    http_db = os.path.join(tmp, "http.db")
    agent = at.start_agent(http_db, "--flush-ms", 200, "--token-detail", "--port", port, wait=False)
    agent.wait_line(f"attached to pid {srv.pid}", timeout=60)
    closed_loop(port, concurrency, n, tmp, endpoint="chat", longest=longest, shortest=shortest)
    said = _stop(agent)
    srv.stop()
    truth = truth_from_log(log)
    return measure(http_db, truth, assumptions_met(lags_batch(log, http_db), truth), said,
                   concurrency)


LLAMA_LONGEST = 400     # prompt tokens: the fixture's context holds 512 a sequence


def run_llama(tmp, concurrency, n):
    """tests/lib/llama_server.mjs (node-llama-cpp, 4 sequences, nice -20)
    traced at once by an agent that probes llama_decode (the truth,
    http+libllama) and an --http-only one."""
    import llamatest
    fx = llamatest.Fixture(4, tmp)
    truth_db, http_db = os.path.join(tmp, "truth.db"), os.path.join(tmp, "http.db")
    truth_agent = at.start_agent(truth_db, "--flush-ms", 200, "--port", fx.port, wait=False)
    truth_agent.wait_line(f"tracing llama_decode of pid {fx.pid}", timeout=60)
    http_agent = _http_agent(http_db, "--port", fx.port)
    http_agent.wait_line(f"attached to pid {fx.pid}", timeout=60)
    closed_loop(fx.port, concurrency, n, tmp, endpoint="chat", longest=LLAMA_LONGEST)
    _stop(truth_agent)
    said = _stop(http_agent)
    fx.stop()
    truth = truth_from_rows(truth_db, "http+libllama")
    return measure(http_db, truth, None, said, concurrency)


def measure(http_db, truth, met, said, warmup):
    """The inferred split of an --http-only trace against the truth: errors()'s
    figures, and where the server's assumptions were measured (met), the share
    inferred among the requests around which they held; the agent's exit line.
    The first `warmup` requests read are left out: the closed loop's first
    round reaches an idle engine at once, and until one of them decodes its
    steps leave no writes to find them by (docs/agent.md, `unseen`)."""
    rows = sorted(http_rows(http_db), key=lambda r: r["t_req_read_ns"])[warmup:]
    e = errors(rows, truth, stored_split)
    e["agent"] = said
    if met is not None:
        ids = [r["request_id"] for r in rows if r["request_id"] in truth]
        held = [rid for rid in ids if met.get(rid)]
        inferred = {d[0] for d in e["detail"]}
        e["met"] = len(held)
        e["share_met"] = round(sum(rid in inferred for rid in held) / len(held), 3) if held else None
    return e
