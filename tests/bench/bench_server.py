#!/usr/bin/env python3
"""kpi-infer server benchmark: requests/s and client-side TTFT and TPOT
(p50, p99) at concurrency 1, 8 and 32, streaming completions over keep-alive
connections against a real daemon serving the tiny built-in model.

Closed loop: each of C threads sends its next request when the previous one
ends. Rounds are interleaved (1, 8, 32, 1, 8, 32, ...) and each figure is the
median over rounds with its min-max spread. The client is Python, so at high
concurrency its own overhead is part of the numbers; kpi-bench (C) is the
precise client. HTTP overhead (last request byte -> kpi:request__admitted)
needs the agent's kernel timestamps and is measured by the agent's benchmark."""
import argparse, json, os, statistics, sys, threading, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "lib"))
import servertest as st  # noqa: E402
from servertest import Reader, post_bytes, sse_events  # noqa: E402


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def one_round(d, conc, n_req, max_tokens):
    """Returns dict with req/s and the TTFT/TPOT samples (ms)."""
    lock = threading.Lock()
    left = [n_req]
    ttft, tpot, errors = [], [], []
    body = json.dumps(dict(prompt="The benchmark prompt is a short sentence of plain text.",
                           max_tokens=max_tokens, ignore_eos=True, temperature=0,
                           stream=True)).encode()
    req = post_bytes("/v1/completions", body)

    def worker():
        s = d.connect()
        rd = Reader(s)
        while True:
            with lock:
                if left[0] == 0:
                    break
                left[0] -= 1
            t0 = time.perf_counter()
            s.sendall(req)
            status, _ = rd.head()
            if status != 200:
                errors.append(status)
                break
            times = []
            for c in rd.chunks():
                for ev in sse_events(c):
                    if ev != "[DONE]" and ev["choices"]:
                        times.append(time.perf_counter())
            if times:
                ttft.append((times[0] - t0) * 1e3)
                if len(times) > 1:
                    tpot.append((times[-1] - times[0]) * 1e3 / (len(times) - 1))
        s.close()

    threads = [threading.Thread(target=worker) for _ in range(conc)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return dict(rps=len(ttft) / wall, ttft=ttft, tpot=tpot, errors=errors)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=os.path.join(st.kpitest.BUILD, "bench"))
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    st.require_binary()
    os.makedirs(a.out, exist_ok=True)

    rounds = 2 if a.quick else 3
    per_conc = {1: 8, 8: 32, 32: 64} if a.quick else {1: 24, 8: 96, 32: 192}
    max_tokens = 16 if a.quick else 32
    # one engine thread: the Python client needs the other core, and an engine
    # pool that shares its cores with the client runs far slower
    d = st.Daemon("--max-seqs", 64, "--threads", 1, shared=True)
    try:
        complete = d.request("POST", "/v1/completions",
                             dict(prompt="warm up", max_tokens=4, ignore_eos=True))
        assert complete[0] == 200, complete
        results = {c: [] for c in per_conc}
        for r in range(rounds):
            for conc, n in per_conc.items():
                res = one_round(d, conc, n, max_tokens)
                if res["errors"]:
                    raise SystemExit(f"bench_server: HTTP {res['errors'][:5]} at concurrency {conc}")
                results[conc].append(res)
                print(f"round {r + 1}/{rounds} c={conc}: {res['rps']:.1f} req/s", file=sys.stderr)
    finally:
        d.stop()

    summary = {}
    for conc, rs in results.items():
        def agg(f):
            vals = [f(x) for x in rs]
            return dict(median=statistics.median(vals), min=min(vals), max=max(vals))
        summary[conc] = dict(
            requests_per_s=agg(lambda x: x["rps"]),
            ttft_p50_ms=agg(lambda x: pct(x["ttft"], 50)),
            ttft_p99_ms=agg(lambda x: pct(x["ttft"], 99)),
            tpot_p50_ms=agg(lambda x: pct(x["tpot"], 50)),
            tpot_p99_ms=agg(lambda x: pct(x["tpot"], 99)),
            requests=sum(len(x["ttft"]) for x in rs))
    doc = dict(model=d.model, max_tokens=max_tokens, rounds=rounds, quick=a.quick,
               client="python threads, keep-alive, streaming", concurrency=summary)
    with open(os.path.join(a.out, "server.json"), "w") as f:
        json.dump(doc, f, indent=1)

    def cell(m):
        return f"{m['median']:.2f} ({m['min']:.2f}-{m['max']:.2f})"

    print("## kpi-infer server (bench_server.py)\n")
    print(f"Streaming completions, tiny model, {max_tokens} output tokens, ignore_eos, closed "
          f"loop over keep-alive connections, Python client; median over {rounds} "
          "interleaved rounds (min-max).\n")
    print("| concurrency | requests | req/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms |")
    print("|---|---|---|---|---|---|---|")
    for conc, s in summary.items():
        print(f"| {conc} | {s['requests']} | {cell(s['requests_per_s'])} | {cell(s['ttft_p50_ms'])} | "
              f"{cell(s['ttft_p99_ms'])} | {cell(s['tpot_p50_ms'])} | {cell(s['tpot_p99_ms'])} |")
    print("\nHTTP overhead (last request byte to kpi:request__admitted) is the agent "
          "benchmark's: it needs kernel timestamps.\n")


if __name__ == "__main__":
    main()
