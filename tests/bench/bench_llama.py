#!/usr/bin/env python3
"""The cost of the llama.cpp path (issue 22): the uprobe and uretprobe on
libllama's llama_decode, per call (a batch step), against the step's own
duration.  The real llama.cpp (node-llama-cpp, make node-llama) behind
tests/lib/llama_server.mjs runs the same load in rounds without and with an
agent attached (--port), alternating, and in rounds with only an empty
uprobe/uretprobe pair on llama_decode (bpftrace, where installed).  Per step:
the BPF programs' own time (kernel.bpf_stats_enabled: run_time_ns of
kpi_llama_decode_entry and _return), and the wall time added to a decode call
as the server times it (median of its own marks around each call, minus the
rounds without: with bpftrace's empty pair, the traps and the return
trampoline; with the agent, also its programs and the CPU the agent takes from
the server on a small machine).  Writes llama.json."""
import json, os, shutil, signal, statistics, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "lib"))
import kpitest  # noqa: E402
import agenttest as at  # noqa: E402
import benchtest as bt  # noqa: E402
import llamatest as lt  # noqa: E402

TITLE = "## kpi-agent on llama.cpp: the uprobe pair per llama_decode call"


def load(fx, tag, n):
    """n requests one after the other, then n at once: single- and multi-sequence steps."""
    for i in range(n):
        lt.stream(fx.port, f"{tag}-s{i}", f"sequential {i} " + "tell me more " * (i % 4 + 1), 24)
    lt.concurrently(fx.port, [(f"{tag}-c{i}", f"concurrent {i} " + "abc " * i, 24)
                              for i in range(n)])


def libllama(pid):
    """The fixture's libllama (libllama.v0.5.0.so, not libllama-common.so)."""
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            path = line.split()[-1]
            base = os.path.basename(path)
            if base.startswith("libllama.") and ".so" in base:
                return path
    return None


def round_(fx, tmp, tag, n, agent_on, lib=None):
    fx.restart_marks()
    agent = tracer = None
    if lib:
        tracer = kpitest.Proc(["bpftrace", "-p", str(fx.pid), "-e",
                               f"BEGIN {{ printf(\"ready\\n\"); }} uprobe:{lib}:llama_decode {{ }} "
                               f"uretprobe:{lib}:llama_decode {{ }}"])
        tracer.wait_line("ready", timeout=60)
    if agent_on:
        agent = at.start_agent(os.path.join(tmp, f"{tag}.db"), "--flush-ms", 200, "--port", fx.port)
        agent.wait_line(f"tracing llama_decode of pid {fx.pid}", timeout=60)
        before = bt.bpf_programs(("kpi_llama",))
    load(fx, tag, n)
    if tracer:
        tracer.stop(signal.SIGINT)
    out = {}
    if agent_on:
        after = bt.bpf_programs(("kpi_llama",))
        assert agent.stop() == 0, agent.lines[-10:]
        out.update(bt.bpf_delta(before, after))
    steps, _ = fx.marks()
    out["call_us"] = [(s["t1"] - s["t0"]) / 1e3 for s in steps]
    return out


def rounds(tmp, pairs, n):
    """pairs of rounds without and with the agent (and with bpftrace's empty
    pair, where installed), alternating: the call times of each, and the
    agent's programs' runs and time."""
    off, on, empty, prog = [], [], [], {}
    fx = lt.Fixture(4, tmp)
    lib = libllama(fx.pid) if shutil.which("bpftrace") else None
    for k in range(pairs):
        off += round_(fx, tmp, f"off{k}", n, False)["call_us"]
        if lib:
            empty += round_(fx, tmp, f"empty{k}", n, False, lib)["call_us"]
        r = round_(fx, tmp, f"on{k}", n, True)
        on += r.pop("call_us")
        bt.bpf_add(prog, r)
    fx.stop()
    return off, on, empty, prog


def main():
    args = bt.bench_args(__doc__)
    pairs, n = (1, 6) if args.quick else (3, 12)
    try:
        lt.require()
    except kpitest.Skip as e:
        print(f"{TITLE}\n\nskipped: {e}\n")
        return
    tmp = tempfile.mkdtemp(prefix="kpi-llama-bench-")
    try:
        with bt.bpf_stats():
            off, on, empty, prog = rounds(tmp, pairs, n)
    finally:
        kpitest.cleanup()
        shutil.rmtree(tmp, True)
    calls = max((p["runs"] for p in prog.values()), default=0)
    bpf_us = sum(p["ns"] for p in prog.values()) / calls / 1e3 if calls else None
    med_off, med_on = statistics.median(off), statistics.median(on)
    added = med_on - med_off
    med_empty = statistics.median(empty) if empty else None
    summary = {"call_median_us_empty_pair": med_empty,
               "trap_wall_us_per_call": med_empty - med_off if empty else None,"calls_on": calls, "calls_off": len(off), "programs": prog,
               "bpf_us_per_call": bpf_us, "call_median_us_off": med_off,
               "call_median_us_on": med_on, "added_wall_us_per_call": added,
               "bpf_share_of_call": bpf_us / med_on if bpf_us else None,
               "added_share_of_call": added / med_off}
    with open(os.path.join(args.out, "llama.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"{TITLE}\n")
    print(f"node-llama-cpp (llama.cpp v0.5.0, CPU, 1 thread), the tiny model, 4 sequences; "
          f"{pairs} rounds without and {pairs} with the agent, each {n} streamed requests of 24 "
          f"tokens one after the other and {n} at once ({len(off)} and {calls} decode calls).\n")
    print("| | µs per call | share of the call |")
    print("|---|---:|---:|")
    for name in sorted(prog):
        p = prog[name]
        if p["runs"]:
            print(f"| BPF `{name}` (bpf_stats) | {p['ns'] / p['runs'] / 1e3:.2f} | "
                  f"{p['ns'] / p['runs'] / 1e3 / med_on:.2%} |")
    if bpf_us is not None:
        print(f"| both programs | {bpf_us:.2f} | {bpf_us / med_on:.2%} |")
    if empty:
        print(f"| wall time an empty uprobe + uretprobe pair adds to a call (bpftrace; median − "
              f"off) | {med_empty - med_off:.1f} | {(med_empty - med_off) / med_off:.1%} |")
    print(f"| wall time added to a call with the agent attached (median on − off) | {added:.1f} | "
          f"{added / med_off:.1%} |")
    print(f"\nThe call itself: median {med_off:.0f} µs alone, {med_on:.0f} µs with the agent. "
          f"The added wall times are differences of medians (the machine's noise is in them); "
          f"the empty pair's is the traps and the return trampoline, which bpf_stats does not "
          f"count; the agent's also holds the CPU it takes from the server (it follows every "
          f"token write) on this {os.cpu_count()}-CPU machine.\n")


if __name__ == "__main__":
    main()
