#!/usr/bin/env python3
"""kpi-agent with servers in containers (issue 42), podman with runc, images
made with `podman import` of a root file system (kpi-infer, its libraries, the
tiny model), each container an overlay mount of its own:

- exec -> traced for kpi-infer started in a container, under an agent in
  discovery mode (no target flags), from the agent's 'attached' line: the
  same image each time (a pod restarting), and a new image each time (a new
  deployment: a file the agent has not seen, attached after the exec);
  target 50 ms, as on the host (bench_attach);
- the agent's CPU and memory under `--port 8000` with 20 containers of one
  image idle, then serving (a client thread per container, streamed
  completions, over podman's bridge network), against the agent with no
  container, measured from /proc/PID/stat and status;
- the attach count: the kernel's USDT links (bpftool) with 1 and with 10 pods
  of one image, against one set (one attach for the image's file).
Writes containers.json."""
import json, os, shutil, statistics, sys, tempfile, threading, time
import http.client

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
import kpitest  # noqa: E402
import agenttest as at  # noqa: E402
import benchtest as bt  # noqa: E402
import faulttest as ft  # noqa: E402
import podtest  # noqa: E402
import servertest  # noqa: E402

TARGET_MS = 50.0
HZ = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    """utime + stime of pid, seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def mem_kb(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0])
    return out


def window(agent_pid, seconds):
    """The agent's CPU share (percent of one core) over seconds, and its memory."""
    c0, t0 = cpu_s(agent_pid), time.monotonic()
    time.sleep(seconds)
    c1, t1 = cpu_s(agent_pid), time.monotonic()
    return {"cpu_percent": 100 * (c1 - c0) / (t1 - t0), "cpu_s": c1 - c0, "wall_s": t1 - t0,
            "t0": t0, "t1": t1,
            **{k.lower() + "_kb": v for k, v in mem_kb(agent_pid).items()}}


def stat(v):
    return {"median": statistics.median(v), "max": max(v), "min": min(v), "n": len(v)} if v else None


def exec_rounds(d, root, rounds, new_image):
    """rounds containers, one after another, each sent 3 requests and stopped."""
    db = os.path.join(d, f"exec-{int(new_image)}.db")
    agent = at.start_agent(db, "--flush-ms", 100)
    agent.wait_line("writing ", timeout=60)
    image = None if new_image else podtest.import_image(d, root, "kpi-bench-exec")
    pids, tags = [], []
    for r in range(rounds):
        if new_image:
            # another layer (podman would share one of the same content):
            # another kpi-infer file, one the agent has not seen
            with open(os.path.join(root, "round"), "w") as f:
                f.write(f"{os.getpid()} {r}\n")
            image = podtest.import_image(d, root, f"kpi-bench-exec-{r}")
        name = f"kpi-bench-exec-{int(new_image)}-{r}"
        p, pid = podtest.run_server(name, image)
        tag = f"x{int(new_image)}{r}-{os.getpid()}"
        kpitest.run(["nsenter", f"--net=/proc/{pid}/ns/net", "python3", "-c", servertest.NS_CLIENT, tag,
                     "3", str(podtest.PORT)], check=True, timeout=60)
        kpitest.run(["podman", "stop", "-t", "10", name], timeout=60)
        p.stop(timeout=30)
        pids.append(pid)
        tags.append(tag)
    time.sleep(0.3)
    assert agent.stop() == 0, agent.lines[-10:]
    lines = at.attached_lines(agent.lines, set(pids))
    lat = [at.exec_latency(lines.get(pid)) for pid in pids]
    got = {rid for (rid,) in ft.query(db, "SELECT request_id FROM requests WHERE source = 'usdt'")}
    recorded = sum(f"{t}-{i}" in got for t in tags for i in range(3))
    return {"lifetimes": rounds, "requests_served": 3 * rounds, "requests_recorded_usdt": recorded,
            "exec_to_traced_ms": stat([l[0] for l in lat if l]),
            "exec_to_agent_knew_ms": stat([l[1] for l in lat if l and l[1] is not None]),
            "per_lifetime_ms": [l[0] if l else None for l in lat]}


def serve(ip, tag, stop, done):
    """Streamed completions to ip, one after another, until stop; the monotonic
    time each one ended is appended to done."""
    n = 0
    while not stop.is_set():
        try:
            c = http.client.HTTPConnection(ip, podtest.PORT, timeout=30)
            c.request("POST", "/v1/completions",
                      json.dumps({"prompt": "hello", "max_tokens": 16, "stream": True}),
                      {"content-type": "application/json", "x-request-id": f"{tag}-{n}"})
            r = c.getresponse()
            r.read()
            c.close()
            if r.status == 200:
                done.append(time.monotonic())
            n += 1
        except OSError:
            time.sleep(0.05)


def fleet(d, root, n_ctr, seconds):
    image = podtest.import_image(d, root, "kpi-bench-pods")
    db = os.path.join(d, "pods.db")
    agent = at.start_agent(db, "--port", podtest.PORT, "--flush-ms", 100)
    agent.wait_line("writing ", timeout=60)
    apid = agent.p.pid
    out = {"containers": n_ctr, "none": window(apid, seconds)}
    ips, links = [], {}
    for i in range(n_ctr):
        _, pid = podtest.run_server(f"kpi-bench-pod-{i}", image, "--host", "0.0.0.0", network="podman")
        agent.wait_line(f"attached to pid {pid} ", timeout=60)
        ip = kpitest.run(["podman", "inspect", "--format", "{{.NetworkSettings.IPAddress}}",
                          f"kpi-bench-pod-{i}"], check=True).stdout.strip()
        ips.append(ip)
        if i + 1 in (1, 10):
            links[i + 1] = {"usdt_links": podtest.uprobe_links(podtest.USDT_PROGS),
                            "agent_perf_event_fds": sum(
                                "perf_event" in os.readlink(f"/proc/{apid}/fd/{fd}")
                                for fd in os.listdir(f"/proc/{apid}/fd")
                                if os.path.exists(f"/proc/{apid}/fd/{fd}"))}
    out["attach"] = links
    out["idle"] = window(apid, seconds)
    stop, done = threading.Event(), []
    threads = [threading.Thread(target=serve, args=(ip, f"s{i}-{os.getpid()}", stop, done), daemon=True)
               for i, ip in enumerate(ips)]
    for t in threads:
        t.start()
    time.sleep(1)       # every client under way
    out["serving"] = window(apid, seconds)
    stop.set()
    for t in threads:
        t.join(60)
    time.sleep(0.5)
    t0 = time.monotonic()
    assert agent.stop() == 0, agent.lines[-10:]
    out["stop_s"] = time.monotonic() - t0     # SIGTERM -> exit, the trace flushed
    sv = out["serving"]
    in_window = sum(sv["t0"] <= t <= sv["t1"] for t in done)
    rows = ft.query(db, "SELECT count(*) FROM requests WHERE source = 'usdt' AND container_name LIKE "
                        "'kpi-bench-pod-%'")[0][0]
    sv.update({"requests_served": len(done), "requests_in_window": in_window, "rows_usdt": rows,
               "requests_per_s": in_window / sv["wall_s"],
               # the agent's CPU in the window over the requests that ended in it
               "agent_cpu_us_per_request": 1e6 * sv["cpu_s"] / in_window if in_window else None})
    return out


def main():
    args = bt.bench_args(__doc__)
    rounds, n_ctr, secs = (4, 10, 5) if args.quick else (10, 20, 10)
    title = "## kpi-agent with servers in containers\n"
    try:
        podtest.require("podman", "runc", "bpftool")
    except kpitest.Skip as e:
        print(f"{title}\nskipped: {e}\n")
        return
    d = tempfile.mkdtemp(prefix="kpi-containers-bench-")
    os.chmod(d, 0o755)
    try:
        root = podtest.build_rootfs(d)
        same = exec_rounds(d, root, rounds, new_image=False)
        new = exec_rounds(d, root, rounds, new_image=True)
        pods = fleet(d, root, n_ctr, secs)
    finally:
        kpitest.cleanup()
        shutil.rmtree(d, True)
    for m in (same, new):
        t = m["exec_to_traced_ms"]
        m["met"] = bool(t and t["n"] == m["lifetimes"] and t["max"] <= TARGET_MS)
    att = pods["attach"]
    one_set = att[1]["usdt_links"] == att[10]["usdt_links"]
    summary = {"target_ms": TARGET_MS, "exec_same_image": same, "exec_new_image_each_time": new,
               "agent_with_containers": pods, "attach_one_set_for_10_pods": one_set}
    with open(os.path.join(args.out, "containers.json"), "w") as f:
        json.dump(summary, f, indent=1)
    fmt = lambda s: f"{s['median']:.1f} / {s['max']:.1f}" if s else "—"
    print(title)
    print(f"kpi-infer (tiny model) in podman containers (runc, an image of one layer from `podman "
          f"import`), {rounds} lifetimes each way under `kpi-agent` in discovery mode, 3 requests each.\n")
    print("| | exec → traced, ms (median / max) | exec → agent knew, ms | usdt rows |")
    print("|---|---|---|---|")
    for t, m in (("same image (a pod restarting)", same), ("new image each time (a new deployment)", new)):
        print(f"| {t} | {fmt(m['exec_to_traced_ms'])} | {fmt(m['exec_to_agent_knew_ms'])} | "
              f"{m['requests_recorded_usdt']} of {m['requests_served']} |")
    print(f"\nTarget: traced within {TARGET_MS:.0f} ms of the exec: same image "
          f"{'met' if same['met'] else 'NOT met'}, new image {'met' if new['met'] else 'NOT met'}.\n")
    print(f"`kpi-agent --port 8000` with {n_ctr} containers of one image on podman's bridge, "
          f"{secs} s windows:\n")
    print("| | agent CPU, % of a core | RSS, MiB (peak) |")
    print("|---|---|---|")
    for t, k in (("no container", "none"), (f"{n_ctr} idle", "idle"), (f"{n_ctr} serving", "serving")):
        w = pods[k]
        print(f"| {t} | {w['cpu_percent']:.2f} | {w['vmrss_kb'] / 1024:.1f} ({w['vmhwm_kb'] / 1024:.1f}) |")
    sv = pods["serving"]
    print(f"\nServing: {sv['requests_in_window']} requests ended in the window ({sv['requests_per_s']:.0f}/s); "
          f"{sv['requests_served']} in all, {sv['rows_usdt']} usdt rows; the agent's CPU "
          f"{sv['agent_cpu_us_per_request'] or 0:.0f} µs a request.\n")
    print(f"The agent's stop with {n_ctr} targets (SIGTERM to exit, the trace flushed): "
          f"{pods['stop_s']:.2f} s.\n")
    print(f"Attach count: the kernel's USDT links {att[1]['usdt_links']} with 1 pod, "
          f"{att[10]['usdt_links']} with 10 (one set for the image's file: {'yes' if one_set else 'NO'}); "
          f"the agent's perf events {att[1]['agent_perf_event_fds']} and {att[10]['agent_perf_event_fds']}.\n")


if __name__ == "__main__":
    main()
