"""kpi-agent and servers in real containers (issue 42, second stage), as root
with real BPF, podman and containerd from Debian, no image registry: every
container's root file system is a directory the test builds (the worktree's
kpi-infer, the shared libraries ldd lists, a model).  Two podman pods, each
with kpi-infer on port 8000 in a network namespace of its own and the
annotations CRI-O and containerd's CRI write, are found by an agent started
with `--port 8000` alone; a third pod started after it is traced from its
first request; a containerd container (`ctr run`, containerd's own
"/NAMESPACE/ID" cgroup) is named from its bundle.  Every row is `source` usdt
and names its container and pod."""
import json, os, secrets, shlex, shutil, signal, socket, sqlite3, subprocess, time, urllib.request

import kpitest
import agenttest as at
import fleettest as ft
import promtext
import servertest
import podtest
from podtest import PORT, SERVE, ULIMITS, build_rootfs, rootfs_with

N = 3   # requests per container


def _require_tools():
    podtest.require("podman", "runc", "ctr", "containerd")


def cri_o_annotations(pod, ns, uid, name):
    return {"io.kubernetes.pod.name": pod, "io.kubernetes.pod.namespace": ns,
            "io.kubernetes.pod.uid": uid, "io.kubernetes.container.name": name}


def containerd_annotations(pod, ns, uid, name):
    return {"io.kubernetes.cri.sandbox-name": pod, "io.kubernetes.cri.sandbox-namespace": ns,
            "io.kubernetes.cri.sandbox-uid": uid, "io.kubernetes.cri.container-name": name}


class Pod:
    """A podman pod (no infra container: its pause image would come from a
    registry) holding one kpi-infer in a network namespace of its own."""

    def __init__(self, name, rootfs, annotations, runtime="runc"):
        self.name = name
        kpitest.run(["podman", "pod", "create", "--infra=false", "--name", name], check=True)
        kpitest.on_cleanup(lambda: kpitest.run(["podman", "pod", "rm", "-f", "-t", "0", name]))
        ann = [a for k, v in annotations.items() for a in ("--annotation", f"{k}={v}")]
        self.ctr = f"{name}-srv"
        self.proc = kpitest.Proc(["podman", "run", "--rm", "--runtime", runtime, *ULIMITS,
                                  "--pod", name, "--network", "none", "--name", self.ctr, *ann,
                                  "--rootfs", rootfs, *SERVE])
        self.proc.wait_line("listening on", timeout=60)
        out = kpitest.run(["podman", "inspect", "--format", "{{.State.Pid}} {{.Id}}", self.ctr],
                          check=True).stdout.split()
        self.pid, self.id = int(out[0]), out[1]


def crun_refusal(rootfs):
    """Why crun cannot run a container on this host (cgroup v1 controllers
    beside a cgroup2 mount that has some: 'hybrid mode'), or None."""
    p = kpitest.run(["podman", "run", "--rm", "--runtime", "crun", *ULIMITS, "--network", "none",
                     "--rootfs", rootfs, "/kpi-infer", "--help"], timeout=60)
    if p.returncode == 0:
        return None
    return (p.stdout + p.stderr).strip().splitlines()[-1]


def clients(pid, tag, n=N):
    """n requests to the server in pid's network namespace."""
    kpitest.run(["nsenter", f"--net=/proc/{pid}/ns/net", "python3", "-c", servertest.NS_CLIENT, tag, str(n),
                 str(PORT)],
                check=True, timeout=60)


class Containerd:
    """A containerd of the test's own (socket and content store in its
    directory) whose task state is the host's /run/containerd, where kubelet's
    containerd keeps it and the agent looks; the host's own daemon when one
    serves there."""

    def __init__(self, d):
        self.ns = "default"
        host_sock = "/run/containerd/containerd.sock"
        if os.path.exists(host_sock) and self._alive(host_sock):
            self.sock = host_sock
            return
        self.sock = os.path.join(d, "containerd.sock")
        self.proc = kpitest.Proc(["containerd", "--address", self.sock, "--root",
                                  os.path.join(d, "containerd-root"), "--state", "/run/containerd"])
        self.proc.wait_line("containerd successfully booted", timeout=30)
        kpitest.on_cleanup(self.proc.stop)

    @staticmethod
    def _alive(path):
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(path)
            return True
        except OSError:
            return False
        finally:
            s.close()

    def ctr(self, *args, **kw):
        return kpitest.run(["ctr", "--address", self.sock, "-n", self.ns, *args], **kw)

    def run(self, cid, rootfs, annotations):
        ann = [a for k, v in annotations.items() for a in ("--annotation", f"{k}={v}")]
        p = kpitest.Proc(["ctr", "--address", self.sock, "-n", self.ns, "run", "--rm", *ann,
                          "--rootfs", rootfs, cid, *SERVE])

        def rm():
            self.ctr("task", "kill", "-s", "KILL", cid)
            p.stop(timeout=30)
            self.ctr("container", "rm", cid)
        kpitest.on_cleanup(rm)
        p.wait_line("listening on", timeout=60)
        for line in self.ctr("task", "ls", check=True).stdout.splitlines():
            if line.split()[:1] == [cid]:
                return int(line.split()[1])
        raise AssertionError(f"ctr task ls has no {cid}")


def daemonset_argv(d, name, runtime, *args):
    """docs/agent.md's `podman run` line of the agent in a container, as
    written but for its name, the trace's host path (d/trace) and the image
    (a root file system of the worktree's kpi-agent), run by runtime; args go
    to kpi-agent."""
    with open(os.path.join(kpitest.ROOT, "docs", "agent.md")) as f:
        text = f.read()
    start = text.index("podman run --rm --name kpi-agent ")
    argv = shlex.split(text[start:text.index("```", start)].replace("\\\n", " "))
    image = argv.index("localhost/kpiscope-agent:latest")
    assert argv[image + 1] == "kpi-agent", argv
    argv[argv.index("--name") + 1] = name
    host = os.path.join(d, "trace")
    os.makedirs(host)
    argv[argv.index("/var/lib/kpiscope:/var/lib/kpiscope")] = f"{host}:/var/lib/kpiscope"
    root = os.path.join(d, "agent-rootfs")
    rootfs_with(root, at.AGENT, "/usr/bin/kpi-agent")
    argv[image:image + 1] = ["--runtime", runtime, *ULIMITS, "--rootfs", root]
    kpitest.on_cleanup(lambda: kpitest.run(["podman", "rm", "-f", "-t", "0", name]))
    return argv + [*map(str, args)], os.path.join(host, "trace.db")


ROW = "request_id, pid, source, container_id, container_name, pod_name, pod_namespace, pod_uid, cgroup_id"
# what two agents tracing the same requests agree on (their own clocks' marks aside)
SAME = ROW + ", prompt_tokens, output_tokens, finish_reason, http_status"


def _rows(db, tag, cols=ROW):
    c = sqlite3.connect(db)
    rows = c.execute(f"SELECT {cols} FROM requests WHERE request_id LIKE ? ORDER BY request_id",
                     (f"%-{tag}-%",)).fetchall()
    c.close()
    return rows


def _uid():
    h = secrets.token_hex(16)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


# argv: REQUEST-ID.  One long stream from 127.0.0.1:PORT; "first" once its
# first event is read, then reads until the server is gone.
STREAM = """
import http.client, json, sys
c = http.client.HTTPConnection("127.0.0.1", %d, timeout=30)
c.request("POST", "/v1/completions", json.dumps({"prompt": "hello", "max_tokens": 2000, "stream": True}),
          {"content-type": "application/json", "x-request-id": sys.argv[1]})
r = c.getresponse()
while not r.fp.readline().startswith(b"data:"):
    pass
print("first", flush=True)
try:
    while r.fp.readline():
        pass
except OSError:
    pass
""" % PORT


def _check_named(rows, tag, letters, want, ids, pids, lines):
    """Every letter's N requests, usdt, with its container and pod."""
    for letter in letters:
        mine = [r for r in rows if r[0].startswith(f"{letter}-{tag}-")]
        assert sorted(r[0] for r in mine) == [f"{letter}-{tag}-{i}" for i in range(N)], \
            (letter, mine, lines[-30:])
        pod, ns, uid, name = want[letter]
        for r in mine:
            assert r[1:8] == (pids[letter], "usdt", ids[letter], name, pod, ns, uid), (letter, r)
            assert r[8], r
        assert any(f"pid {pids[letter]} is in " in l and
                   f"container {ids[letter][:12]} ({name}), pod {ns}/{pod}" in l for l in lines), \
            (letter, lines)


def _check_exported(metrics, spans, want, ids, pids):
    """/metrics: each container's request series carry OpenTelemetry's k8s
    labels (its pod's, nothing else's); OTLP: its resource the k8s and
    container attributes."""
    for k, (pod, ns, uid, name) in want.items():
        series = [dict(lb) for (n, lb), v in metrics.items()
                  if n == "gen_ai_server_request_duration_seconds_count" and dict(lb).get("pid") == str(pids[k])]
        assert series, (k, [n for n, _ in metrics][:20])
        for lb in series:
            assert (lb.get("k8s_namespace_name"), lb.get("k8s_pod_name"), lb.get("k8s_container_name")) == \
                (ns, pod, name), (k, lb)
        res = [r for r, _, _ in spans if r.get("process.pid") == pids[k]]
        assert res, k
        for r in res:
            assert (r.get("k8s.pod.name"), r.get("k8s.namespace.name"), r.get("k8s.container.name"),
                    r.get("k8s.pod.uid"), r.get("container.id")) == (pod, ns, name, uid, ids[k]), (k, r)


def test_pods_and_containerd_by_port():
    """Pods a and b serve before any agent.  The first agent asks for
    container srv-c of pod c alone: it waits, saying so, takes c when it
    starts (held at its listen(), so from its first request) and leaves a and
    b.  The second, `--port 8000` alone, finds a, b and c, and a containerd
    container started after it."""
    _require_tools()
    d = kpitest.tmpdir("kpi-agent-pods-")
    rootfs = build_rootfs(d)
    tag = secrets.token_hex(3)
    refusal = crun_refusal(rootfs)
    if refusal:
        print(f"crun cannot run containers on this host ({refusal}): runc runs them all")
    specs = {"a": (cri_o_annotations, "crun" if not refusal else "runc"),
             "b": (containerd_annotations, "runc"),
             "c": (cri_o_annotations, "runc")}
    want = {k: (f"kpt-{tag}-{k}", f"ns-{k}", _uid(), f"srv-{k}") for k in "abcd"}
    pods = {}

    def pod(k):
        ann, rt = specs[k]
        pods[k] = Pod(want[k][0], rootfs, ann(*want[k]), rt)
    pod("a")
    pod("b")
    db1 = os.path.join(d, "selected.db")
    sel = f"ns-c/{want['c'][0]}"
    agent = at.start_agent(db1, "--port", PORT, "--pod", sel, "--container", "srv-c", "--flush-ms", 100)
    agent.wait_line(f"waiting for a process to listen on port {PORT} in container srv-c of pod {sel}",
                    timeout=30)
    pod("c")
    for k, p in pods.items():
        clients(p.pid, f"{k}-{tag}")
    selected = agent
    selected.p.send_signal(signal.SIGTERM)     # its stop overlaps the next agents' start
    ids = {k: p.id for k, p in pods.items()}
    pids = {k: p.pid for k, p in pods.items()}

    # the second agent on the host, and one in a container as the DaemonSet
    # runs it (docs/agent.md's podman line), tracing the same pods at once
    ctrd = Containerd(d)    # before the agent container mounts /run/containerd
    db = os.path.join(d, "trace.db")
    mport, rx = kpitest.free_port(), ft.Receiver()
    agent = kpitest.Proc([at.AGENT, "--db", db, "--port", str(PORT), "--flush-ms", "100", "--metrics",
                          f"127.0.0.1:{mport}", "--otlp", f"http://127.0.0.1:{rx.port}"],
                         env={"OTEL_BSP_SCHEDULE_DELAY": "100"})
    ds_name = f"kpt-{tag}-agent"
    ds_argv, ds_db = daemonset_argv(d, ds_name, specs["a"][1], "--port", PORT, "--flush-ms", 100)
    ds = kpitest.Proc(ds_argv)
    assert selected.stop() == 0, "\n".join(selected.lines[-20:])
    rows = _rows(db1, tag)
    _check_named(rows, tag, "c", want, ids, pids, selected.lines)
    assert all(r[0].startswith(f"c-{tag}-") for r in rows), rows
    assert not any(f"attached to pid {pids[k]} " in l for k in "ab" for l in selected.lines), selected.lines
    for a in (agent, ds):
        for p in pods.values():
            a.wait_line(f"attached to pid {p.pid} ", timeout=60)
        a.wait_line("writing ", timeout=30)
    for k, p in pods.items():
        clients(p.pid, f"{k}-{tag}")
    # pod b's server killed mid-stream: its request is kept, its end marked
    cut = kpitest.Proc(["nsenter", f"--net=/proc/{pids['b']}/ns/net", "python3", "-c", STREAM,
                        f"cut-{tag}-b"])
    cut.wait_line("first", timeout=30)
    os.kill(pids["b"], signal.SIGKILL)
    assert cut.p.wait(timeout=30) == 0, cut.drain()    # the stream ends with its server
    for a in (agent, ds):
        a.wait_line(f"detached from pid {pids['b']}", timeout=30)
    # containerd: ctr run, its own cgroup shape (/default/ID), after the agents
    ids["d"] = secrets.token_hex(32)
    pids["d"] = ctrd.run(ids["d"], rootfs, containerd_annotations(*want["d"]))
    for a in (agent, ds):
        a.wait_line(f"attached to pid {pids['d']} ", timeout=30)
    clients(pids["d"], f"d-{tag}")
    rx.wait_spans(lambda sps: all(any(res.get("process.pid") == pids[k] for res, _, _ in sps)
                                  for k in "abcd"), timeout=30)
    with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5) as r:
        metrics = promtext.by_labels(r.read().decode())
    # both stopped at once; podman stop sends the agent SIGTERM, podman run
    # then ends with its status
    stop = subprocess.Popen(["podman", "stop", "-t", "30", ds_name], stdout=subprocess.DEVNULL)
    assert agent.stop() == 0, "\n".join(agent.lines[-20:])
    assert stop.wait(timeout=60) == 0
    rc = ds.p.wait(timeout=30)
    ds.drain()
    assert rc == 0 and any(l.startswith("losses: none") for l in ds.lines), (rc, ds.lines[-20:])
    _check_named(_rows(db, tag), tag, "abcd", want, ids, pids, agent.lines)
    _check_exported(metrics, rx.spans(), want, ids, pids)
    # the agent in the container wrote the same rows
    assert _rows(ds_db, tag, SAME) == _rows(db, tag, SAME), (ds.lines[-20:], agent.lines[-20:])
    c = sqlite3.connect(db)
    got = c.execute("SELECT pid, source, pod_name, end_reason, finish_reason, ttft_ns IS NOT NULL, "
                    "t_done_ns > t_first_ns FROM requests WHERE request_id = ?", (f"cut-{tag}-b",)).fetchall()
    c.close()
    assert got == [(pids["b"], "usdt", want["b"][0], "target_exit", None, 1, 1)], got
    assert any(l.startswith("containers: 4 resolved (4 named") for l in agent.lines), agent.lines


def test_pods_of_one_image_share_one_attach():
    """Three containers of one imported image (each its own overlay mount, so
    /proc/PID/root/kpi-infer is another device each time) under `--port 8000`:
    kpi-infer's USDT probes are attached once, on the image layer's file that
    all three map, and every request of each is a usdt row naming its
    container."""
    podtest.require("podman", "runc", "bpftool")
    d = kpitest.tmpdir("kpi-agent-image-")
    tag = secrets.token_hex(3)
    root = build_rootfs(d)
    image = podtest.import_image(d, root, f"kpi-infer-{tag}")
    db = os.path.join(d, "trace.db")
    agent = at.start_agent(db, "--port", PORT, "--flush-ms", 100)
    agent.wait_line("writing ", timeout=60)
    names = [f"kpi-{tag}-{i}" for i in range(3)]
    pids, links = [], []
    for name in names:
        _, pid = podtest.run_server(name, image)
        agent.wait_line(f"attached to pid {pid} ", timeout=60)
        pids.append(pid)
        links.append(podtest.uprobe_links(podtest.USDT_PROGS))
    seen = [os.stat(f"/proc/{pid}/root/kpi-infer") for pid in pids]
    assert len({s.st_dev for s in seen}) == 3 and len({s.st_ino for s in seen}) == 1, seen
    print(f"     USDT links after each container: {links}")
    assert links[0] > 0 and links[1:] == [links[0]] * 2, \
        f"USDT links after 1, 2, 3 containers of one image: {links} (want one attach for the image's file)"
    for i, pid in enumerate(pids):
        clients(pid, f"{i}-{tag}")
    assert agent.stop() == 0, agent.lines[-20:]
    rows = _rows(db, tag, "request_id, pid, source, container_name, weight_type")
    for i, (name, pid) in enumerate(zip(names, pids)):
        mine = [r for r in rows if r[0].startswith(f"{i}-{tag}-")]
        assert [r[0] for r in mine] == [f"{i}-{tag}-{k}" for k in range(N)], (i, rows, agent.lines[-30:])
        assert all(r[1:4] == (pid, "usdt", name) for r in mine), (i, mine)
    # the weight type is read from the model file the container maps, through
    # its root (/m/tiny.gguf is not the host's)
    assert {r[4] for r in rows} == {podtest.weight_type(root)}, rows


def test_selector_values_refused():
    """--help documents --container and --pod; a malformed value stops the
    agent before it loads anything, saying what the flag takes."""
    at.require_agent_and_infer()
    d = kpitest.tmpdir("kpi-agent-sel-")
    helptext = kpitest.run([at.AGENT, "--help"], check=True).stdout
    assert "--container NAME|ID-PREFIX" in helptext and "--pod [NAMESPACE/]NAME" in helptext, helptext
    for flag, value, says in (("--pod", "Prod/vllm-0", "--pod wants [NAMESPACE/]NAME"),
                              ("--pod", "a/b/c", "--pod wants [NAMESPACE/]NAME"),
                              ("--container", "srv a", "--container wants a container's name"),
                              ("--container", "", "--container wants a container's name")):
        p = kpitest.run([at.AGENT, "--db", os.path.join(d, "t.db"), flag, value, "--duration", "1"],
                        timeout=30)
        out = p.stdout + p.stderr
        assert p.returncode == 2 and says in out and f"'{value}'" in out, (flag, value, p.returncode, out)
        assert not os.path.exists(os.path.join(d, "t.db")), out


NGINX_CONF = """user root;
worker_processes 1;
pid /tmp/nginx.pid;
error_log /tmp/error.log;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path /tmp/body;
    proxy_temp_path /tmp/proxy;
    fastcgi_temp_path /tmp/fastcgi;
    uwsgi_temp_path /tmp/uwsgi;
    scgi_temp_path /tmp/scgi;
    server {{
        listen 0.0.0.0:{port};
        location / {{
            proxy_pass http://{model}:{model_port};
            proxy_http_version 1.1;
            proxy_buffering off;
            proxy_set_header X-Request-Id $http_x_request_id;
        }}
    }}
}}
"""


def _bridged(name, net, rootfs, argv):
    """A container on podman network net (a bridge: its own network namespace,
    a veth into the bridge), running argv from rootfs: (Proc, pid, its IP)."""
    proc = kpitest.Proc(["podman", "run", "--rm", "--runtime", "runc", *ULIMITS, "--network", net,
                         "--name", name, "--rootfs", rootfs, *argv])
    kpitest.on_cleanup(lambda: kpitest.run(["podman", "rm", "-f", "-t", "0", name]))
    fmt = "{{.State.Pid}} {{(index .NetworkSettings.Networks \"" + net + "\").IPAddress}}"
    deadline = time.monotonic() + 60
    while True:
        out = kpitest.run(["podman", "inspect", "--format", fmt, name]).stdout.split()
        if len(out) == 2 and out[0] != "0":
            return proc, int(out[0]), out[1]
        assert time.monotonic() < deadline and proc.p.poll() is None, proc.drain()
        time.sleep(0.1)


def test_gateway_and_model_containers_on_a_bridge():
    """A gateway container (nginx, its own libraries in its root) and a model
    container (kpi-infer) on a podman bridge network, each in a network
    namespace of its own, the call between them over the bridge's veths, not
    loopback: the agent on the host (--port for both) makes one linked trace
    of each client request (nginx's request, its call by the x-request-id it
    passes on, kpi-infer's request by the call's socket), its model hop
    kpi-infer's."""
    _require_tools()
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.access(nginx, os.X_OK):
        raise kpitest.Skip("nginx is not installed (make deps installs it)")
    d = kpitest.tmpdir("kpi-agent-bridge-")
    tag = secrets.token_hex(3)
    net = f"kpibr-{tag}"
    kpitest.run(["podman", "network", "create", net], check=True)
    kpitest.on_cleanup(lambda: kpitest.run(["podman", "network", "rm", "-f", net]))
    model_root = build_rootfs(d)
    gw_root = os.path.join(d, "gw-rootfs")
    rootfs_with(gw_root, nginx, "/usr/sbin/nginx")
    with open(os.path.join(gw_root, "etc", "group"), "w") as f:
        f.write("root:x:0:\n")     # nginx's `user root;` looks its group up
    db = os.path.join(d, "bridge.db")
    gport = 8080
    agent = at.start_agent(db, "--port", PORT, "--port", gport, "--flush-ms", 100)
    agent.wait_line("waiting for a process to listen", timeout=30)
    model, mpid, mip = _bridged(f"kpb-{tag}-model", net, model_root, [*SERVE, "--host", "0.0.0.0"])
    model.wait_line("listening on", timeout=60)
    with open(os.path.join(gw_root, "nginx.conf"), "w") as f:
        f.write(NGINX_CONF.format(port=gport, model=mip, model_port=PORT))
    gw, _, gip = _bridged(f"kpb-{tag}-gw", net, gw_root,
                             ["/usr/sbin/nginx", "-c", "/nginx.conf", "-g", "daemon off;"])
    agent.wait_line(f"attached to pid {mpid} ", timeout=60)
    # nginx's master and its worker (a fork: found at the next rescan)
    deadline = time.monotonic() + 30
    while sum("/root/usr/sbin/nginx)" in l and "attached to pid" in l for l in agent.drain()) < 2:
        assert time.monotonic() < deadline, (agent.lines[-20:], gw.drain(), gw.p.poll())
        time.sleep(0.1)
    with urllib.request.urlopen(f"http://{gip}:{gport}/v1/models", timeout=30) as r:
        name = json.loads(r.read())["data"][0]["id"]
    got = {}
    for i in range(8):
        rid = f"br-{tag}-{i}"
        req = urllib.request.Request(f"http://{gip}:{gport}/v1/completions", method="POST",
                                     headers={"Content-Type": "application/json", "X-Request-Id": rid},
                                     data=json.dumps({"model": name, "prompt": "hello", "max_tokens": 4,
                                                      "stream": i % 2 == 0}).encode())
        with urllib.request.urlopen(req, timeout=60) as r:
            got[rid] = (r.status, r.read())
    time.sleep(0.5)
    assert agent.stop() == 0, agent.lines[-20:]
    assert all(st == 200 for st, _ in got.values()), got
    traces = at.traces(db)
    problems, rules = [], {}
    for rid in got:
        wrong = at.gateway_trace_problem(rid, traces.get(rid), rules)
        if wrong:
            problems.append(wrong)
            continue
        row, hs = traces[rid]
        if {(h["depth"], h["comm"], h["pid"] == mpid) for h in hs} != \
                {(0, "nginx", False), (1, "nginx", False), (2, "kpi-infer", True)} or \
                not 0 < row["integration_overhead_ns"] < row["e2e_ns"]:
            problems.append(f"{rid}: model hop {row['model_comm']} {row['model_request_id']}, hops "
                            f"{sorted((h['depth'], h['comm'], h['pid']) for h in hs)}, overhead "
                            f"{row['integration_overhead_ns']}")
    # the model's requests came from the gateway's address on the bridge (not
    # loopback: a remote address is stored hashed, docs/security.md)
    peers = sorted({h["peer"].rsplit(":", 1)[0] for _, hs in traces.values() for h in hs
                    if h["direction"] == "in" and h["depth"] == 2 and h["peer"]})
    print(f"     gateway {gip} -> model {mip} over {net}: {len(got) - len(problems)} of {len(got)} requests "
          f"in one trace of three hops; link rules {rules}; the model's peers {peers}")
    assert not problems, (problems[:5], agent.lines[-15:])
    assert len(peers) == 1 and not peers[0].startswith("127."), peers
