#!/usr/bin/env python3
"""Disaggregated prefill and decode (docs/disaggregation.md), small preset:

1. KV-transfer throughput against loopback TCP in the same run: a 1,500-token
   prompt whose prefix the prefill worker has cached (all but the last 12
   positions, which it computes while the cached ones leave), its
   kpi_infer_kv_transfer_seconds on the decode worker, against one Python TCP
   stream moving the same bytes over loopback in the same layer-sized writes;
   rounds alternate. CPU per GB from each thread's schedstat, split into the
   two workers' I/O and engine threads. KPI_BENCH_AB=<another kpi-infer>
   measures that build's workers beside this one's in every round (A/B in one
   run); KPI_BENCH_PROMPT=1489 leaves one position to compute.
2. The transfer's share of TTFT by prompt length, fresh prompts (no cache):
   the client's TTFT through the router, the transfer's span on the decode
   worker (first stream byte in to last) and, as root, its exposed part (the
   prefill worker's first token to the decode worker's last byte in, from
   bpftrace on both: the layers sent while the forward pass went on are not in
   it).
3. Interference: streams decoding while long prompts (1,200 tokens) arrive.
   Colocated (one kpi-infer, 2 threads, both cores) against disaggregated
   (prefill worker pinned to core 0, decode worker to core 1, one thread
   each, taskset): ITL p99 and TPOT p99 of the decoding streams, TTFT of the
   long prompts; configurations alternate, medians over rounds (min-max).
JSON in build/bench/disagg.json."""
import json, os, random, shutil, socket, statistics, sys, threading, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
import kpitest  # noqa: E402
import servertest as st  # noqa: E402
import disaggtest as dt  # noqa: E402
import benchtest  # noqa: E402


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def agg(vals):
    return dict(median=statistics.median(vals), min=min(vals), max=max(vals), n=len(vals))


def cell(m, f="%.2f"):
    return f"{f % m['median']} ({f % m['min']}-{f % m['max']})"


# ---- 1. throughput ------------------------------------------------------------------

def spread_buffers(total):
    """(source, sink) of total bytes for loopback_gbps(spread=...), every page
    touched once here, outside what a round measures."""
    src = bytearray(total)
    src[::4096] = b"\1" * len(range(0, total, 4096))
    sink = bytearray(total)
    sink[::4096] = b"\1" * len(range(0, total, 4096))
    return memoryview(src), memoryview(sink)


def loopback_gbps(total, chunk, cpus=None, spread=None):
    """One TCP stream over loopback moving total bytes in chunk-sized writes,
    the receiving thread on cpus[1] and the sending one on cpus[0] (as the
    workers are pinned): GB/s from the first byte received to the last.
    spread (spread_buffers): sent from and received into buffers of total
    bytes, as the KV leaves one pool and lands in another, instead of one
    chunk sent again and again into one 4 MiB buffer, which stay in the CPU's
    cache."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    buf = spread[0] if spread else bytes(chunk)
    res = {}

    def recv():
        if cpus:
            os.sched_setaffinity(0, {cpus[1]})  # this thread
        c, _ = srv.accept()
        mv = spread[1] if spread else memoryview(bytearray(1 << 22))
        got, t0 = 0, None
        while got < total:
            if spread:
                n = c.recv_into(mv[got:], total - got)
            else:
                n = c.recv_into(mv, min(len(mv), total - got))
            if t0 is None:
                t0 = time.perf_counter()
            got += n
        res["s"] = time.perf_counter() - t0
        c.close()

    t = threading.Thread(target=recv)
    t.start()
    if cpus:
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {cpus[0]})
    s = socket.create_connection(srv.getsockname())
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sent = 0
    while sent < total:
        k = min(chunk, total - sent)
        s.sendall(buf[sent:sent + k] if spread else buf[:k])
        sent += k
    t.join()
    if cpus:
        os.sched_setaffinity(0, before)
    s.close()
    srv.close()
    return total / res["s"] / 1e9


def thread_cpu(pid):
    """(I/O thread, the rest) CPU seconds of a process so far, from schedstat (ns,
    where /proc/PID/stat counts 10 ms ticks: a transfer is a few ticks). The main
    thread is kpi-infer's I/O thread (HTTP, the KV stream's framing and checksum,
    its sockets); the rest is the engine (forward pass, KV copied out of and into
    the paged cache)."""
    io = rest = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except FileNotFoundError:  # a thread that just ended
            continue
        if int(tid) == pid:
            io += ns
        else:
            rest += ns
    return io / 1e9, rest / 1e9


def self_cpu():
    import resource
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def transfer_seconds(d):
    m = d.metrics()
    return m["kpi_infer_kv_transfer_seconds_sum"], m["kpi_infer_kv_transfer_bytes_total"]


def one_transfer(p, d, prompt):
    """One KV transfer of prompt (prefix cached) from p to d: (GB/s, CPU s per GB of both
    workers, of their I/O threads, bytes)."""
    s0, b0 = transfer_seconds(d)
    t0 = thread_cpu(p.p.pid) + thread_cpu(d.p.pid)
    dt.token_ids(d.port, prompt, 1, headers={"x-kpi-prefill": p.addr})
    t1 = thread_cpu(p.p.pid) + thread_cpu(d.p.pid)
    s1, b1 = transfer_seconds(d)
    gb = (b1 - b0) / 1e9
    # per GB: prefill I/O, prefill engine, decode I/O, decode engine
    split = [(b - a) / gb for a, b in zip(t0, t1)]
    return gb / (s1 - s0), sum(split), split[0] + split[2], int(b1 - b0), split


def throughput(model, rounds, other=None, n_prompt=1500):
    """other: another kpi-infer build (KPI_BENCH_AB), whose workers take their
    turn in every round, on the same cores, first in every other round.
    n_prompt (KPI_BENCH_PROMPT): the prompt's tokens; the prefill worker
    computes those after its cached full blocks of 16, never fewer than one
    (1,500: 12, which the transfer waits for; 1,489: 1)."""
    # one core each, as the TCP stream's two ends: the prefill worker's engine
    # thread paces the layers, so it gets a core of its own
    cpus = sorted(os.sched_getaffinity(0))[:2]
    pin = (lambda k: ["taskset", "-c", str(cpus[k])]) if len(cpus) == 2 else (lambda k: [])
    builds = {"": st.KPI_INFER}
    if other:
        builds["other_"] = other
    pairs = {}
    for name, binary in builds.items():
        st.KPI_INFER, this = binary, st.KPI_INFER
        pairs[name] = (dt.worker("prefill", "--threads", 1, model=model, shared=True, prefix=pin(0)),
                       dt.worker("decode", "--threads", 1, model=model, shared=True, prefix=pin(1)))
        st.KPI_INFER = this
    rng = random.Random(1)
    prompt = dt.random_prompt(rng, n_prompt)
    for p, d in pairs.values():
        dt.token_ids(d.port, prompt, 1, headers={"x-kpi-prefill": p.addr})  # cached from here on
    got = {name: dict(kv=[], cpu=[], io=[], split=[]) for name in pairs}
    tcp, tcp_cpu, tcp_spread, tcp_spread_cpu = [], [], [], []
    layer = n_prompt * 2 * 768 * 2
    spread = spread_buffers(12 * layer)  # the KV's size: 12 layers
    for r in range(rounds):
        order = list(pairs) if r % 2 == 0 else list(pairs)[::-1]
        for name in order:
            gbps, cpu, io, nbytes, split = one_transfer(*pairs[name], prompt)
            got[name]["split"].append(split)
            got[name]["kv"].append(gbps)
            got[name]["cpu"].append(cpu)
            got[name]["io"].append(io)
        c0 = self_cpu()
        tcp.append(loopback_gbps(nbytes, layer, cpus if len(cpus) == 2 else None))
        tcp_cpu.append((self_cpu() - c0) / (nbytes / 1e9))
        c0 = self_cpu()
        tcp_spread.append(loopback_gbps(nbytes, layer, cpus if len(cpus) == 2 else None,
                                        spread))
        tcp_spread_cpu.append((self_cpu() - c0) / (nbytes / 1e9))
        print(f"throughput round {r + 1}/{rounds}: KV " +
              ", ".join(f"{name or 'this'} {got[name]['kv'][-1]:.2f}" for name in pairs) +
              f" GB/s, loopback {tcp[-1]:.2f} GB/s", file=sys.stderr)
    hits = pairs[""][0].metrics()["vllm:prefix_cache_hits_total"]
    for p, d in pairs.values():
        p.stop()
        d.stop()
    out = dict(prompt_tokens=n_prompt, kv_bytes=nbytes, loopback_gbps=agg(tcp), prefix_hit_tokens=hits,
               loopback_cpu_s_per_gb=agg(tcp_cpu), loadavg=os.getloadavg(),
               # the same stream from and into buffers as large as the KV (not in cache)
               loopback_spread_gbps=agg(tcp_spread), loopback_spread_cpu_s_per_gb=agg(tcp_spread_cpu))
    for name, g in got.items():
        out.update({
            f"{name}kv_gbps": agg(g["kv"]),
            f"{name}share_of_loopback": agg([a / b for a, b in zip(g["kv"], tcp)]),
            # CPU seconds per GB moved, both processes (the KV request's decode
            # step and HTTP included) against both ends of the TCP stream: what
            # the transfer costs, whatever else the machine runs
            f"{name}kv_cpu_s_per_gb": agg(g["cpu"]),
            # per round, against each baseline measured in it
            f"{name}cpu_over_loopback": agg([a / b for a, b in zip(g["cpu"], tcp_cpu)]),
            f"{name}cpu_over_loopback_spread": agg([a / b for a, b in zip(g["cpu"], tcp_spread_cpu)]),
            f"{name}share_of_loopback_spread": agg([a / b for a, b in zip(g["kv"], tcp_spread)]),
            # of which the two I/O threads (HTTP, framing, checksum, sockets); the
            # rest is the engine threads: the prefill of the positions the cache
            # did not hold, the KV copied out of the prefill's cache and into the
            # decode worker's
            f"{name}kv_io_cpu_s_per_gb": agg(g["io"]),
            # the four threads apart, s per GB
            f"{name}kv_cpu_split_s_per_gb": {
                k: agg([x[i] for x in g["split"]]) for i, k in
                enumerate(("prefill_io", "prefill_engine", "decode_io", "decode_engine"))}})
    if other:
        out["other_build"] = other
        out["this_over_other_gbps"] = agg([a / b for a, b in zip(got[""]["kv"], got["other_"]["kv"])])
        out["this_over_other_cpu"] = agg([a / b for a, b in zip(got[""]["cpu"], got["other_"]["cpu"])])
    return out


# ---- 2. share of TTFT -----------------------------------------------------------------

TRACE_P = """usdt:%(bin)s:kpi:request__admitted { @rid[arg0] = str(arg4); }
usdt:%(bin)s:kpi:request__first_token { printf("FT %%s %%llu\\n", @rid[arg0], nsecs); }"""
TRACE_D = """usdt:%(bin)s:kpi:request__admitted { @rid[arg0] = str(arg4); }
usdt:%(bin)s:kpi:kv__recv_start { printf("RS %%s %%llu\\n", @rid[arg0], nsecs); }
usdt:%(bin)s:kpi:kv__recv_end { printf("RE %%s %%llu %%d\\n", @rid[arg0], nsecs, arg4); }"""


def bpftrace_on(pid, text, tmp):
    path = os.path.join(tmp, f"t{pid}.bt")
    with open(path, "w") as f:
        f.write(text % {"bin": os.path.realpath(st.KPI_INFER)})
    t = kpitest.Proc(["bpftrace", "-p", str(pid), path])
    t.wait_line("Attaching", timeout=60)
    return t


def ttft_stream(port, prompt, rid):
    """(TTFT s, send time ns): the first token event of a streamed completion."""
    s = socket.create_connection(("127.0.0.1", port), timeout=600)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rd = st.Reader(s)
    body = json.dumps(dict(prompt=prompt, max_tokens=2, temperature=0, ignore_eos=True,
                           stream=True)).encode()
    t0 = time.perf_counter()
    s.sendall(st.post_bytes("/v1/completions", body, {"X-Request-Id": rid}))
    status, _ = rd.head()
    assert status == 200, status
    first = None
    for c in rd.chunks():
        if first is None:
            first = time.perf_counter() - t0
    s.close()
    return first


def ttft_share(model, lengths, rounds, tmp):
    p = dt.worker("prefill", model=model, shared=True)
    d = dt.worker("decode", model=model, shared=True)
    r = dt.router([d], [p], shared=True)
    root = os.geteuid() == 0 and shutil.which("bpftrace")
    traces = []
    if root:
        traces = [bpftrace_on(p.p.pid, TRACE_P, tmp), bpftrace_on(d.p.pid, TRACE_D, tmp)]
        time.sleep(1.0)  # bpftrace prints Attaching before every uprobe is in
    rng = random.Random(2)
    out = {n: dict(ttft=[], span=[], exposed=[]) for n in lengths}
    for k in range(rounds):
        for n in lengths:
            rid = f"share-{n}-{k}"
            s0, _ = transfer_seconds(d)
            ttft = ttft_stream(r.port, dt.random_prompt(rng, n), rid)
            s1, _ = transfer_seconds(d)
            out[n]["ttft"].append(ttft * 1e3)
            out[n]["span"].append((s1 - s0) * 1e3)
        print(f"share round {k + 1}/{rounds} done", file=sys.stderr)
    if traces:
        want = rounds * len(lengths)
        st.wait_for(lambda: sum(l.startswith("RE ") for l in traces[1].drain()) >= want, 30,
                    "recv_end lines")
        st.wait_for(lambda: sum(l.startswith("FT ") for l in traces[0].drain()) >= want, 30,
                    "first_token lines")
        ft = {l.split()[1]: int(l.split()[2]) for l in traces[0].drain() if l.startswith("FT ")}
        re_ = {l.split()[1]: int(l.split()[2]) for l in traces[1].drain() if l.startswith("RE ")}
        for n in lengths:
            for k in range(rounds):
                rid = f"share-{n}-{k}"
                out[n]["exposed"].append((re_[rid] - ft[rid]) / 1e6)
        for t in traces:
            t.stop()
    r.stop()
    p.stop()
    d.stop()
    res = {}
    for n, v in out.items():
        res[n] = dict(ttft_ms=agg(v["ttft"]), transfer_span_ms=agg(v["span"]),
                      span_share_of_ttft=agg([a / b for a, b in zip(v["span"], v["ttft"])]),
                      kv_bytes=12 * n * 2 * 768 * 2)
        if v["exposed"]:
            res[n]["exposed_ms"] = agg(v["exposed"])
            res[n]["exposed_share_of_ttft"] = agg([a / b for a, b in zip(v["exposed"], v["ttft"])])
    return res


# ---- 3. interference ----------------------------------------------------------------------

def stream_times(port, prompt, max_tokens, rid, out, t_start):
    """Streams one completion; appends (rid, send time, [token receive times]) to out."""
    s = socket.create_connection(("127.0.0.1", port), timeout=900)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rd = st.Reader(s)
    body = json.dumps(dict(prompt=prompt, max_tokens=max_tokens, temperature=0, ignore_eos=True,
                           stream=True)).encode()
    t0 = time.perf_counter()
    s.sendall(st.post_bytes("/v1/completions", body, {"X-Request-Id": rid}))
    status, _ = rd.head()
    assert status == 200, status
    times = []
    for c in rd.chunks():
        times.append(time.perf_counter())
    s.close()
    out.append((rid, t0, times))


def interference_round(port, rng, n_streams, stream_tokens, n_long, long_len, gap_s):
    out = []
    th = [threading.Thread(target=stream_times, args=(port, dt.random_prompt(rng, 32), stream_tokens,
                                                       f"stream-{i}", out, 0))
          for i in range(n_streams)]
    for t in th:
        t.start()
    time.sleep(gap_s)  # the streams are decoding when the long prompts come
    longs = []
    for i in range(n_long):
        t = threading.Thread(target=stream_times, args=(port, dt.random_prompt(rng, long_len), 4,
                                                         f"long-{i}", out, 0))
        t.start()
        longs.append(t)
        time.sleep(gap_s)
    for t in th + longs:
        t.join()
    itl, tpot, ttft = [], [], []
    for rid, t0, times in out:
        # the last chunk carries the last token and [DONE]; every chunk is one token
        if rid.startswith("stream-"):
            gaps = [(b - a) * 1e3 for a, b in zip(times, times[1:])]
            itl += gaps
            tpot.append((times[-1] - times[0]) * 1e3 / (len(times) - 1))
        else:
            ttft.append((times[0] - t0) * 1e3)
    return dict(itl_p99=pct(itl, 99), itl_p50=pct(itl, 50), tpot_p99=pct(tpot, 99),
                tpot_p50=pct(tpot, 50), long_ttft_p50=pct(ttft, 50), long_ttft_max=max(ttft))


def interference(model, rounds, quick):
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return dict(skipped="needs 2 CPUs to pin prefill and decode apart")
    n_streams, stream_tokens = (4, 96) if quick else (4, 192)
    n_long, long_len, gap = (2, 1200, 0.8) if quick else (4, 1200, 1.0)
    res = dict(colocated=[], disaggregated=[])
    rng = random.Random(3)
    for k in range(rounds):
        for mode in ("colocated", "disaggregated"):
            procs = []
            if mode == "colocated":
                c = st.Daemon("--threads", 2, model=model, shared=True)
                procs, port = [c], c.port
            else:
                p = dt.worker("prefill", "--threads", 1, model=model, shared=True,
                              prefix=["taskset", "-c", str(cpus[0])])
                d = dt.worker("decode", "--threads", 1, model=model, shared=True,
                              prefix=["taskset", "-c", str(cpus[1])])
                r = dt.router([d], [p], shared=True)
                procs, port = [r, p, d], r.port
            dt.token_ids(port, [5] * 8, 2)  # warm
            x = interference_round(port, rng, n_streams, stream_tokens, n_long, long_len, gap)
            for q in procs:
                q.stop()
            res[mode].append(x)
            print(f"interference round {k + 1}/{rounds} {mode}: ITL p99 {x['itl_p99']:.1f} ms, "
                  f"TPOT p99 {x['tpot_p99']:.1f} ms, long TTFT p50 {x['long_ttft_p50']:.0f} ms",
                  file=sys.stderr)
    out = dict(workload=dict(streams=n_streams, stream_tokens=stream_tokens, long_prompts=n_long,
                             long_tokens=long_len, gap_s=gap, cpus=cpus[:2]))
    for mode, xs in res.items():
        out[mode] = {k: agg([x[k] for x in xs]) for k in xs[0]}
    out["itl_p99_ratio"] = agg([b["itl_p99"] / a["itl_p99"] for a, b in
                                zip(res["colocated"], res["disaggregated"])])
    out["tpot_p99_ratio"] = agg([b["tpot_p99"] / a["tpot_p99"] for a, b in
                                 zip(res["colocated"], res["disaggregated"])])
    out["long_ttft_ratio"] = agg([b["long_ttft_p50"] / a["long_ttft_p50"] for a, b in
                                  zip(res["colocated"], res["disaggregated"])])
    return out


def main():
    a = benchtest.bench_args(__doc__)
    st.require_binary()
    model = st.preset_model("small")
    tmp = kpitest.tmpdir("kpi-bench-disagg-")
    rounds = 2 if a.quick else 4
    lengths = [16, 256, 1024, 1500] if a.quick else [16, 128, 512, 1024, 1500]
    doc = dict(model="small preset (12 layers, 12 KV heads x 64, F16 KV: 36 KiB a token)",
               quick=a.quick)
    part = os.environ.get("KPI_BENCH_PART", "")  # one part alone, while working on it
    if part in ("", "throughput"):
        # KPI_BENCH_ROUNDS: more alternating rounds where the machine is noisy
        # KPI_BENCH_AB: another kpi-infer build measured beside this one, round by round
        doc["throughput"] = throughput(model, int(os.environ.get("KPI_BENCH_ROUNDS", 0)) or
                                       (3 if a.quick else 6), os.environ.get("KPI_BENCH_AB"),
                                       int(os.environ.get("KPI_BENCH_PROMPT", 0)) or 1500)
    if part in ("", "share"):
        doc["ttft_share"] = ttft_share(model, lengths, rounds, tmp)
    if part in ("", "interference"):
        doc["interference"] = interference(model, 2 if a.quick else 3, a.quick)
    if part:
        print(json.dumps(doc, indent=1))
        return
    kpitest.cleanup()
    with open(os.path.join(a.out, "disagg.json"), "w") as f:
        json.dump(doc, f, indent=1)

    t = doc["throughput"]
    print("## Disaggregated prefill and decode (bench_disagg.py)\n")
    print("Small preset. Medians over alternating rounds (min-max).\n")
    print(f"**KV-transfer throughput**: {t['kv_bytes'] / 1e6:.1f} MB ({t['prompt_tokens']} tokens, "
          f"prefix cached on the prefill worker): {cell(t['kv_gbps'])} GB/s against one loopback TCP stream's "
          f"{cell(t['loopback_gbps'])} GB/s: **{cell(t['share_of_loopback'])}** "
          f"of loopback (target >= 0.50; {cell(t['share_of_loopback_spread'])} of the stream "
          f"sent from and into buffers as large as the KV, {cell(t['loopback_spread_gbps'])} GB/s). "
          f"CPU per GB moved: {cell(t['kv_cpu_s_per_gb'])} s "
          f"(prefill + decode worker; their I/O threads {cell(t['kv_io_cpu_s_per_gb'])} s, the rest "
          f"the engine threads: the prefill of the positions the cache did not hold, and any KV copy) "
          f"against {cell(t['loopback_cpu_s_per_gb'])} s (both ends of the TCP stream): "
          f"**{cell(t['cpu_over_loopback'])}x** (target <= 2; {cell(t['cpu_over_loopback_spread'])}x "
          f"the stream from and into large buffers, {cell(t['loopback_spread_cpu_s_per_gb'])} s); "
          f"load average during the run {t['loadavg'][0]:.1f} on {os.cpu_count()} CPUs.\n")
    print("| prompt tokens | KV MB | TTFT ms | transfer span ms | span / TTFT | exposed ms | exposed / TTFT |")
    print("|---|---|---|---|---|---|---|")
    for n, v in doc["ttft_share"].items():
        ex = v.get("exposed_ms")
        print(f"| {n} | {v['kv_bytes'] / 1e6:.2f} | {cell(v['ttft_ms'], '%.1f')} | "
              f"{cell(v['transfer_span_ms'], '%.2f')} | {cell(v['span_share_of_ttft'], '%.3f')} | "
              f"{cell(ex, '%.3f') if ex else 'as root'} | "
              f"{cell(v['exposed_share_of_ttft'], '%.4f') if ex else 'as root'} |")
    i = doc["interference"]
    if "skipped" in i:
        print(f"\nInterference: skipped ({i['skipped']}).")
    else:
        w = i["workload"]
        print(f"\n**Interference**: {w['streams']} streams of {w['stream_tokens']} tokens decoding while "
              f"{w['long_prompts']} prompts of {w['long_tokens']} tokens arrive {w['gap_s']} s apart.\n")
        print("| | ITL p50 ms | ITL p99 ms | TPOT p50 ms | TPOT p99 ms | long-prompt TTFT p50 ms |")
        print("|---|---|---|---|---|---|")
        for mode in ("colocated", "disaggregated"):
            m = i[mode]
            print(f"| {mode} | {cell(m['itl_p50'], '%.1f')} | {cell(m['itl_p99'], '%.1f')} | "
                  f"{cell(m['tpot_p50'], '%.1f')} | {cell(m['tpot_p99'], '%.1f')} | "
                  f"{cell(m['long_ttft_p50'], '%.0f')} |")
        print(f"\nDisaggregated / colocated: ITL p99 {cell(i['itl_p99_ratio'])}, TPOT p99 "
              f"{cell(i['tpot_p99_ratio'])}, long-prompt TTFT {cell(i['long_ttft_ratio'])}.\n")


if __name__ == "__main__":
    main()
