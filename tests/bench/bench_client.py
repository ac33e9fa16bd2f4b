#!/usr/bin/env python3
"""Client-side benchmark: kpi-bench drives a real kpi-infer. Continuous vs
static batching on one burst workload, as the client sees it (interleaved
runs, median and spread), and a concurrency sweep 1/8/32. Writes
OUT/client.json and prints a markdown section."""
import argparse, json, os, shutil, statistics, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
import kpitest  # noqa: E402
import benchtest  # noqa: E402

# Sizes: QUICK stays under ~60 s, full under ~4 min on a 2-core machine.
SIZES = {
    True: dict(burst=32, prompt=64, max_tokens="exp:32:192", reps=3,
               sweep=[(1, 8), (8, 24), (32, 48)], sweep_reps=1, sweep_prompt=64, sweep_tokens=24),
    False: dict(burst=64, prompt=128, max_tokens="exp:64:512", reps=3,
                sweep=[(1, 12), (8, 48), (32, 96)], sweep_reps=2, sweep_prompt=128, sweep_tokens=48),
}
# The same batch limit for both schedulers, well under the burst: static
# batching only differs from continuous once requests must wait for a slot.
MAX_SEQS = 8


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def bench(url, tmp, *args):
    path = os.path.join(tmp, "run.json")
    p = benchtest.kpi_bench("--url", url, "--json", path, *args, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"bench_client: kpi-bench {' '.join(map(str, args))} exited "
                         f"{p.returncode}:\n{p.stdout}\n{p.stderr}")
    js = benchtest.read_json(path)
    if js["requests"]["failed"]:
        raise SystemExit(f"bench_client: {js['requests']['failed']} requests failed "
                         f"({js['errors']}); the numbers would not be comparable")
    return js


def pick(js):
    """The numbers this benchmark reports from one kpi-bench run."""
    g = lambda k, q: js[k][q]
    return {
        "requests_per_s": js["throughput"]["requests_per_s"],
        "output_tokens_per_s": js["throughput"]["output_tokens_per_s"],
        "ttft_p50_ms": g("ttft_ms", "p50"), "ttft_p99_ms": g("ttft_ms", "p99"),
        "tpot_p50_ms": g("tpot_ms", "p50"), "tpot_p99_ms": g("tpot_ms", "p99"),
        "itl_p99_ms": g("itl_ms", "p99"),
        "e2e_p50_ms": g("e2e_ms", "p50"), "e2e_p99_ms": g("e2e_ms", "p99"),
        "duration_s": js["duration_s"],
    }


def agg(runs):
    """Median and spread (min, max) of every number over repeated runs."""
    out = {}
    for k in runs[0]:
        vals = [r[k] for r in runs if r[k] is not None]
        out[k] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals)} if vals else None
    return out


def cell(a, k, fmt="{:.1f}"):
    v = a[k]
    if v is None:
        return "-"
    if v["min"] == v["max"]:
        return fmt.format(v["median"])
    return f"{fmt.format(v['median'])} [{fmt.format(v['min'])}–{fmt.format(v['max'])}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    for path, what in ((benchtest.BENCH, "kpi-bench"), (benchtest.INFER, "kpi-infer")):
        if not os.path.exists(path):
            raise SystemExit(f"bench_client: {path} is missing; run make (it builds {what})")
    os.makedirs(a.out, exist_ok=True)
    sz = SIZES[a.quick]
    tmp = tempfile.mkdtemp(prefix="bench-client-")
    t_start = time.monotonic()
    try:
        model = benchtest.preset_model()
        servers = {}
        for mode in ("continuous", "static"):
            _, servers[mode] = benchtest.start_server("--batching", mode, "--max-seqs", str(MAX_SEQS),
                                                      model=model)
        # the sweep runs on kpi-infer's defaults (--max-seqs 64): no slot limit below 32
        _, servers["sweep"] = benchtest.start_server(model=model)
        for url in servers.values():
            bench(url, tmp, "--requests", 4, "--concurrency", 4, "--max-tokens", 8,
                  "--ignore-eos")   # warm: page in the weights, open the pool

        # ---- continuous vs static: same burst, interleaved A B A B ...
        work = ["--burst", "--requests", sz["burst"], "--prompt-len", sz["prompt"],
                "--max-tokens", sz["max_tokens"], "--ignore-eos", "--seed", 42]
        runs = {"continuous": [], "static": []}
        for rep in range(sz["reps"]):
            for mode in ("continuous", "static"):
                r = pick(bench(servers[mode], tmp, *work))
                runs[mode].append(r)
                log(f"batching {mode} rep {rep}: {r['requests_per_s']:.2f} req/s, "
                    f"ttft p50 {r['ttft_p50_ms']:.0f} ms")
        batching = {m: agg(v) for m, v in runs.items()}
        ratio = (batching["continuous"]["requests_per_s"]["median"]
                 / batching["static"]["requests_per_s"]["median"])

        # ---- concurrency sweep, levels interleaved
        sweep_runs = {c: [] for c, _ in sz["sweep"]}
        for rep in range(sz["sweep_reps"]):
            for conc, n in sz["sweep"]:
                r = pick(bench(servers["sweep"], tmp, "--concurrency", conc, "--requests", n,
                               "--prompt-len", sz["sweep_prompt"], "--max-tokens", sz["sweep_tokens"],
                               "--ignore-eos", "--seed", 7))
                sweep_runs[conc].append(r)
                log(f"concurrency {conc} rep {rep}: {r['requests_per_s']:.2f} req/s")
        sweep = {c: agg(v) for c, v in sweep_runs.items()}
    finally:
        kpitest.cleanup()
        shutil.rmtree(tmp, True)

    result = {
        "quick": a.quick,
        "batching": {
            "workload": {"burst": sz["burst"], "prompt_len": sz["prompt"], "max_tokens": sz["max_tokens"],
                         "ignore_eos": True, "max_seqs": MAX_SEQS, "seed": 42},
            "reps": sz["reps"], "runs": runs, "summary": batching,
            "continuous_over_static_requests_per_s": ratio,
        },
        "sweep": {
            "workload": {"server": "kpi-infer defaults (continuous, --max-seqs 64)",
                         "prompt_len": sz["sweep_prompt"], "max_tokens": sz["sweep_tokens"],
                         "ignore_eos": True, "requests": {str(c): n for c, n in sz["sweep"]}},
            "reps": sz["sweep_reps"],
            "runs": {str(c): v for c, v in sweep_runs.items()},
            "summary": {str(c): v for c, v in sweep.items()},
        },
        "seconds": time.monotonic() - t_start,
    }
    with open(os.path.join(a.out, "client.json"), "w") as f:
        json.dump(result, f, indent=2)

    md = ["## Client view: kpi-bench against kpi-infer", ""]
    md += [f"### Continuous vs static batching (`--batching`, `--max-seqs {MAX_SEQS}`)", "",
           f"Burst of {sz['burst']} requests, prompt {sz['prompt']} tokens, max_tokens "
           f"`{sz['max_tokens']}` with EOS ignored, seed 42; {sz['reps']} runs of each, interleaved "
           "(A B A B …). Median [min–max] over the runs; latencies in ms as the client sees them.", "",
           "| batching | req/s | output tok/s | TTFT p50 | TTFT p99 | e2e p50 | e2e p99 |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for m in ("continuous", "static"):
        s = batching[m]
        md.append(f"| {m} | {cell(s, 'requests_per_s', '{:.2f}')} | {cell(s, 'output_tokens_per_s')} | "
                  f"{cell(s, 'ttft_p50_ms', '{:.0f}')} | {cell(s, 'ttft_p99_ms', '{:.0f}')} | "
                  f"{cell(s, 'e2e_p50_ms', '{:.0f}')} | {cell(s, 'e2e_p99_ms', '{:.0f}')} |")
    md += ["", f"Continuous / static: **{ratio:.2f}x** requests/s (ratio of medians).", ""]
    md += ["### Concurrency sweep (kpi-infer defaults: continuous batching, `--max-seqs 64`; closed loop)", "",
           f"Prompt {sz['sweep_prompt']} tokens, {sz['sweep_tokens']} output tokens (EOS ignored); "
           f"{sz['sweep_reps']} run(s) per level, levels interleaved. Median [min–max]; ms.", "",
           "| concurrency | req/s | output tok/s | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | ITL p99 | e2e p99 |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c, _ in sz["sweep"]:
        s = sweep[c]
        md.append(f"| {c} | {cell(s, 'requests_per_s', '{:.2f}')} | {cell(s, 'output_tokens_per_s')} | "
                  f"{cell(s, 'ttft_p50_ms')} | {cell(s, 'ttft_p99_ms')} | {cell(s, 'tpot_p50_ms', '{:.2f}')} | "
                  f"{cell(s, 'tpot_p99_ms', '{:.2f}')} | {cell(s, 'itl_p99_ms', '{:.2f}')} | "
                  f"{cell(s, 'e2e_p99_ms', '{:.0f}')} |")
    md += ["", f"({result['seconds']:.0f} s)"]
    print("\n".join(md))


if __name__ == "__main__":
    main()
