#!/usr/bin/env python3
"""The cost of reading TLS (issues 21, 44), per TLS call and per request, in
three servers: nginx (one worker, Debian's shared libssl: uprobe and
uretprobe pairs on SSL_read/SSL_write) terminating TLS 1.2 in front of
tests/lib/sse_server.py; Node's https (OpenSSL linked into the node
executable: the same pairs on the executable); and Go's net/http
(tests/lib/sse_server.go: crypto/tls, an entry uprobe and a uprobe on each
RET of tls.(*Conn).Read/Write).  Keep-alive clients stream chat completions
in rounds without and with kpi-agent attached (--port), alternating (off on
on off ...), and the same against an identical server without TLS, so that
what reading TLS adds stands apart from the rest of the HTTP path.  Per
round: the server process's CPU per request (its schedstat run time: the
uprobe traps, the return trampolines and the programs all run on its time);
with the agent, the TLS programs' own time (kernel.bpf_stats_enabled) and the
TLS calls they saw.  Writes tls.json: nginx's at the top level, as before,
node's and go's under their names."""
import http.client, json, os, shutil, signal, ssl, statistics, sys, tempfile, threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "lib"))
import kpitest  # noqa: E402
import agenttest as at  # noqa: E402
import benchtest as bt  # noqa: E402
import nginxtest  # noqa: E402

TITLE = "## kpi-agent on TLS servers: OpenSSL shared (nginx), OpenSSL in the executable (Node), Go"
SERVER = os.path.join(kpitest.ROOT, "tests", "lib", "sse_server.py")
NODE_SERVER = os.path.join(kpitest.ROOT, "tests", "lib", "sse_server.js")
GO_SERVER = os.path.join(kpitest.BUILD, "tests", "go-sse-server")
# each server's TLS programs (bpf/kpi_tls.bpf.c); a name without "_ret" is a call's entry
TLS_PROGS = {"nginx": ("kpi_ssl_",), "node": ("kpi_ssl_",), "go": ("kpi_go_tls_",)}


def worker_pid(master):
    """nginx's one worker: the master's child."""
    with open(f"/proc/{master}/task/{master}/children") as f:
        kids = f.read().split()
    assert len(kids) == 1, kids
    return int(kids[0])


class _PlainClient(nginxtest.TLSClient):
    """The same keep-alive client without TLS."""

    def __init__(self, port):
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.c.connect()
        self.cport = self.c.sock.getsockname()[1]
        self.n = 0


def load(port, n, tag, tls, conns=4):
    """n streamed requests over conns keep-alive connections (TLS 1.2 or
    plain), one thread each."""
    ctx = nginxtest.client_ctx(ssl.TLSVersion.TLSv1_2)

    def one(c):
        cl = nginxtest.TLSClient(port, ctx) if tls else _PlainClient(port)
        for i in range(n // conns):
            g = cl.post("/v1/chat/completions", f"{tag}-{c}-{i}",
                        {"model": "m", "stream": True, "max_tokens": 16}, {"x-test-gap-ms": "0"})
            assert g["status"] == 200, g
        cl.c.close()
    ts = [threading.Thread(target=one, args=(c,)) for c in range(conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return n // conns * conns


def round_(srv, progs, n, tmp, tag, agent_on, tls):
    """One round against a TLS server or its plain twin, srv (port, pid of
    the process that serves): its CPU per request, and with the agent its
    TLS programs' runs and time."""
    port, worker = srv
    agent = None
    if agent_on:
        agent = at.start_agent(os.path.join(tmp, f"{tag}.db"), "--flush-ms", 200, "--port", port)
        agent.wait_line("TLS: pid" if tls else "HTTP mode", timeout=60)
        before = bt.bpf_programs(progs)
    c0 = bt.cpu_s(worker)
    done = load(port, n, tag, tls)
    c1 = bt.cpu_s(worker)
    out = {"agent": agent_on, "tls": tls, "requests": done, "worker_cpu_us": (c1 - c0) / done * 1e6}
    if agent:
        out["programs"] = bt.bpf_delta(before, bt.bpf_programs(progs))
        assert agent.stop() == 0, agent.lines[-10:]
    return out


# The floor: a function that does nothing, called in a loop, with an empty
# uprobe and uretprobe on it (bpftrace's, not the agent's): what this machine
# charges for a probed call before any program does any work.
FLOOR_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
__attribute__((noinline)) int probed(int x) { __asm__ volatile(""); return x + 1; }
int main(int argc, char **argv)
{
	struct timespec a, b;
	int n = atoi(argv[1]);
	volatile int s = 0;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < n; i++)
		s += probed(i);
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("%.4f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n / 1e3);
	return 0;
}
"""


def uprobe_floor(tmp, calls=100000):
    """µs a call of an empty function: bare, and with an empty uprobe +
    uretprobe pair (None where bpftrace or a compiler is missing)."""
    import subprocess
    if not shutil.which("bpftrace") or not shutil.which("cc"):
        return None, None
    src, exe = os.path.join(tmp, "floor.c"), os.path.join(tmp, "floor")
    with open(src, "w") as f:
        f.write(FLOOR_C)
    subprocess.run(["cc", "-O2", "-o", exe, src], check=True)
    bare = float(subprocess.run([exe, str(calls * 10)], capture_output=True, text=True, check=True).stdout)
    bt_ = kpitest.Proc(["bpftrace", "-e", f"uprobe:{exe}:probed {{ }} uretprobe:{exe}:probed {{ }}"])
    bt_.wait_line("Attaching", timeout=60)
    probed = float(subprocess.run([exe, str(calls)], capture_output=True, text=True, check=True).stdout)
    bt_.stop(signal.SIGINT)      # bpftrace exits on SIGINT, detaching
    return bare, probed


def start_servers(kind, tmp, crt, key, up):
    """kind's TLS server and its plain twin: {tls: (port, pid that serves)},
    and the processes to stop; each warmed by 40 requests."""
    procs, srvs = [], {}
    for tls in (True, False):
        port = kpitest.free_port()
        if kind == "nginx":
            d = os.path.join(tmp, "tls" if tls else "plain")
            os.makedirs(d)
            procs.append(nginxtest.start(d, port, up, cert=(crt, key) if tls else None))
            srvs[tls] = (port, worker_pid(procs[-1].pid))
        else:
            cmd = ([shutil.which("node") or shutil.which("nodejs"), NODE_SERVER, str(port)]
                   + (["--tls", crt, key] if tls else []) if kind == "node" else
                   [GO_SERVER, str(port)] + ([crt, key] if tls else []))
            procs.append(kpitest.Proc(cmd))
            procs[-1].wait_line("listening on")
            srvs[tls] = (port, procs[-1].pid)
        load(srvs[tls][0], 40, "warm", tls)
    return srvs, procs


def summarize(rounds):
    """One server's rounds: CPU per request off and on (medians, spreads),
    what reading TLS adds beyond the plain HTTP path, per request and per
    TLS call, and the programs' own time per call."""
    def cpu(agent, tls):
        return [r["worker_cpu_us"] for r in rounds if r["agent"] == agent and r["tls"] == tls]
    off, on = cpu(False, True), cpu(True, True)
    plain_added = statistics.median(cpu(True, False)) - statistics.median(cpu(False, False))
    prog, requests_on = {}, sum(r["requests"] for r in rounds if r["agent"] and r["tls"])
    for r in rounds:
        bt.bpf_add(prog, r.get("programs", {}))
    calls = sum(p["runs"] for name, p in prog.items() if "_ret" not in name)
    bpf_ns = sum(p["ns"] for p in prog.values())
    added = statistics.median(on) - statistics.median(off)
    tls_added = added - plain_added      # what reading TLS adds beyond the plain HTTP path
    return {
        "rounds": rounds, "programs": prog,
        "ssl_calls_per_request": calls / requests_on if requests_on else None,
        "bpf_us_per_ssl_call": bpf_ns / calls / 1e3 if calls else None,
        "worker_cpu_us_per_request_off": statistics.median(off),
        "worker_cpu_us_per_request_on": statistics.median(on),
        "worker_cpu_spread_off": [min(off), max(off)], "worker_cpu_spread_on": [min(on), max(on)],
        "added_worker_cpu_us_per_request": added,
        "added_worker_cpu_us_per_request_plain": plain_added,
        "tls_added_worker_cpu_us_per_request": tls_added,
        "tls_added_worker_cpu_us_per_ssl_call": tls_added / (calls / requests_on) if calls else None,
    }


WHO = {"nginx": ("nginx (1 worker, TLS 1.2) in front of tests/lib/sse_server.py", "nginx worker",
                 "SSL_read + SSL_write, and their _ex"),
       "node": ("Node's https (OpenSSL in the node executable)", "node process",
                "SSL_read + SSL_write, and their _ex"),
       "go": ("Go's net/http over crypto/tls (tests/lib/sse_server.go)", "Go process",
              "tls.(*Conn).Read + Write")}


def table(kind, sm, n, pairs):
    what, proc, calls = WHO[kind]
    print(f"### {what}\n")
    print(f"{n} streamed chat completions of 16 tokens a round over 4 keep-alive connections; "
          f"{pairs} rounds without and {pairs} with the agent, alternating.\n")
    print("| | value |")
    print("|---|---:|")
    print(f"| TLS calls a request ({calls}) | {sm['ssl_calls_per_request']:.1f} |")
    for name in sorted(sm["programs"]):
        p = sm["programs"][name]
        print(f"| BPF `{name}` (bpf_stats), µs a run | {p['ns'] / p['runs'] / 1e3:.2f} |")
    print(f"| BPF programs, µs per TLS call (entry + return) | {sm['bpf_us_per_ssl_call']:.2f} |")
    off, on = sm["worker_cpu_spread_off"], sm["worker_cpu_spread_on"]
    print(f"| {proc} CPU per request, µs: off (median, min-max) | "
          f"{sm['worker_cpu_us_per_request_off']:.0f} ({off[0]:.0f}-{off[1]:.0f}) |")
    print(f"| {proc} CPU per request, µs: agent on | {sm['worker_cpu_us_per_request_on']:.0f} "
          f"({on[0]:.0f}-{on[1]:.0f}) |")
    print(f"| added per request with the agent, µs (difference of medians): TLS / plain HTTP | "
          f"{sm['added_worker_cpu_us_per_request']:.1f} / "
          f"{sm['added_worker_cpu_us_per_request_plain']:.1f} |")
    print(f"| of it, reading TLS: per request / per TLS call, µs | "
          f"{sm['tls_added_worker_cpu_us_per_request']:.1f} / "
          f"{sm['tls_added_worker_cpu_us_per_ssl_call']:.2f} |\n")


def main():
    args = bt.bench_args(__doc__)
    pairs, n = (1, 400) if args.quick else (3, 1200)
    try:
        kpitest.require_root("kpi-agent")
        at.require_built(at.AGENT)
        nginxtest.find()
    except kpitest.Skip as e:
        print(f"{TITLE}\n\nskipped: {e}\n")
        return
    kinds, skipped = ["nginx"], {}
    if shutil.which("node") or shutil.which("nodejs"):
        kinds.append("node")
    else:
        skipped["node"] = "node is not installed"
    if os.path.exists(GO_SERVER):
        kinds.append("go")
    else:
        skipped["go"] = f"{GO_SERVER} is not built (make go-servers)"
    tmp = tempfile.mkdtemp(prefix="kpi-tls-bench-")
    rounds = {k: [] for k in kinds}
    try:
        crt, key = nginxtest.cert(tmp)
        up = kpitest.free_port()
        backend = kpitest.Proc([sys.executable, SERVER, str(up)])
        backend.wait_line("listening on")
        floor_bare, floor_probed = uprobe_floor(tmp)
        for kind in kinds:
            srvs, procs = start_servers(kind, tmp, crt, key, up)
            with bt.bpf_stats():
                for k in range(pairs):
                    for on in ((False, True) if k % 2 == 0 else (True, False)):
                        for tls in (True, False):
                            rounds[kind].append(round_(srvs[tls], TLS_PROGS[kind], n, tmp,
                                                       f"{kind}{len(rounds[kind])}", on, tls))
            for p in procs:
                p.stop()
        backend.stop()
    finally:
        kpitest.cleanup()
        shutil.rmtree(tmp, True)
    summary = summarize(rounds["nginx"])
    summary.update({k: summarize(rounds[k]) for k in kinds if k != "nginx"})
    summary.update({"skipped": skipped, "floor_us_per_call_bare": floor_bare,
                    "floor_us_per_call_empty_uprobe_pair": floor_probed})
    with open(os.path.join(args.out, "tls.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"{TITLE}\n")
    for kind in kinds:
        table(kind, summary if kind == "nginx" else summary[kind], n, pairs)
    for kind, why in skipped.items():
        print(f"{WHO[kind][0]}: skipped: {why}\n")
    if floor_probed is not None:
        print(f"This machine's floor: an empty function, bare / under an empty uprobe + uretprobe "
              f"(bpftrace): {floor_bare:.3f} / {floor_probed:.2f} µs a call.\n")
    print("The server's CPU holds everything the agent makes it run: the syscall and tcp "
          "programs and payload copies of its client and upstream connections (the plain HTTP "
          "rounds, against an identical server without TLS), and for TLS the uprobe traps, return "
          "trampolines and plaintext copies, which bpf_stats counts only in part (its programs' "
          "own time). Differences of medians: the machine's noise is in them.\n")


if __name__ == "__main__":
    main()
