#!/usr/bin/env python3
"""kpi-infer engine benchmark (no HTTP): decode tok/s at 1, 4, 16 and 64
concurrent sequences, prefill tok/s, for the tiny and small presets; achieved
bytes/s of weight + KV reads against a memory-read bandwidth measured in the
same run; continuous vs static batching on a burst workload.

Every figure is the median over rounds with its min-max spread. Rounds are
interleaved: each round measures memory bandwidth, then every decode
configuration, then bandwidth again, so the bandwidth a decode is compared
with was measured minutes, not hours, apart. The burst runs alternate
continuous, static, continuous, static. Each measurement is one run of
build/engine-bench (tests/bench/engine_bench.c), which prints one JSON line."""
import argparse, json, os, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from benchtest import agg, cell  # noqa: E402
BENCH = os.path.join(ROOT, "build", "engine-bench")


def run(args, timeout=1800):
    t0 = time.monotonic()
    p = subprocess.run([BENCH] + [str(a) for a in args], capture_output=True, text=True,
                       timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"engine-bench {' '.join(map(str, args))}: exit {p.returncode}: "
                           f"{p.stderr.strip()[-500:]}")
    doc = json.loads(p.stdout.strip().splitlines()[-1])
    print(f"{args[0]} {' '.join(map(str, args[1:]))} -> "
          f"{ {k: v for k, v in doc.items() if k in ('tok_s', 'gbs', 'gbs_best', 'req_s', 'gflops', 'gflops_best')} } "
          f"({time.monotonic() - t0:.1f}s)", file=sys.stderr, flush=True)
    return doc


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench"))
    ap.add_argument("--quick", action="store_true", help="short version: fewer rounds, shorter runs")
    ap.add_argument("--threads", type=int, default=0, help="engine threads (default: online CPUs)")
    ap.add_argument("--rounds", type=int, default=0,
                    help="interleaved rounds (default: 3, or 1 with --quick)")
    args = ap.parse_args()
    if not os.access(BENCH, os.X_OK):
        sys.exit(f"bench_engine: {BENCH} is missing: run make first")
    os.makedirs(args.out, exist_ok=True)
    q = args.quick
    rounds = args.rounds or (1 if q else 3)
    prompt, gen = (32, 16) if q else (128, 64)
    seqs = {"tiny": [1, 4, 16, 64], "small": [1, 4, 16] if q else [1, 4, 16, 64]}
    prefill = {"tiny": 256 if q else 1024, "small": 128 if q else 512}
    # quick: 4 static batches of 16, as the full run has 4 batches of 64
    burst = dict(requests=64, prompt=128, mean=32, max=128, seqs=16) if q else \
        dict(requests=256, prompt=128, mean=64, max=512, seqs=64)
    bursts = 1 if q or args.rounds == 1 else 2
    bw_mib = 512 if q else 2048
    thr = ["--threads", args.threads] if args.threads else []

    tmp = tempfile.mkdtemp(prefix="kpi-engine-bench-")
    models = {}
    for preset in ("tiny", "small"):
        models[preset] = os.path.join(tmp, f"{preset}.gguf")
        run(["make", "--out", models[preset], "--preset", preset])

    bw, peak, decode, pre = [], [], {}, {}
    try:
        for r in range(rounds):
            bw.append(run(["bandwidth", "--mib", bw_mib] + thr)["gbs_best"])
            peak.append(run(["fma"] + thr)["gflops_best"])
            for preset in ("tiny", "small"):
                for s in seqs[preset]:
                    d = run(["decode", "--model", models[preset], "--seqs", s, "--prompt", prompt,
                             "--gen", gen] + thr)
                    decode.setdefault((preset, s), []).append(d)
                p = run(["prefill", "--model", models[preset], "--prompt", prefill[preset]] + thr)
                pre.setdefault(preset, []).append(p)
            bw.append(run(["bandwidth", "--mib", bw_mib] + thr)["gbs_best"])
            peak.append(run(["fma"] + thr)["gflops_best"])
        bursts_out = {"continuous": [], "static": []}
        for r in range(bursts):
            for mode in ("continuous", "static"):
                bursts_out[mode].append(run(
                    ["burst", "--model", models["tiny"], "--batching", mode, "--seqs", burst["seqs"],
                     "--requests", burst["requests"], "--prompt", burst["prompt"],
                     "--mean", burst["mean"], "--max", burst["max"]] + thr))
    finally:
        for m in models.values():
            if os.path.exists(m):
                os.unlink(m)
        os.rmdir(tmp)

    bw_a, peak_a = agg(bw), agg(peak)
    res = dict(quick=q, rounds=rounds, prompt=prompt, gen=gen, bandwidth_gbs=bw_a, fma_gflops=peak_a,
               threads=decode[("tiny", 1)][0]["threads"], decode={}, prefill={}, burst={})
    for (preset, s), runs in sorted(decode.items()):
        one = agg([x["tok_s"] for x in decode[(preset, 1)]])
        tok = agg([x["tok_s"] for x in runs])
        gbs = agg([x["gbs"] for x in runs])
        step = agg([x["step_ms"] for x in runs])
        # the roofline: the step can go no faster than its bytes at the
        # measured bandwidth, nor than its arithmetic at the FMA peak
        roof_ms = max(runs[0]["bytes_per_step"] / (bw_a["median"] * 1e9),
                      runs[0]["flops_per_step"] / (peak_a["median"] * 1e9)) * 1e3
        res["decode"][f"{preset}/{s}"] = dict(
            preset=preset, seqs=s, tok_s=tok, gbs=gbs, step_ms=step,
            gflops=agg([x["gflops"] for x in runs]),
            weight_bytes=runs[0]["weight_bytes"], bytes_per_step=runs[0]["bytes_per_step"],
            flops_per_step=runs[0]["flops_per_step"],
            bw_fraction=gbs["median"] / bw_a["median"] if bw_a else None,
            roofline_ms=roof_ms, roofline_fraction=roof_ms / step["median"],
            speedup_vs_1=tok["median"] / one["median"])
    for key, d in res["decode"].items():
        # what the roofline allows against the one sequence measured
        single = res["decode"][f"{d['preset']}/1"]
        d["speedup_ceiling"] = d["seqs"] * single["step_ms"]["median"] / d["roofline_ms"]
    for preset, runs in pre.items():
        res["prefill"][preset] = dict(prompt=prefill[preset], tok_s=agg([x["tok_s"] for x in runs]))
    for mode, runs in bursts_out.items():
        res["burst"][mode] = dict(req_s=agg([x["req_s"] for x in runs]),
                                  tok_s=agg([x["tok_s"] for x in runs]),
                                  seconds=agg([x["seconds"] for x in runs]),
                                  preemptions=[x["preemptions"] for x in runs],
                                  # rows every forward pass computed (padding included);
                                  # the same lengths each run, so the same count
                                  rows=runs[0]["rows"], prompt_tokens=runs[0]["prompt_tokens"],
                                  rows_s=agg([x["rows"] / x["seconds"] for x in runs]), **burst)
    bc, bs = res["burst"]["continuous"], res["burst"]["static"]
    res["burst"]["continuous_over_static"] = bc["req_s"]["median"] / bs["req_s"]["median"]
    # the ratio is (rows static computes / rows continuous computes) x (continuous's
    # row rate / static's): the work iteration-level scheduling removes, times how fast
    # each mode gets through its rows.  decode_work_ratio is the first factor with the
    # prompt rows left out: the ratio where prefill costs next to nothing (a GPU).
    res["burst"]["work_ratio"] = bs["rows"] / bc["rows"]
    res["burst"]["row_rate_ratio"] = bc["rows_s"]["median"] / bs["rows_s"]["median"]
    res["burst"]["decode_work_ratio"] = (bs["rows"] - bs["prompt_tokens"]) / (bc["rows"] - bc["prompt_tokens"])
    with open(os.path.join(args.out, "engine.json"), "w") as f:
        json.dump(res, f, indent=1)

    # ---- markdown ---------------------------------------------------------
    print("## Engine (CPU backend, no HTTP)\n")
    print(f"{res['threads']} threads; median (min-max) over {rounds} interleaved round(s); "
          f"decode: prompt {prompt}, {gen} generated tokens per sequence, timed after every "
          f"sequence's first token. Memory-read bandwidth in the same run: "
          f"{cell(bw_a, '{:.2f}')} GB/s; FMA peak of all threads: {cell(peak_a)} GFLOP/s. "
          f"Roofline: the step time its weight+KV bytes at that bandwidth or its arithmetic at "
          f"that peak allow, whichever is longer; the ceiling is the x vs 1 seq that step time "
          f"would give.\n")
    print("| preset | seqs | aggregate tok/s | x vs 1 seq | ms/step | weight+KV GB/s | of read bw "
          "| GFLOP/s | of roofline | ceiling |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for key, d in res["decode"].items():
        print(f"| {d['preset']} | {d['seqs']} | {cell(d['tok_s'])} | {d['speedup_vs_1']:.1f}x | "
              f"{cell(d['step_ms'], '{:.2f}')} | {cell(d['gbs'], '{:.2f}')} | "
              f"{100 * d['bw_fraction']:.0f}% | {cell(d['gflops'])} | "
              + (f"{100 * d['roofline_fraction']:.0f}% | {d['speedup_ceiling']:.1f}x |"
                 if d["roofline_fraction"] <= 1 else "- | - (weights in cache) |"))
    print()
    print("| preset | prefill tokens | prefill tok/s |")
    print("|---|---|---|")
    for preset, p in res["prefill"].items():
        print(f"| {preset} | {p['prompt']} | {cell(p['tok_s'])} |")
    print()
    b = res["burst"]
    print(f"Burst (tiny, {burst['requests']} requests at once, prompt {burst['prompt']}, output "
          f"lengths capped-exponential mean {burst['mean']} max {burst['max']}, EOS ignored, "
          f"max {burst['seqs']} sequences): continuous {cell(b['continuous']['req_s'], '{:.2f}')} req/s, "
          f"static {cell(b['static']['req_s'], '{:.2f}')} req/s: "
          f"**{b['continuous_over_static']:.2f}x** (target >= 3x). That is "
          f"{b['work_ratio']:.2f}x fewer rows computed ({b['continuous']['rows']} vs "
          f"{b['static']['rows']}, {b['continuous']['prompt_tokens']} of them prompt tokens in "
          f"both) times {b['row_rate_ratio']:.2f}x the row rate "
          f"({cell(b['continuous']['rows_s'], '{:.0f}')} vs {cell(b['static']['rows_s'], '{:.0f}')} "
          f"rows/s). On this CPU a prompt row costs about what a decode row does, so the prompt "
          f"rows, the same in both modes, cap the ratio; were they free (nearly so on a GPU, "
          f"where small decode batches leave the arithmetic units idle), the decode rows "
          f"alone would give {b['decode_work_ratio']:.2f}x. "
          f"Small decode at 1 sequence reads "
          f"**{100 * res['decode']['small/1']['bw_fraction']:.0f}%** of the measured bandwidth "
          f"(target >= 90%); 16 sequences give "
          f"**{res['decode']['small/16']['speedup_vs_1']:.1f}x** one sequence's tok/s "
          f"(target >= 8x; this machine's roofline allows "
          f"{res['decode']['small/16']['speedup_ceiling']:.1f}x, and the step reaches "
          f"{100 * res['decode']['small/16']['roofline_fraction']:.0f}% of it).\n")


if __name__ == "__main__":
    main()
