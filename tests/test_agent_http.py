"""kpi-agent's HTTP path (issue 20), for real: root, real BPF, real servers the
project did not instrument.  A Python stdlib server streams chat completions
(one write per event, packed, split), answers 404/429/500, loses a client
mid-stream and serves three requests on one keep-alive connection; the agent
traces it with --port and every row is checked against a tcpdump capture of
the same traffic.  Then kpi-infer is traced by two agents at once, one through
its USDT probes and one with --http-only, and their rows are compared."""
import csv, http.client, json, os, shutil, socket, sys, threading, time

import kpitest
import agenttest as at
import pcaptest

SERVER = os.path.join(kpitest.ROOT, "tests", "lib", "sse_server.py")
SERVER_JS = os.path.join(kpitest.ROOT, "tests", "lib", "sse_server.js")
WIRE_P99_US = 200       # the bound: |agent - wire| p99 on loopback
BOTH_TTFT_P99_US = 50   # kpi-infer, USDT vs HTTP path


def _tmp():
    return kpitest.tmpdir("kpi-agent-http-")


def _post(conn, path, rid, body, headers=None):
    data = json.dumps(body)
    h = {"Content-Type": "application/json", "x-request-id": rid, **(headers or {})}
    conn.request("POST", path, body=data, headers=h)
    r = conn.getresponse()
    r.read()
    return r.status


def _stream(port, rid, mode, n):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        return _post(c, "/v1/chat/completions", rid,
                     {"model": "test-model", "stream": True, "max_tokens": n,
                      "messages": [{"role": "user", "content": "hi"}]}, {"x-test-mode": mode})
    finally:
        c.close()


def _disconnect(port, rid):
    """Reads the head and a few events of a long stream, then goes away."""
    s = socket.create_connection(("127.0.0.1", port))
    body = json.dumps({"model": "test-model", "stream": True, "max_tokens": 200}).encode()
    s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-request-id: {rid}\r\n"
              f"x-test-gap-ms: 5\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    got = b""
    while got.count(b"tok") < 3:
        got += s.recv(65536)
    s.close()
    time.sleep(0.3)     # the server's next writes fail: EPIPE / ECONNRESET


def _load(port):
    """Returns {request id: expected status} of everything sent."""
    want, lock = {}, threading.Lock()

    def worker(w):
        for i in range(6):
            for mode in ("event", "packed", "split"):
                rid = f"h-{mode}-{w}-{i}"
                st = _stream(port, rid, mode, 4 + (i * 3 + w) % 13)
                with lock:
                    want[rid] = st
    ts = [threading.Thread(target=worker, args=(w,)) for w in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for code in (404, 429, 500):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        want[f"h-status-{code}"] = _post(c, f"/status/{code}", f"h-status-{code}", {"model": "x"})
        c.close()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for k in range(3):
        rid = f"h-keepalive-{k}"
        want[rid] = _post(c, "/v1/chat/completions", rid,
                          {"model": "test-model", "stream": True, "max_tokens": 5})
    c.close()
    _disconnect(port, "h-disconnect")
    want["h-disconnect"] = 200
    return want


def _compare_wire(rows, wire, off):
    """Per request id: the agent's marks minus the wire's, in ns."""
    arrive, first, done = [], [], []
    for rid, x in wire.items():
        r = rows.get(rid)
        if r is None:
            continue
        arrive.append((r["t_arrive_ns"] + off - x["t_first_byte"], rid))
        if x["t_first_content"] is not None and r["t_first_write_ns"] is not None:
            first.append((r["t_first_write_ns"] + off - x["t_first_content"], rid))
        if rid != "h-disconnect":
            done.append((r["t_done_ns"] + off - x["t_last_byte"], rid))
    for name, v in (("t_arrive", arrive), ("t_first_content", first), ("t_done", done)):
        worst = sorted(v, key=lambda p: -abs(p[0]))[:3]
        print(f"     worst {name}: " + ", ".join(f"{rid} {d / 1e3:+.1f} µs" for d, rid in worst))
    return {"t_arrive": at.abs_stats_us([d for d, _ in arrive]),
            "t_first_content": at.abs_stats_us([d for d, _ in first]),
            "t_done": at.abs_stats_us([d for d, _ in done])}


def _mono_to_wall(db):
    import sqlite3
    c = sqlite3.connect(db)
    try:
        return c.execute("SELECT mono_to_wall_ns FROM agent_runs").fetchone()[0]
    finally:
        c.close()


def _against_the_wire(argv_of_port):
    """A server (argv_of_port(port) runs it) traced by --port, its every row
    checked against a tcpdump capture of the same load."""
    kpitest.require_root("kpi-agent")
    pcaptest.require()
    at.require_built(at.AGENT)
    d = _tmp()
    db = os.path.join(d, "http.db")
    port = kpitest.free_port()
    srv = kpitest.Proc(argv_of_port(port))
    srv.wait_line("listening on")
    agent = at.start_agent(db, "--flush-ms", 100, "--token-detail", "--port", port)
    line = agent.wait_line(f"attached to pid {srv.pid}", timeout=60)
    assert "HTTP mode" in line, line
    cap = pcaptest.Capture([port])
    want = _load(port)
    pcap = cap.stop()
    time.sleep(0.3)
    assert agent.stop() == 0, agent.lines[-20:]
    rows = at.rows(db)
    wire = pcaptest.exchanges_by_id(pcap, port)

    missing = [rid for rid in want if rid not in rows]
    assert not missing, f"no row for {missing}; agent said:\n" + "\n".join(agent.lines[-20:])
    for rid, st in want.items():
        r = rows[rid]
        assert r["source"] == "http", r
        assert r["http_status"] == st, (rid, r["http_status"], st)
        phases = [r[k] for k in ("net_in_ns", "server_wait_ns", "decode_ns", "net_out_ns")]
        assert all(p is None or p >= 0 for p in phases), (rid, phases)
        assert sum(p for p in phases if p is not None) == r["e2e_ns"], (rid, phases, r["e2e_ns"])
        assert r["queue_ns"] is None and r["prefill_ns"] is None, r
        if rid in wire and rid != "h-disconnect":
            assert r["content_events"] == wire[rid]["content_events"], \
                (rid, r["content_events"], wire[rid]["content_events"])
    for code in (404, 429, 500):
        r = rows[f"h-status-{code}"]
        assert r["decode_ns"] is None and r["ttft_ns"] is not None and r["content_events"] == 0, r
    dis = rows["h-disconnect"]
    assert dis["end_reason"] == "client_closed", dis
    for k in range(3):
        r = rows[f"h-keepalive-{k}"]
        assert r["end_reason"] == "complete" and r["content_events"] == 5, r
    streamed = [r for rid, r in rows.items() if rid.startswith("h-") and r["stream"] == 1
                and r["end_reason"] == "complete"]
    assert all(r["output_tokens"] == r["content_events"] and r["finish_reason"] == "length"
               and r["model"] == "test-model" and r["path"] == "/v1/chat/completions"
               for r in streamed), streamed[:2]
    m = _compare_wire(rows, wire, _mono_to_wall(db))
    print(f"     agent - wire, µs (|diff|): {m}")
    for k, v in m.items():
        assert v["n"] > 0 and v["p99"] <= WIRE_P99_US, (k, v)
    srv.stop()


def test_agent_http_python_server_against_the_wire():
    """Python stdlib ThreadingHTTPServer, wfile.write per event."""
    _against_the_wire(lambda port: [sys.executable, SERVER, str(port)])


def test_agent_http_node_server_against_the_wire():
    """Node http.createServer, res.write per event (chunked by Node)."""
    node = shutil.which("node") or shutil.which("nodejs")
    if not node:
        raise kpitest.Skip("node is not installed (make deps installs it)")
    _against_the_wire(lambda port: [node, SERVER_JS, str(port)])


def test_agent_http_kpi_infer_usdt_and_http_agree():
    """kpi-infer traced at once by an agent through its USDT probes and by one
    with --http-only: TTFT, e2e, status and event counts per request id."""
    kpitest.require_root("kpi-agent")
    at.require_built(at.INFER)
    import servertest
    d = _tmp()
    daemon = servertest.Daemon("--max-seqs", 4, "--max-queue", 4)
    usdt_db, http_db = os.path.join(d, "usdt.db"), os.path.join(d, "http.db")
    a_usdt = at.start_agent(usdt_db, "--flush-ms", 200, pid=daemon.p.pid)
    a_http = at.start_agent(http_db, "--flush-ms", 200, "--http-only", pid=daemon.p.pid)
    assert "HTTP mode (--http-only)" in a_http.wait_line(f"attached to pid {daemon.p.pid}")
    cap = pcaptest.Capture([daemon.port]) if os.geteuid() == 0 and pcaptest.shutil.which("tcpdump") else None
    results = at.run_load(daemon.port, 120, threads=4, max_tokens=(1, 16), prefix="both")
    wire = pcaptest.exchanges_by_id(cap.stop(), daemon.port) if cap else {}
    time.sleep(0.3)
    assert a_usdt.stop() == 0, a_usdt.lines[-20:]
    assert a_http.stop() == 0, a_http.lines[-20:]
    u, h = at.rows(usdt_db), at.rows(http_db)
    ttft, e2e, problems, empty_first = [], [], [], 0
    for res in results:
        if res.status is None:
            continue
        ru, rh = u.get(res.rid), h.get(res.rid)
        if ru is None or rh is None:
            problems.append(f"{res.rid}: usdt row {ru is not None}, http row {rh is not None}")
            continue
        if rh["source"] != "http" or ru["source"] != "usdt":
            problems.append(f"{res.rid}: sources {ru['source']}, {rh['source']}")
        if ru["http_status"] != rh["http_status"]:
            problems.append(f"{res.rid}: status {ru['http_status']} vs {rh['http_status']}")
        # the tiny random model emits tokens whose text is empty (a UTF-8
        # sequence cut between tokens): "text":"" is no content on the wire,
        # so events are counted against the capture, not the token count
        x = wire.get(res.rid)
        if x and res.stream and res.status == 200 and rh["content_events"] != x["content_events"]:
            problems.append(f"{res.rid}: {rh['content_events']} content events, "
                            f"{x['content_events']} on the wire")
        if x and res.stream and x["t_first_content"] != x["t_response_first_byte"]:
            empty_first += 1    # the USDT path's first token write is not the first content
        elif ru["ttft_ns"] is not None and rh["ttft_ns"] is not None:
            ttft.append(rh["ttft_ns"] - ru["ttft_ns"])
        e2e.append(rh["e2e_ns"] - ru["e2e_ns"])
    m = {"ttft": at.abs_stats_us(ttft), "e2e": at.abs_stats_us(e2e)}
    print(f"     http - usdt, µs (|diff|), {len(e2e)} requests: {m}; {empty_first} streams "
          f"whose first token had no text (TTFT not comparable), {len(wire)} on the wire")
    assert not problems, problems[:10]
    assert len(e2e) >= 0.9 * len([r for r in results if r.status is not None])
    assert m["ttft"]["p99"] <= BOTH_TTFT_P99_US, m
    daemon.stop()


NGINX_CONF = """worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    upstream infer {{ server 127.0.0.1:{upstream}; keepalive 8; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://infer;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"""


def test_agent_http_nginx_in_front_of_kpi_infer():
    """nginx (Debian's) as a reverse proxy in front of kpi-infer, traced on its
    own port: its master and worker are found by --port, only the connections
    accepted on that port make request rows (its upstream ones are outbound
    exchanges, schema/008_hops.sql), and every row is checked against the
    capture of the client's side."""
    kpitest.require_root("kpi-agent")
    pcaptest.require()
    at.require_built(at.INFER)
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
    if not nginx:
        raise kpitest.Skip("nginx is not installed (make deps installs it)")
    import servertest
    d = _tmp()
    daemon = servertest.Daemon("--max-seqs", 4, "--max-queue", 4)
    port = kpitest.free_port()
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_CONF.format(d=d, upstream=daemon.port, port=port))
    ng = kpitest.Proc([nginx, "-c", conf, "-g", "daemon off;"])
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline and ng.p.poll() is None, ng.drain()
            time.sleep(0.05)
    db = os.path.join(d, "nginx.db")
    agent = at.start_agent(db, "--flush-ms", 100, "--port", port)
    agent.wait_line("HTTP mode", timeout=60)
    time.sleep(0.6)     # the worker as well as the master (next rescan at the latest)
    cap = pcaptest.Capture([port])
    results = at.run_load(port, 60, threads=3, max_tokens=(1, 16), prefix="ngx")
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    st404 = _post(c, "/v1/nope", "ngx-404", {"model": "x"})
    c.close()
    pcap = cap.stop()
    time.sleep(0.3)
    assert agent.stop() == 0, agent.lines[-20:]
    ng.stop()
    rows = at.rows(db)
    wire = pcaptest.exchanges_by_id(pcap, port)
    assert st404 == 404 and rows.get("ngx-404", {}).get("http_status") == 404, \
        (rows.get("ngx-404"), len(rows), list(rows)[:5], agent.lines[-15:])
    problems = []
    for res in results:
        r, x = rows.get(res.rid), wire.get(res.rid)
        if r is None or x is None:
            problems.append(f"{res.rid}: row {r is not None}, on the wire {x is not None}")
            continue
        if r["http_status"] != x["status"] or r["content_events"] != x["content_events"]:
            problems.append(f"{res.rid}: status {r['http_status']}/{x['status']}, events "
                            f"{r['content_events']}/{x['content_events']}")
    assert not problems, problems[:10]
    assert all(not rid.startswith("http-") for rid in rows), "rows from nginx's upstream side"
    m = _compare_wire(rows, wire, _mono_to_wall(db))
    print(f"     nginx: agent - wire, µs (|diff|): {m}")
    for k, v in m.items():
        assert v["n"] > 0 and v["p99"] <= WIRE_P99_US, (k, v)
    daemon.stop()


def test_agent_http_port_follows_a_restart():
    """--port: a server restarted on the same port is detached and its
    successor attached from its listen(), so that a request sent the moment
    it listens lands."""
    kpitest.require_root("kpi-agent")
    at.require_built(at.AGENT)
    d = _tmp()
    db = os.path.join(d, "restart.db")
    port = kpitest.free_port()
    first = kpitest.Proc([sys.executable, SERVER, str(port)])
    first.wait_line("listening on")
    agent = at.start_agent(db, "--flush-ms", 100, "--port", port)
    agent.wait_line(f"attached to pid {first.pid}", timeout=60)
    first.stop()
    agent.wait_line(f"detached from pid {first.pid}", timeout=10)
    second = kpitest.Proc([sys.executable, SERVER, str(port)])
    second.wait_line("listening on")
    # at once: the successor became a target at its listen(), held until the
    # agent had chosen its path, so its first request is seen
    assert _stream(port, "after-restart", "event", 4) == 200
    assert "HTTP mode" in agent.wait_line(f"attached to pid {second.pid}", timeout=10)
    time.sleep(0.3)
    assert agent.stop() == 0, agent.lines[-20:]
    r = at.rows(db).get("after-restart")
    assert r and r["pid"] == second.pid and r["content_events"] == 4, r
    second.stop()


def test_agent_http_kpi_bench_matches_the_trace():
    """kpi-bench --url drives the Python server (chat and completions) traced
    with --port: every request of its CSV has its row, joined on the
    x-request-id the server answered with; the statuses are equal and the
    client's TTFT is the server's plus the loopback and the client's own
    parsing: never less, and within 1 ms."""
    kpitest.require_root("kpi-agent")
    at.require_built(at.AGENT)
    bench = os.path.join(kpitest.BUILD, "kpi-bench")
    at.require_built(bench)
    d = _tmp()
    db = os.path.join(d, "bench.db")
    port = kpitest.free_port()
    srv = kpitest.Proc([sys.executable, SERVER, str(port), "--role-with-content"])
    srv.wait_line("listening on")
    agent = at.start_agent(db, "--flush-ms", 100, "--port", port)
    assert "HTTP mode" in agent.wait_line(f"attached to pid {srv.pid}", timeout=60)
    csvs = {}
    for ep in ("chat", "completions"):
        csvs[ep] = os.path.join(d, f"{ep}.csv")
        p = kpitest.run([bench, "--url", f"http://127.0.0.1:{port}", "--endpoint", ep, "--requests", "40",
                         "--concurrency", "4", "--prompt-len", "16", "--max-tokens", "12", "--quiet",
                         "--csv", csvs[ep]], timeout=120)
        assert p.returncode == 0, f"kpi-bench --endpoint {ep} exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
    time.sleep(0.3)
    assert agent.stop() == 0, agent.lines[-20:]
    srv.stop()
    rows = at.rows(db)
    diffs = []
    for ep, path in csvs.items():
        with open(path) as f:
            bench_rows = list(csv.DictReader(f))
        assert len(bench_rows) == 40, (ep, len(bench_rows))
        want_path = "/v1/chat/completions" if ep == "chat" else "/v1/completions"
        for b in bench_rows:
            rid = b["request_id"]
            assert rid.startswith("srv-"), (ep, b)
            r = rows.get(rid)
            assert r, f"{ep}: no row for {rid}; agent said:\n" + "\n".join(agent.lines[-20:])
            assert r["source"] == "http" and r["path"] == want_path, (rid, r["source"], r["path"])
            assert int(b["status"]) == r["http_status"], (rid, b["status"], r["http_status"])
            assert r["content_events"] == int(b["completion_tokens"]) == 12, (rid, r["content_events"], b)
            client_ns, server_ns = float(b["ttft_ms"]) * 1e6, r["ttft_ns"]
            assert server_ns <= client_ns <= server_ns + 1e6, (ep, rid, client_ns, server_ns)
            diffs.append(client_ns - server_ns)
    diffs.sort()
    print(f"     client - server TTFT, µs: p50 {diffs[len(diffs) // 2] / 1e3:.0f}, max {diffs[-1] / 1e3:.0f}")
