#!/usr/bin/env python3
"""The cost of following HTTP/2 and gRPC (issue 44): per frame and per gRPC
message, agent + BPF.  Debian's hypercorn serves an ASGI SSE app over h2c and
Debian's grpcio a server-streaming service (tests/lib/h2_server.py); one
client connection each (tests/lib/h2_client.py) runs rounds of 8 streams or
calls at once, in rounds without and with kpi-agent attached (--port),
alternating (off on on off ...).  Per round: the server's CPU (schedstat:
the syscall programs and payload copies run on its time), and with the agent
its own CPU (the frames parsed, HPACK inflated, rows written; its CPU over
2 s idle before, as a rate, taken off), its BPF
programs' time (kernel.bpf_stats_enabled), and the frames and gRPC messages
its exit line counted.  Writes h2.json."""
import json, os, shutil, statistics, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
import kpitest  # noqa: E402
import agenttest as at  # noqa: E402
import benchtest as bt  # noqa: E402

TITLE = "## kpi-agent on HTTP/2 and gRPC servers: per frame and per gRPC message"
LIB = os.path.join(kpitest.ROOT, "tests", "lib")
DEB_PY = "/usr/bin/python3"     # Debian's python3-hypercorn, -h2, -grpcio import under it
PROGS = ("kpi_",)
IDLE_S = 2.0    # how long the agent's idle CPU is measured before each load


def load(kind, port, tag, rounds):
    """rounds of 8 SSE streams (3 to 10 events each, no gap between them) or
    8 server-streaming calls at once, on one connection."""
    args = (["sse", port, tag, 8, "--rounds", rounds, "--gap-ms", 0] if kind == "sse"
            else ["grpc", port, tag, 8, "--rounds", rounds])
    p = kpitest.run([DEB_PY, os.path.join(LIB, "h2_client.py"), *map(str, args)], timeout=300)
    assert p.returncode == 0, (args, p.stderr[-2000:])
    return len(json.loads(p.stdout.strip().splitlines()[-1]))


def counted(lines):
    """(frames, gRPC messages) from the agent's http2 exit line."""
    import re
    for line in lines:
        m = re.match(r"http2: \d+ connections \(\d+ open before the attach\), (\d+) frames, \d+ streams, "
                     r"(\d+) gRPC messages", line)
        if m:
            return int(m.group(1)), int(m.group(2))
    raise AssertionError("no http2 line: " + "\n".join(lines[-10:]))


def round_(kind, srv, tmp, tag, on, rounds):
    port, pid = srv
    agent = None
    if on:
        agent = at.start_agent(os.path.join(tmp, f"{tag}.db"), "--flush-ms", 200, "--port", port, wait=False)
        agent.wait_line(f"attached to pid {pid}", timeout=60)
        # the agent's own CPU with nothing to follow (rescans, flushes), a
        # rate taken off its CPU under the load: what is left is the load's
        i0, w0 = bt.cpu_s(agent.pid), time.monotonic()
        time.sleep(IDLE_S)
        idle_rate = (bt.cpu_s(agent.pid) - i0) / (time.monotonic() - w0)
        before = bt.bpf_programs(PROGS)
        a0 = bt.cpu_s(agent.pid)
    s0, w0 = bt.cpu_s(pid), time.monotonic()
    n = load(kind, port, tag, rounds)
    s1, wall = bt.cpu_s(pid), time.monotonic() - w0
    out = {"kind": kind, "agent": on, "requests": n, "server_cpu_s": s1 - s0, "wall_s": wall}
    if agent:
        out["programs"] = bt.bpf_delta(before, bt.bpf_programs(PROGS))
        out["agent_idle_cpu_per_s"] = idle_rate
        out["agent_cpu_s"] = bt.cpu_s(agent.pid) - a0 - idle_rate * wall
        assert agent.stop() == 0, agent.lines[-10:]
        out["frames"], out["grpc_messages"] = counted(agent.lines)
    return out


def main():
    args = bt.bench_args(__doc__)
    pairs, rounds = (1, 10) if args.quick else (3, 40)
    try:
        kpitest.require_root("kpi-agent")
        at.require_built(at.AGENT)
        for mod in ("hypercorn", "h2", "grpc"):
            if kpitest.run([DEB_PY, "-c", f"import {mod}"]).returncode:
                raise kpitest.Skip(f"Debian's python3 module {mod} is not installed (make deps installs it)")
    except kpitest.Skip as e:
        print(f"{TITLE}\n\nskipped: {e}\n")
        return
    tmp = tempfile.mkdtemp(prefix="kpi-h2-bench-")
    runs = []
    try:
        srvs = {}
        for kind, mode in (("sse", "asgi"), ("grpc", "grpc")):
            port = kpitest.free_port()
            p = kpitest.Proc([DEB_PY, os.path.join(LIB, "h2_server.py"), mode, str(port)])
            p.wait_line("listening on")
            srvs[kind] = (port, p.pid)
            load(kind, port, "warm", 2)
        with bt.bpf_stats():
            for k in range(pairs):
                for on in ((False, True) if k % 2 == 0 else (True, False)):
                    for kind in ("sse", "grpc"):
                        runs.append(round_(kind, srvs[kind], tmp, f"r{len(runs)}", on, rounds))
                        print(f"bench_h2: {kind} agent {'on' if on else 'off'}: "
                              f"{runs[-1]['server_cpu_s']:.3f} s server CPU", file=sys.stderr, flush=True)
    finally:
        kpitest.cleanup()
        shutil.rmtree(tmp, True)

    summary = {"rounds": runs, "pairs": pairs, "client_rounds": rounds}
    rows = []
    for kind, unit in (("sse", "frame"), ("grpc", "gRPC message")):
        on = [r for r in runs if r["kind"] == kind and r["agent"]]
        off = [r for r in runs if r["kind"] == kind and not r["agent"]]
        per = "frames" if kind == "sse" else "grpc_messages"
        # per unit: each round's own count (the agent's), the server's added
        # CPU from the difference of the off and on medians per request
        units_per_req = statistics.median(r[per] / r["requests"] for r in on)
        srv_off = [r["server_cpu_s"] / r["requests"] * 1e6 for r in off]
        srv_on = [r["server_cpu_s"] / r["requests"] * 1e6 for r in on]
        agent_us = [r["agent_cpu_s"] / r[per] * 1e6 for r in on]
        bpf_us = [sum(p["ns"] for p in r["programs"].values()) / r[per] / 1e3 for r in on]
        added = (statistics.median(srv_on) - statistics.median(srv_off)) / units_per_req
        s = {"units_per_request": units_per_req,
             "frames_per_request": statistics.median(r["frames"] / r["requests"] for r in on),
             "server_cpu_us_per_request_off": bt.agg(srv_off), "server_cpu_us_per_request_on": bt.agg(srv_on),
             "server_added_us_per_unit": added, "agent_cpu_us_per_unit": bt.agg(agent_us),
             "bpf_us_per_unit": bt.agg(bpf_us)}
        s["agent_plus_server_us_per_unit"] = s["agent_cpu_us_per_unit"]["median"] + added
        summary[kind] = s
        rows.append((kind, unit, s))
    with open(os.path.join(args.out, "h2.json"), "w") as f:
        json.dump(summary, f, indent=1)

    print(f"{TITLE}\n")
    print(f"hypercorn (h2c SSE, events with no gap) and grpcio (server-streaming calls), one client "
          f"connection each, {rounds} rounds of 8 streams or calls at once a run; {pairs} runs "
          f"without and {pairs} with the agent, alternating. Medians (min-max).\n")
    print("| | HTTP/2 SSE: per frame | gRPC: per message |")
    print("|---|---:|---:|")
    a, b = rows[0][2], rows[1][2]
    print(f"| frames (gRPC messages) a request | {a['frames_per_request']:.1f} | "
          f"{b['units_per_request']:.1f} ({b['frames_per_request']:.1f} frames) |")
    print(f"| agent CPU, µs | {bt.cell(a['agent_cpu_us_per_unit'], '{:.2f}')} | "
          f"{bt.cell(b['agent_cpu_us_per_unit'], '{:.2f}')} |")
    print(f"| BPF programs (bpf_stats), µs | {bt.cell(a['bpf_us_per_unit'], '{:.2f}')} | "
          f"{bt.cell(b['bpf_us_per_unit'], '{:.2f}')} |")
    print(f"| server CPU added, µs (difference of medians) | {a['server_added_us_per_unit']:.2f} | "
          f"{b['server_added_us_per_unit']:.2f} |")
    print(f"| agent + server, µs | {a['agent_plus_server_us_per_unit']:.2f} | "
          f"{b['agent_plus_server_us_per_unit']:.2f} |")
    print("\nThe server's CPU holds the syscall programs and payload copies of its connection "
          "(the BPF line is their own time, a part of it); the agent's is the frames parsed, "
          "header blocks inflated (libnghttp2) and rows assembled and written. A gRPC message's "
          "DATA frame carries its message, so its cost per message includes its frames'.\n")


if __name__ == "__main__":
    main()
