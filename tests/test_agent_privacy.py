"""What kpi-agent keeps (issue 29), for real: root, real BPF, real servers.  A
privacy canary: distinctive strings in a prompt, a completion, an Authorization
header, a cookie and a query string go through kpi-infer (its USDT probes), a
Python server and nginx terminating TLS in front of it (both read from their
sockets and libssl, nginx's own calls upstream included); none of them may be
found in the trace (with its -wal and -shm), the agent's output, /metrics or
the OTLP bodies a collector received, while the rows, the outbound exchanges
and their paths are all there.  Then a client in a network namespace of its
own (a veth pair: a peer that is not this host): its rows hold a keyed hash of
its address, the same for its two connections, another under another trace's
key, and its address only with --store-peer-addrs; the host's own ends are
kept in full."""
import http.client, json, os, sqlite3, ssl, stat, subprocess, sys, time, urllib.request

import kpitest
import agenttest as at
import fleettest
import nginxtest
import servertest

SERVER = os.path.join(kpitest.ROOT, "tests", "lib", "sse_server.py")
TAG = f"{os.getpid()}x{int(time.time()) % 100000}"
CANARIES = {
    "prompt": f"PromptCanary{TAG}",
    "completion": f"CompletionCanary{TAG}",
    "authorization": f"AuthCanary{TAG}",
    "cookie": f"CookieCanary{TAG}",
    "query": f"QueryCanary{TAG}",
}


def _tmp():
    return kpitest.tmpdir("kpi-agent-privacy-")


def _headers(rid):
    return {"Content-Type": "application/json", "x-request-id": rid,
            "Authorization": f"Bearer {CANARIES['authorization']}",
            "Cookie": f"session={CANARIES['cookie']}; theme=dark",
            "x-test-text": f" {CANARIES['completion']}"}


def _path(base):
    return f"{base}?api_key={CANARIES['query']}&v=1"


def _chat(stream):
    return {"model": "canary-model", "stream": stream, "max_tokens": 4,
            "messages": [{"role": "user", "content": f"say {CANARIES['prompt']} please"}]}


def _send(conn, rid, base, body):
    conn.request("POST", _path(base), body=json.dumps(body), headers=_headers(rid))
    r = conn.getresponse()
    return r.status, r.read()


def _found(blob, where):
    """(canary name, where) for every canary in blob (bytes)."""
    return [(name, where) for name, c in CANARIES.items() if c.encode() in blob]


def _files(db):
    """The trace's bytes: the file, its -wal and -shm (those that exist)."""
    out = {}
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            with open(db + suffix, "rb") as f:
                out[os.path.basename(db + suffix)] = f.read()
    return out


def test_privacy_canaries_stay_out_of_every_output():
    kpitest.require_root("kpi-agent")
    at.require_built(at.AGENT)
    servertest.require_binary()
    d = _tmp()
    db = os.path.join(d, "privacy.db")
    daemon = servertest.Daemon()
    sport, nport, mport = kpitest.free_port(), kpitest.free_port(), kpitest.free_port()
    srv = kpitest.Proc([sys.executable, SERVER, str(sport)])
    srv.wait_line("listening on")
    crt, key = nginxtest.cert(d)
    ng = nginxtest.start(d, nport, sport, cert=(crt, key), propagate_id=True)
    rx = fleettest.Receiver()
    agent = kpitest.Proc([at.AGENT, "-v", "--db", db, "--flush-ms", "100", "--token-detail",
                          "--pid", str(daemon.p.pid), "--port", str(sport), "--port", str(nport),
                          "--metrics", f"127.0.0.1:{mport}", "--otlp", f"http://127.0.0.1:{rx.port}"],
                         env={"OTEL_BSP_SCHEDULE_DELAY": "200"})
    agent.wait_line(f"attached to pid {daemon.p.pid}", timeout=60)
    agent.wait_line(f"attached to pid {srv.pid}", timeout=60)
    agent.wait_line("TLS: ", timeout=60)

    rids, answers = [], b""
    c = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=60)
    for k, (base, body) in enumerate((
            ("/v1/completions", {"prompt": f"tell {CANARIES['prompt']}", "max_tokens": 4}),
            ("/v1/completions", {"prompt": f"tell {CANARIES['prompt']}", "max_tokens": 4, "stream": True}),
            ("/v1/chat/completions", _chat(True)))):
        rids.append(f"priv-infer-{k}")
        st, data = _send(c, rids[-1], base, body)
        assert st == 200, (st, data[:200])
    c.close()
    c = http.client.HTTPConnection("127.0.0.1", sport, timeout=60)
    for k, base in enumerate(("/v1/chat/completions", "/v1/completions")):
        rids.append(f"priv-py-{k}")
        st, data = _send(c, rids[-1], base, _chat(True) if k == 0 else
                         {"prompt": CANARIES["prompt"], "max_tokens": 3, "stream": True})
        assert st == 200, st
        answers += data
    c.close()
    c = http.client.HTTPSConnection("127.0.0.1", nport, timeout=60, context=nginxtest.client_ctx())
    for k in range(3):
        rids.append(f"priv-tls-{k}")
        st, data = _send(c, rids[-1], "/v1/chat/completions", _chat(k != 1))
        assert st == 200, st
        answers += data
    c.close()
    # the servers did get and send every canary: the completion came back
    assert CANARIES["completion"].encode() in answers, answers[:300]

    # every row in the trace and every span at the collector, then the
    # outputs are read while the agent still runs (its -wal and -shm exist)
    def rows_in():
        try:
            got = {r["request_id"] for r in at.query(db, "SELECT request_id FROM requests")}
        except sqlite3.Error:
            return False
        return set(rids) <= got
    servertest.wait_for(rows_in, timeout=30, what="every request's row")
    rx.wait_spans(lambda sps: {fleettest.attrs(sp["attributes"]).get("kpi.request_id")
                               for _, _, sp in sps} >= set(rids))
    with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5) as r:
        metrics = r.read()
    live = _files(db)
    assert agent.stop() == 0, agent.lines[-20:]
    srv.stop()
    ng.stop()

    out = _files(db)
    leaks = [f for name, blob in {**{f"{k} (agent running)": v for k, v in live.items()},
                                  **out}.items() for f in _found(blob, name)]
    leaks += _found("\n".join(agent.lines).encode(), "the agent's stdout and stderr")
    leaks += _found(metrics, "/metrics")
    leaks += _found(json.dumps(rx.bodies).encode(), "OTLP bodies")
    assert not leaks, leaks
    # not vacuous: the rows, nginx's calls upstream and their paths are there
    rows = at.rows(db)
    for rid in rids:
        assert rid in rows, rid
    assert rows["priv-py-0"]["path"] == "/v1/chat/completions", rows["priv-py-0"]["path"]
    outs = at.query(db, "SELECT path, request_id FROM exchanges_out WHERE pid IN "
                        "(SELECT pid FROM requests WHERE request_id LIKE 'priv-tls-%')")
    assert len(outs) >= 3 and all(o["path"] == "/v1/chat/completions" for o in outs), outs
    print(f"     {len(rids)} requests, {len(outs)} of nginx's calls upstream; 5 canaries searched in "
          f"{len(live) + len(out)} trace files, {len(agent.lines)} lines of agent output, "
          f"{len(metrics)} bytes of /metrics, {len(rx.bodies)} OTLP bodies: none found")


class _Netns:
    """A network namespace joined to this host by a veth pair: the host's end
    10.229.N.1, the namespace's 10.229.N.2 (a peer that is not this host)."""

    def __init__(self):
        n = os.getpid() % 250 + 1
        self.name, self.veth = f"kpipriv{os.getpid()}", f"kpv{os.getpid() % 100000}"
        self.host, self.peer = f"10.229.{n}.1", f"10.229.{n}.2"
        ip = ["ip"]
        for argv in (["netns", "add", self.name],
                     ["link", "add", self.veth, "type", "veth", "peer", "name", self.veth + "p"],
                     ["link", "set", self.veth + "p", "netns", self.name],
                     ["addr", "add", f"{self.host}/24", "dev", self.veth],
                     ["link", "set", self.veth, "up"],
                     ["netns", "exec", self.name, "ip", "addr", "add", f"{self.peer}/24", "dev", self.veth + "p"],
                     ["netns", "exec", self.name, "ip", "link", "set", self.veth + "p", "up"]):
            r = subprocess.run(ip + argv, capture_output=True, text=True)
            if r.returncode:
                self.close()
                raise kpitest.Skip(f"network namespaces: ip {' '.join(argv)}: {r.stderr.strip()}")
        kpitest.on_cleanup(self.close)

    def close(self):
        subprocess.run(["ip", "link", "del", self.veth], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


CLIENT = """import http.client, json, sys
for rid in sys.argv[3:]:
    c = http.client.HTTPConnection(sys.argv[1], int(sys.argv[2]), timeout=30)
    c.request("POST", "/v1/chat/completions", body=json.dumps({"model": "m", "max_tokens": 2,
              "stream": True, "messages": [{"role": "user", "content": "hi"}]}),
              headers={"Content-Type": "application/json", "x-request-id": rid})
    r = c.getresponse(); r.read(); c.close()
    print(rid, r.status)
"""


def test_remote_peer_rows_hold_no_address():
    kpitest.require_root("kpi-agent")
    at.require_built(at.AGENT)
    ns = _Netns()
    d = _tmp()
    port = kpitest.free_port()
    srv = kpitest.Proc([sys.executable, SERVER, str(port), "--host", "0.0.0.0"])
    srv.wait_line("listening on")
    dbs = {k: os.path.join(d, f"{k}.db") for k in ("a", "b", "addrs")}
    agents = {k: at.start_agent(db, "--flush-ms", 100, "--port", port,
                                *(["--store-peer-addrs"] if k == "addrs" else []))
              for k, db in dbs.items()}
    for a in agents.values():
        a.wait_line(f"attached to pid {srv.pid}", timeout=60)
    r = subprocess.run(["ip", "netns", "exec", ns.name, sys.executable, "-c", CLIENT, ns.host, str(port),
                        "remote-0", "remote-1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    st, _, _ = kpitest.http_request(port, "POST", "/v1/chat/completions",
                                    body={"model": "m", "max_tokens": 2, "stream": True,
                                          "messages": [{"role": "user", "content": "hi"}]},
                                    headers={"x-request-id": "local-0"})
    assert st == 200
    time.sleep(0.3)
    live = {k: _files(db) for k, db in dbs.items()}
    for a in agents.values():
        assert a.stop() == 0, a.lines[-20:]
    srv.stop()
    rows = {k: at.rows(db) for k, db in dbs.items()}
    for k in dbs:
        assert {"remote-0", "remote-1", "local-0"} <= set(rows[k]), (k, sorted(rows[k]))

    def peer(k, rid):
        return rows[k][rid]["sock_peer"]
    # the host's own ends, full; a loopback peer is this host too
    for k in dbs:
        assert rows[k]["remote-0"]["sock_local"] == f"{ns.host}:{port}", rows[k]["remote-0"]["sock_local"]
        assert peer(k, "local-0").startswith("127.0.0.1:"), peer(k, "local-0")
    # a remote peer: a keyed hash, the same for both its connections (the
    # port after it is the connection's), another under another trace's key
    for k in ("a", "b"):
        h0, h1 = (peer(k, rid) for rid in ("remote-0", "remote-1"))
        assert h0.startswith("~") and h1.startswith("~"), (h0, h1)
        assert h0.rsplit(":", 1)[0] == h1.rsplit(":", 1)[0] and h0 != h1, (h0, h1)
        for name, blob in {**live[k], **_files(dbs[k])}.items():
            assert ns.peer.encode() not in blob, f"{ns.peer} found in {name}"
        key = dbs[k] + ".peerkey"
        st_ = os.stat(key)
        assert st_.st_uid == 0 and stat.S_IMODE(st_.st_mode) == 0o400, (key, oct(st_.st_mode), st_.st_uid)
    assert peer("a", "remote-0").rsplit(":", 1)[0] != peer("b", "remote-0").rsplit(":", 1)[0]
    # asked for: the address itself
    assert peer("addrs", "remote-0").startswith(f"{ns.peer}:"), peer("addrs", "remote-0")
    print(f"     remote peer {ns.peer}: stored as {peer('a', 'remote-0')} and {peer('a', 'remote-1')} "
          f"(trace a), {peer('b', 'remote-0')} (trace b), {peer('addrs', 'remote-0')} with "
          f"--store-peer-addrs; the host's end {rows['a']['remote-0']['sock_local']}")
