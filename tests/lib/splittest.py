"""Helpers for the engine split kpi-agent infers from stream timing (issue 33): a
closed-loop streaming load of 1-1,500-token prompts, the truth each kind of server
gives (kpi-infer's USDT rows, a llama.cpp server's http+libllama rows, the log of
tests/lib/batch_server.py), and the error of the inferred split against it.

Truth and inference are put on one frame: both start at the request's read
(t_req_read of the HTTP row), so queue = t_sched - t_req_read and prefill =
t_first - t_sched, t_sched the start of the first batch step that held the
request's prompt and t_first the end of the step that gave its first token."""
import json, math, os, random, sqlite3

import agenttest as at
import benchtest


def prompt_lengths(n, seed=1, lo=1, hi=1500):
    """n prompt lengths in tokens, log-uniform over [lo, hi]."""
    rnd = random.Random(seed)
    return [int(round(math.exp(rnd.uniform(math.log(lo), math.log(hi))))) for _ in range(n)]


def closed_loop(port, concurrency, n, tmp, endpoint="completions", seed=1, max_tokens="uniform:16:48",
                longest=1500):
    """n streamed requests from kpi-bench keeping `concurrency` in flight (closed
    loop, keep-alive), prompts of 1 to `longest` tokens (log-uniform, in bytes: the
    byte tokenizer of the tiny model and of batch_server.py), --ignore-eos.
    Returns kpi-bench's CSV rows (request_id the server's x-request-id)."""
    lens = os.path.join(tmp, f"prompt-lens-{seed}.txt")
    with open(lens, "w") as f:
        f.write("\n".join(map(str, prompt_lengths(max(n, 100), seed, hi=longest))) + "\n")
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


# ---- the inferred split against the truth -----------------------------------

def http_rows(db):
    """The streamed 200 rows of an HTTP-mode trace with a first content write."""
    return at.query(db, "SELECT * FROM requests WHERE source = 'http' AND http_status = 200 "
                        "AND stream = 1 AND t_first_write_ns IS NOT NULL "
                        "AND t_req_read_ns IS NOT NULL")


def errors(rows, truth, split_of):
    """Compares split_of(row) -> (queue, prefill, rule) or None with the truth
    of the same request.  Returns a dict: n (rows with a truth), inferred,
    share, per rule counts, queue and prefill |error| p50/p90/max in ms, and
    within (the share of inferred rows whose prefill is within max(20%, 2 ms)
    of the truth)."""
    n, rules, qe, pe, within, detail = 0, {}, [], [], 0, []
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
        detail.append((r["request_id"], rule, q, p, tq, tp))
    k = len(pe)

    def ms(v):
        return {"p50": round(at.pct(v, 50) / 1e6, 3), "p90": round(at.pct(v, 90) / 1e6, 3),
                "max": round(max(v) / 1e6, 3) if v else 0}
    return {"n": n, "inferred": k, "share": round(k / n, 3) if n else 0, "rules": rules,
            "queue_ms": ms(qe), "prefill_ms": ms(pe),
            "within": round(within / k, 3) if k else 0, "detail": detail}


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
