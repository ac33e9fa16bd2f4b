#!/usr/bin/env python3
"""The engine split kpi-agent infers from stream timing (issue 33), measured
against the truth of three servers: kpi-infer (its USDT probes, traced at once
by a second agent), node-llama-cpp (llama_decode through libllama, likewise)
and tests/lib/batch_server.py (its own log); each under a kpi-bench closed loop
of streamed requests, prompts of 1 to 1,500 tokens (log-uniform; 400 for the
llama.cpp fixture's context), at 1 to 16 concurrent streams, chunked prefill on
and off.  Per server and concurrency: the share of streamed rows given a split,
among all and among those around which the server met the rules' assumptions
(its writes of each step within 30% of a step after it: splittest.py measures
that from the server's own marks), and the error of queue_ns and prefill_ns
against the truth (p50, p90, max) and the share of prefills within
max(20%, 2 ms).  And the servers where the agent must decline: one that
buffers its writes, two engines behind one port, speculative decoding.
Writes split.json; SPLIT_CASE=SUBSTR in the environment runs only the cases
whose name holds it."""
import json, os, shutil, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
import kpitest  # noqa: E402
import agenttest as at  # noqa: E402
import benchtest as bt  # noqa: E402
import splittest as st  # noqa: E402

TITLE = "## kpi-agent's inferred engine split against the engines' own"


def cases(quick):
    """(name, server, mode, concurrency, requests, runner args).  kpi-infer's
    small preset steps at tens of ms, as an engine on a GPU does, and
    prefills at about 5 ms a token on one thread here, so it runs fewer
    requests; its tiny preset steps at 0.5 ms, near what the wire resolves on a
    loaded 2-core machine."""
    out = []
    for c in ((1, 4, 16) if quick else (1, 2, 4, 8, 16)):
        n = max(24, 12 * c) if quick else max(40, 25 * c)
        for chunked in (False, True):
            mode = "chunked" if chunked else "whole prompts"
            out.append((f"batch {mode} c{c}", "batch_server.py", mode, c, n,
                        ("batch", ["--chunked", "--token-budget", 512] if chunked else [])))
            if c in (1, 4, 16):
                out.append((f"kpi-infer tiny {mode} c{c}", "kpi-infer (tiny)", mode, c, n,
                            ("kpi", chunked, "tiny")))
            if c in ((4,) if quick else (1, 4, 8, 16)):
                m = 16 if quick else max(24, 8 * c)
                out.append((f"kpi-infer small {mode} c{c}", "kpi-infer (small)", mode, c, m,
                            ("kpi", chunked, "small")))
        if c != 2:
            out.append((f"llama c{c}", "node-llama-cpp", "4 sequences", c, n, ("llama",)))
    for name, args in (("buffered", ["--buffer-ms", 20]), ("replicas", ["--replicas", 2]),
                       ("speculative", ["--spec", 4])):
        out.append((f"batch {name} c8", f"batch_server.py --{name}", name, 8, 160 if not quick else 64,
                    ("batch", args)))
    return out


def run(kind_args, tmp, c, n):
    kind = kind_args[0]
    if kind == "batch":
        return st.run_batch(tmp, c, n, *kind_args[1])
    if kind == "kpi":
        return st.run_kpi(tmp, c, n, kind_args[1], kind_args[2])
    return st.run_llama(tmp, c, n)


def fmt(ms):
    return f"{ms['p50']:.2f} / {ms['p90']:.2f} / {ms['max']:.1f}"


def main():
    args = bt.bench_args(__doc__)
    only = os.environ.get("SPLIT_CASE")
    try:
        kpitest.require_root("kpi-agent")
        at.require_built(at.AGENT)
        at.require_built(at.INFER)
        bt.require_built()
    except kpitest.Skip as e:
        print(f"{TITLE}\n\nskipped: {e}\n")
        return
    results = []
    for name, server, mode, c, n, kind_args in cases(args.quick):
        if only and only not in name:
            continue
        tmp = tempfile.mkdtemp(prefix="kpi-split-bench-")
        t0 = time.monotonic()
        try:
            e = run(kind_args, tmp, c, n)
        except kpitest.Skip as why:
            sys.stderr.write(f"{name}: skipped: {why}\n")
            continue
        finally:
            kpitest.cleanup()
            shutil.rmtree(tmp, True)
        e.pop("detail")
        e.update(case=name, server=server, mode=mode, concurrency=c, requests=n,
                 seconds=round(time.monotonic() - t0, 1))
        sys.stderr.write(f"{name}: {json.dumps(e)}\n")
        results.append(e)
    with open(os.path.join(args.out, "split.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(f"{TITLE}\n")
    print("Per case: streamed rows with a truth; the share given a split, among all and among those "
          "around which the server met the rules' assumptions (n met); |queue − truth| and "
          "|prefill − truth| in ms, p50 / p90 / max over the rows given a split; the share of those "
          "whose prefill is within max(20%, 2 ms) of the truth; the agent's exit line.\n")
    print("| case | rows | split (all) | split (met, n) | queue error ms | prefill error ms | "
          "prefill within | rules |")
    print("|---|---:|---:|---:|---|---|---:|---|")
    for e in results:
        met = f"{e['share_met']:.0%} ({e['met']})" if e.get("share_met") is not None else "–"
        print(f"| {e['case']} | {e['n']} | {e['share']:.0%} | {met} | {fmt(e['queue_ms'])} | "
              f"{fmt(e['prefill_ms'])} | {e['within']:.0%} | "
              f"{', '.join(f'{k} {v}' for k, v in sorted(e['rules'].items()))} |")
    print("\nWhy rows got no split (the agent's exit lines):\n")
    for e in results:
        print(f"- {e['case']}: {e['agent'] or '(no line)'}")
    print()


if __name__ == "__main__":
    main()
