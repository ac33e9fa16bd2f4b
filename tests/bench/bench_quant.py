#!/usr/bin/env python3
"""Running on less: kpi-infer on the quantized GGUF files people download
(Q8_0, Q4_0, Q4_K) against llama.cpp (node-llama-cpp's prebuilt build) on the
same files, small preset, and the speed-memory-accuracy table of each type.

Per round, interleaved: memory-read bandwidth (engine-bench bandwidth, one
thread and every thread: the STREAM-like roofline of a decode step, which
reads every weight once), then for each type, 1 and 16 concurrent streams,
kpi-infer (engine-bench decode) and llama.cpp (tests/lib/llama_run.mjs
decode) one after the other, the same prompts, the same thread count. Both
are timed from every stream's first token to the last: tokens/s. For
llama.cpp the time inside its llama_decode calls is reported too, the
figure without node's per-token JavaScript, and the ratio is taken against
it (the stricter one for kpi-infer). The same pairs run again on one thread
each, where the CPU time a token costs (every thread of the process, over the
timed span) is the work each engine does whatever else the machine runs:
on a busy machine wall-clock tokens/s measure the machine (llama.cpp's threads
wait at a barrier after every operation for one the scheduler parked), CPU
per token does not. Accuracy: kpi-infer --kl-divergence
against the F32 file of the same weights (mean KL, top-1 agreement).
Resident memory: kpi-infer's whole process; llama.cpp's node process over
what it held before loading the model. Medians over rounds with min-max.
Writes quant.json."""
import json, os, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
import kpitest  # noqa: E402
import benchtest as bt  # noqa: E402
from benchtest import agg, cell  # noqa: E402
import llamatest as lt  # noqa: E402

TITLE = "## Running on less: quantized weights, kpi-infer against llama.cpp on the same file"
ENGINE_BENCH = os.path.join(kpitest.BUILD, "engine-bench")
INFER = os.path.join(kpitest.BUILD, "kpi-infer")
TYPES = ("F16", "Q8_0", "Q4_0", "Q4_K")
QUANT = ("Q8_0", "Q4_0", "Q4_K")
SEQS = (1, 16)


def run_json(argv, timeout=900):
    t0 = time.monotonic()
    p = subprocess.run(list(map(str, argv)), capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv[:3]))}: exit {p.returncode}: {p.stderr.strip()[-500:]}")
    doc = json.loads(p.stdout.strip().splitlines()[-1])
    print(f"{os.path.basename(str(argv[0]))} {' '.join(map(str, argv[1:4]))} ... "
          f"({time.monotonic() - t0:.1f}s)", file=sys.stderr, flush=True)
    return doc


def main():
    args = bt.bench_args(__doc__)
    if not os.access(ENGINE_BENCH, os.X_OK) or not os.access(INFER, os.X_OK):
        sys.exit("bench_quant: build/engine-bench or build/kpi-infer is missing: run make")
    try:
        lt.require_llama()
    except kpitest.Skip as e:
        print(f"{TITLE}\n\nSkipped: {e}\n")
        with open(os.path.join(args.out, "quant.json"), "w") as f:
            json.dump({"skipped": str(e)}, f)
        return 0
    q = args.quick
    rounds = 1 if q else 3
    prompt, gen = (32, 16) if q else (128, 32)
    kl_ctx, kl_chunks = (64, 4) if q else (128, 8)
    threads = os.cpu_count()
    tmp = tempfile.mkdtemp(prefix="kpi-quant-bench-")
    files = {}
    for t in ("F32",) + TYPES:
        files[t] = os.path.join(tmp, f"small-{t}.gguf")
        run_json([ENGINE_BENCH, "make", "--out", files[t], "--preset", "small", "--type", t])
    sizes = {t: os.path.getsize(p) for t, p in files.items()}

    load0 = os.getloadavg()
    bw = {1: [], threads: []}
    kpi, llama, kpi1, llama1 = {}, {}, {}, {}
    try:
        for r in range(rounds):
            for n in sorted(bw):
                bw[n].append(run_json([ENGINE_BENCH, "bandwidth", "--threads", n, "--mib", 512 if q else 1024])["gbs_best"])
            for t in TYPES:
                for s in SEQS:
                    kpi.setdefault((t, s), []).append(run_json(
                        [ENGINE_BENCH, "decode", "--model", files[t], "--seqs", s, "--prompt", prompt,
                         "--gen", gen, "--threads", threads]))
                    llama.setdefault((t, s), []).append(lt.run("decode", files[t], s, prompt, gen, threads,
                                                               timeout=900))
            for t in QUANT:
                for s in SEQS:
                    kpi1.setdefault((t, s), []).append(run_json(
                        [ENGINE_BENCH, "decode", "--model", files[t], "--seqs", s, "--prompt", prompt,
                         "--gen", gen, "--threads", 1]))
                    llama1.setdefault((t, s), []).append(lt.run("decode", files[t], s, prompt, gen, 1,
                                                                timeout=900))
        kl = {}
        for t in TYPES:
            kl[t] = run_json([INFER, "--model", files[t], "--kl-divergence", files["F32"], "--kl-ctx", kl_ctx,
                              "--kl-chunks", kl_chunks, "--threads", threads, "--json"])
    finally:
        for p in files.values():
            if os.path.exists(p):
                os.unlink(p)
        os.rmdir(tmp)

    load1 = os.getloadavg()
    bw_a = {n: agg(v) for n, v in bw.items()}
    res = dict(quick=q, rounds=rounds, prompt=prompt, gen=gen, threads=threads, kl_ctx=kl_ctx,
               loadavg_1min=[load0[0], load1[0]],
               kl_chunks=kl_chunks, bandwidth_gbs={str(n): a for n, a in bw_a.items()}, types={})
    for t in TYPES:
        row = dict(file_bytes=sizes[t], kl=kl[t], seqs={})
        for s in SEQS:
            k, l = kpi[(t, s)], llama[(t, s)]
            # a decode step reads every weight once and each stream's K/V:
            # its time at the measured bandwidth is the roofline
            step_bytes = k[0]["bytes_per_step"]
            roof_tok_s = s * bw_a[threads]["median"] * 1e9 / step_bytes
            ratios = [a["tok_s"] / b["decode_tok_s"] for a, b in zip(k, l)]
            ratios_wall = [a["tok_s"] / b["tok_s"] for a, b in zip(k, l)]
            row["seqs"][str(s)] = dict(
                kpi_tok_s=agg([x["tok_s"] for x in k]), llama_tok_s=agg([x["tok_s"] for x in l]),
                llama_decode_tok_s=agg([x["decode_tok_s"] for x in l]),
                ratio=agg(ratios), ratio_wall=agg(ratios_wall),
                bytes_per_step=step_bytes, roofline_tok_s=roof_tok_s,
                kpi_roofline_share=statistics.median(x["tok_s"] for x in k) / roof_tok_s,
                llama_roofline_share=statistics.median(x["decode_tok_s"] for x in l) / roof_tok_s,
                kpi_rss_bytes=agg([x["rss_bytes"] for x in k]),
                llama_rss_bytes=agg([x["rss_bytes"] - x["rss_before_model_bytes"] for x in l]),
                kernels=k[0]["kernels"])
            if t in QUANT:
                a, b = kpi1[(t, s)], llama1[(t, s)]
                row["seqs"][str(s)]["one_thread"] = dict(
                    kpi_cpu_ms_per_token=agg([x["cpu_ms_per_token"] for x in a]),
                    llama_cpu_ms_per_token=agg([x["cpu_ms_per_token"] for x in b]),
                    llama_over_kpi_cpu=agg([y["cpu_ms_per_token"] / x["cpu_ms_per_token"] for x, y in zip(a, b)]),
                    kpi_tok_s=agg([x["tok_s"] for x in a]), llama_tok_s=agg([x["decode_tok_s"] for x in b]))
        res["types"][t] = row
    with open(os.path.join(args.out, "quant.json"), "w") as f:
        json.dump(res, f, indent=1)

    # ---- markdown ---------------------------------------------------------
    print(f"{TITLE}\n")
    print(f"Small preset (768 dim, 12 layers, 85M matrix weights), {threads} threads for both engines, "
          f"prompt {prompt}, {gen} generated tokens a stream, timed after every stream's first token; "
          f"median (min-max) over {rounds} interleaved round(s). Memory-read bandwidth in the same run: "
          f"{cell(bw_a[1], '{:.1f}')} GB/s with one thread, {cell(bw_a[threads], '{:.1f}')} GB/s with "
          f"{threads}. The roofline of a decode step is its bytes (every weight once, each stream's K/V) at "
          f"the {threads}-thread bandwidth. llama.cpp's tokens/s are the time inside its llama_decode "
          f"calls (with node's per-token JavaScript in brackets); the ratio is kpi-infer over that. "
          f"Load average at the start and the end: {load0[0]:.1f}, {load1[0]:.1f} on {threads} CPUs"
          + (" (a busy machine: the engines' thread pools compete with other work, and llama.cpp's, which "
             "waits at a barrier for every thread after each operation, loses most; read the figures as "
             "that machine's, not the engines')" if max(load0[0], load1[0]) > threads else "") + ".\n")
    print("| type | streams | kpi-infer tok/s | llama.cpp tok/s | ratio | kpi-infer / llama.cpp of roofline "
          "| kernels |")
    print("|---|---|---|---|---|---|---|")
    for t in TYPES:
        for s in SEQS:
            d = res["types"][t]["seqs"][str(s)]
            print(f"| {t} | {s} | {cell(d['kpi_tok_s'])} | {cell(d['llama_decode_tok_s'])} "
                  f"[{cell(d['llama_tok_s'])}] | **{cell(d['ratio'], '{:.2f}')}x** | "
                  f"{100 * d['kpi_roofline_share']:.0f}% / {100 * d['llama_roofline_share']:.0f}% | "
                  f"{d['kernels']} |")
    print()
    print("One thread each: CPU milliseconds a generated token costs (every thread of the process over the "
          "timed span; llama.cpp's includes node's per-token JavaScript), the load-independent comparison; "
          "and the wall-clock tokens/s of the same runs:\n")
    print("| type | streams | kpi-infer CPU ms/token | llama.cpp CPU ms/token | llama.cpp / kpi-infer "
          "| kpi-infer tok/s | llama.cpp tok/s |")
    print("|---|---|---|---|---|---|---|")
    for t in QUANT:
        for s in SEQS:
            d = res["types"][t]["seqs"][str(s)]["one_thread"]
            print(f"| {t} | {s} | {cell(d['kpi_cpu_ms_per_token'], '{:.2f}')} | "
                  f"{cell(d['llama_cpu_ms_per_token'], '{:.2f}')} | **{cell(d['llama_over_kpi_cpu'], '{:.2f}')}x** | "
                  f"{cell(d['kpi_tok_s'])} | {cell(d['llama_tok_s'])} |")
    print()
    print(f"Speed, memory and accuracy per type (KL divergence and top-1 agreement against the F32 file of "
          f"the same weights: kpi-infer --kl-divergence, {kl_chunks} chunks of {kl_ctx} tokens, the second "
          f"half of each scored):\n")
    print("| type | file MB | kpi-infer RSS MB (1 / 16 streams) | llama.cpp RSS MB (1 / 16) | tok/s 1 stream "
          "| tok/s 16 streams | mean KLD | same top-1 |")
    print("|---|---|---|---|---|---|---|---|")
    for t in TYPES:
        row = res["types"][t]
        d1, d16, k = row["seqs"]["1"], row["seqs"]["16"], row["kl"]
        mb = lambda a: f"{a['median'] / 2**20:.0f}"
        print(f"| {t} | {row['file_bytes'] / 2**20:.0f} | {mb(d1['kpi_rss_bytes'])} / {mb(d16['kpi_rss_bytes'])} "
              f"| {mb(d1['llama_rss_bytes'])} / {mb(d16['llama_rss_bytes'])} | {cell(d1['kpi_tok_s'])} | "
              f"{cell(d16['kpi_tok_s'])} | {k['kld_mean']:.4f} ± {k['kld_se']:.4f} | "
              f"{100 * k['same_top']:.1f}% |")
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
