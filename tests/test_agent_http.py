"""kpi-agent's HTTP path (issue 20), for real: root, real BPF, real servers the
project did not instrument.  A Python stdlib server streams chat completions
(one write per event, packed, split), answers 404/429/500, loses a client
mid-stream, serves three requests on one keep-alive connection and three
pipelined ones, and one named only by its traceparent; the agent
traces it with --port and every row is checked against a tcpdump capture of
the same traffic.  Then kpi-infer is traced by two agents at once, one through
its USDT probes and one with --http-only, and their rows are compared."""
import csv, http.client, json, os, shutil, socket, sys, threading, time

import kpitest
import noisetest
import promtext
import agenttest as at
import nginxtest
import pcaptest

SERVER = os.path.join(kpitest.ROOT, "tests", "lib", "sse_server.py")
SERVER_JS = os.path.join(kpitest.ROOT, "tests", "lib", "sse_server.js")
WIRE_P99_US = 200       # the bound: |agent - wire| p99 on loopback
BOTH_TTFT_P99_US = 50   # kpi-infer, USDT vs HTTP path


def _tmp():
    return kpitest.tmpdir("kpi-agent-http-")


def _node():
    """The node executable, or a Skip."""
    node = shutil.which("node") or shutil.which("nodejs")
    if not node:
        raise kpitest.Skip("node is not installed (make deps installs it)")
    return node


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


def _pipelined(port, rids):
    """Requests sent back to back in one write, before any answer (HTTP/1.1
    pipelining); the answers come in order on the same connection."""
    body = json.dumps({"model": "test-model", "stream": True, "max_tokens": 3}).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"".join(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-request-id: {rid}\r\n"
                       f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
                       for rid in rids))
    got = b""
    while got.count(b"[DONE]") < len(rids):
        chunk = s.recv(65536)
        assert chunk, got
        got += chunk
    s.close()
    return {rid: 200 for rid in rids}


TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def _traceparent(port):
    """A request that names itself only by a W3C traceparent: its row's id is
    the trace id."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", "/v1/chat/completions", body=json.dumps({"model": "test-model", "stream": True,
                                                              "max_tokens": 4}),
              headers={"Content-Type": "application/json",
                       "traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"})
    r = c.getresponse()
    r.read()
    c.close()
    return r.status


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
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/static", headers={"x-request-id": "h-static"})
    r = c.getresponse()
    want["h-static"] = r.status
    assert len(r.read()) > 1000
    c.close()
    want.update(_pipelined(port, [f"h-pipelined-{k}" for k in range(3)]))
    want[TRACE_ID] = _traceparent(port)
    _disconnect(port, "h-disconnect")
    want["h-disconnect"] = 200
    return want


def _compare_wire(rows, wire, db, label="agent - wire", stalls=None):
    """Per request id, the agent's marks minus the wire's: each mark's
    |difference| within WIRE_P99_US at p99 (printed with the worst three),
    but those a measured stall of the machine explains (stalls: the
    capture's noise probe; noisetest)."""
    off = at.mono_to_wall(db)
    marks = {"t_arrive": [], "t_first_content": [], "t_done": []}
    for rid, x in wire.items():
        r = rows.get(rid)
        if r is None:
            continue
        pairs = [("t_arrive", r["t_arrive_ns"], x["t_first_byte"])]
        if x["t_first_content"] is not None and r["t_first_write_ns"] is not None:
            pairs.append(("t_first_content", r["t_first_write_ns"], x["t_first_content"]))
        if not rid.endswith("-disconnect"):   # given up at the close, not a last byte
            pairs.append(("t_done", r["t_done_ns"], x["t_end"]))
        for name, mine, theirs in pairs:
            marks[name].append((mine + off - theirs, mine + off, theirs, rid))
    m = {}
    for name, v in marks.items():
        worst = sorted(v, key=lambda p: -abs(p[0]))[:3]
        print(f"     worst {name}: " + ", ".join(f"{rid} {d / 1e3:+.1f} µs" for d, _, _, rid in worst))
        kept = noisetest.judged(v, WIRE_P99_US * 1000, stalls or [], f"{label} {name}")
        m[name] = at.stats_us([d for d, _, _, _ in kept])
    print(f"     {label}, µs (|diff|): {m}")
    for k, v in m.items():
        assert v["n"] > 0 and v["p99"] <= WIRE_P99_US, (k, v)


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
    cap = pcaptest.Capture([port], noise=True)
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
        phases = [r[k] for k in ("net_in_ns", "queue_ns", "prefill_ns", "server_wait_ns",
                                 "decode_ns", "net_out_ns")]
        assert all(p is None or p >= 0 for p in phases), (rid, phases)
        assert sum(p for p in phases if p is not None) == r["e2e_ns"], (rid, phases, r["e2e_ns"])
        # queue and prefill are inferred (split_rule says by which rule) or
        # stay together in server_wait: never both, never one of them alone
        split = r["split_rule"] is not None
        assert (r["queue_ns"] is not None) == (r["prefill_ns"] is not None) == split, r
        assert not split or r["server_wait_ns"] is None, r
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
        r = rows[f"h-pipelined-{k}"]
        assert r["end_reason"] == "complete" and r["content_events"] == 3, r
    assert rows[TRACE_ID]["content_events"] == 4, rows[TRACE_ID]
    streamed = [r for rid, r in rows.items() if rid.startswith("h-") and r["stream"] == 1
                and r["end_reason"] == "complete"]
    assert all(r["output_tokens"] == r["content_events"] and r["finish_reason"] == "length"
               and r["model"] == "test-model" and r["path"] == "/v1/chat/completions"
               for r in streamed), streamed[:2]
    _compare_wire(rows, wire, db, stalls=cap.stalls)
    srv.stop()


def test_agent_http_python_server_against_the_wire():
    """Python stdlib ThreadingHTTPServer, wfile.write per event."""
    _against_the_wire(lambda port: [sys.executable, SERVER, str(port)])


def test_agent_http_node_server_against_the_wire():
    """Node http.createServer, res.write per event (chunked by Node)."""
    node = _node()
    _against_the_wire(lambda port: [node, SERVER_JS, str(port)])


def _one_request(port, rid, headers):
    """A streamed chat completion on a connection of its own, read to the
    server's FIN (Connection: close)."""
    body = json.dumps({"model": "test-model", "stream": True, "max_tokens": 6,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=30)     # a server fault fails, not hangs
    h = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-request-id: {rid}\r\n{h}"
              f"Connection: close\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
              .encode() + body)
    while s.recv(65536):
        pass
    s.close()


# The two ends the client sees after the last event: a body delimited by the
# close, whose server shuts the socket down 1 ms before closing it (Python's
# socketserver does both, the close later under load; Node's end() shuts it
# down and closes at the client's FIN), and a chunked stream whose
# zero-length chunk comes 1 ms after [DONE], in a write of its own.
ENDS = {"close": {"x-test-mode": "close", "x-test-close-pause-ms": "1", "x-test-gap-ms": "0"},
        "lastchunk": {"x-test-last-chunk-ms": "1", "x-test-gap-ms": "0"}}


def _ends_against_the_wire(argv_of_port):
    """Six clients at once, 25 requests of each kind apiece: every row's e2e
    within WIRE_P99_US at p99 of the capture's, whose end is the server's FIN
    for the close-delimited bodies and the last chunk's byte for the others."""
    kpitest.require_root("kpi-agent")
    pcaptest.require()
    at.require_built(at.AGENT)
    d = _tmp()
    db = os.path.join(d, "ends.db")
    port = kpitest.free_port()
    srv = kpitest.Proc(argv_of_port(port))
    srv.wait_line("listening on")
    agent = at.start_agent(db, "--flush-ms", 100, "--port", port)
    assert "HTTP mode" in agent.wait_line(f"attached to pid {srv.pid}", timeout=60)
    cap = pcaptest.Capture([port], noise=True)
    rids = [f"{kind}-{w}-{i}" for w in range(6) for i in range(25) for kind in ENDS]

    def worker(w):
        for rid in rids[w * 50:(w + 1) * 50]:
            _one_request(port, rid, ENDS[rid.split("-")[0]])
    ts = [threading.Thread(target=worker, args=(w,)) for w in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    pcap = cap.stop()
    time.sleep(0.3)
    assert agent.stop() == 0, agent.lines[-20:]
    rows, wire = at.rows(db), pcaptest.exchanges_by_id(pcap, port)
    off = at.mono_to_wall(db)
    missing = [rid for rid in rids if rid not in rows]
    assert not missing, f"no row for {missing[:10]}; agent said:\n" + "\n".join(agent.lines[-20:])
    for kind in ENDS:
        e2e, done = [], []
        for rid in (r for r in rids if r.startswith(kind + "-") and r in wire):
            r, x = rows[rid], wire[rid]
            assert r["end_reason"] == "complete", (rid, r["end_reason"])
            if kind == "close":
                assert x["t_fin"] and x["t_end"] == x["t_fin"] and "content-length" not in x["response_headers"], x
            else:
                assert x["response_headers"].get("transfer-encoding") == "chunked", x["response_headers"]
            e2e.append((r["e2e_ns"] - (x["t_end"] - x["t_first_byte"]), r["t_arrive_ns"] + off,
                        r["t_done_ns"] + off, rid))
            done.append(r["t_done_ns"] + off - x["t_end"])
        assert len(e2e) >= 0.9 * 150, f"{kind}: {len(e2e)} of 150 on the wire"
        kept = noisetest.judged(e2e, WIRE_P99_US * 1000, cap.stalls, f"{kind} e2e")
        m, dm = at.stats_us([d for d, _, _, _ in kept]), at.stats_us(done)
        print(f"     {kind}: e2e agent - wire, µs (|diff|): {m}; t_done - wire end: {dm}")
        assert m["p99"] <= WIRE_P99_US, (kind, m)


def test_agent_http_python_response_ends_where_the_client_saw_it():
    """Python: the FIN of a socket shut down before its close; a last chunk of its own."""
    _ends_against_the_wire(lambda port: [sys.executable, SERVER, str(port)])


def test_agent_http_node_response_ends_where_the_client_saw_it():
    """Node: the same two ends, from res.end()."""
    node = _node()
    _ends_against_the_wire(lambda port: [node, SERVER_JS, str(port)])


def test_agent_http_rows_reach_metrics_and_otlp():
    """A server seen only on the wire, exported: /metrics and OTLP carry its
    rows (kpi_source / kpi.source "http"), with the model its requests named;
    the streams, one at a time, have queue and prefill inferred (rule idle,
    the OTLP root says kpi.split_rule), the error answer has server_wait where
    they would be; the OTLP phase spans contiguous over each row's e2e."""
    kpitest.require_root("kpi-agent")
    at.require_built(at.AGENT)
    import urllib.request
    import fleettest as ft
    d = _tmp()
    db = os.path.join(d, "export.db")
    port, mport = kpitest.free_port(), kpitest.free_port()
    srv = kpitest.Proc([sys.executable, SERVER, str(port)])
    srv.wait_line("listening on")
    rx = ft.Receiver()
    agent = kpitest.Proc([at.AGENT, "--db", db, "--flush-ms", "100", "--port", str(port), "--metrics",
                          f"127.0.0.1:{mport}", "--otlp", f"http://127.0.0.1:{rx.port}"],
                         env={"OTEL_BSP_SCHEDULE_DELAY": "200"})
    agent.wait_line(f"attached to pid {srv.pid}", timeout=60)
    for k in range(12):
        _stream(port, f"x-{k}", "event", 3 + k % 5)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    _post(c, "/status/500", "x-500", {"model": "test-model"})
    c.close()
    # every row the trace gets, the exporters get: wait for the 13 spans
    rx.wait_spans(lambda sps: sum(1 for _, _, sp in sps if "parentSpanId" not in sp) >= 13)
    with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5) as r:
        text = r.read().decode()
    assert agent.stop() == 0, agent.lines[-20:]
    rows = {rid: r for rid, r in at.rows(db).items() if rid.startswith("x-")}
    assert len(rows) == 13, sorted(rows)
    m = promtext.by_labels(text)
    want = dict(kpi_source="http", gen_ai_request_model="test-model", pid=srv.pid)
    waits = [r["server_wait_ns"] for r in rows.values() if r["server_wait_ns"] is not None]
    decodes = [r for r in rows.values() if r["decode_ns"] is not None]
    split = [r for r in rows.values() if r["split_rule"] is not None]
    # the 500 has no content events; each stream ran alone: nothing else was in flight
    assert len(waits) == 1 and len(decodes) == 12 and len(split) == 12, rows
    assert all(r["split_rule"] == "idle" and r["queue_ns"] == 0 for r in split), split[:2]
    assert sum(ft.series(m, "kpi_request_server_wait_seconds_count", **want)) == len(waits), text
    assert sum(ft.series(m, "kpi_request_decode_seconds_count", **want)) == len(decodes), text
    assert sum(ft.series(m, "kpi_request_queue_seconds_count", **want)) == len(split), text
    assert sum(ft.series(m, "kpi_request_prefill_seconds_count", **want)) == len(split), text
    assert sum(ft.series(m, "gen_ai_server_request_duration_seconds_count", **want)) == 13, text
    got = sum(ft.series(m, "kpi_request_server_wait_seconds_sum", **want))
    assert abs(got - sum(waits) / 1e9) <= 1e-6 * len(waits), (got, sum(waits))
    spans = rx.spans()
    roots = {ft.attrs(sp["attributes"])["kpi.request_id"]: sp for _, _, sp in spans if "parentSpanId" not in sp}
    for rid, r in rows.items():
        sp = roots[rid]
        a = ft.attrs(sp["attributes"])
        assert a["kpi.source"] == "http" and "gen_ai.system" not in a and \
            a["gen_ai.request.model"] == "test-model", a
        kids = sorted((int(k["startTimeUnixNano"]), int(k["endTimeUnixNano"]), k["name"])
                      for _, _, k in spans if k.get("parentSpanId") == sp["spanId"])
        names = [n for _, _, n in kids]
        if r["split_rule"]:
            assert a["kpi.split_rule"] == r["split_rule"] and "server_wait" not in names and \
                names[:3] == ["net_in", "queue", "prefill"], (names, a)
        else:
            assert "kpi.split_rule" not in a and "queue" not in names and "prefill" not in names \
                and names[:2] == ["net_in", "server_wait"], (names, a)
        assert all(b[0] == a_[1] for a_, b in zip(kids, kids[1:])), kids
        assert kids[-1][1] - kids[0][0] == r["e2e_ns"] == int(sp["endTimeUnixNano"]) - int(sp["startTimeUnixNano"])
    srv.stop()


SILENT_SERVER = """import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(8)
print("listening on", sys.argv[1], flush=True)
held = []
while True:             # read each request, answer none
    c, _ = s.accept()
    c.recv(65536)
    held.append(c)
"""


def test_agent_http_timeout_ends_a_silent_exchange():
    """A server that reads a request and never answers, traced with
    --http-timeout 1s: the exchange ends as 'timeout', with no status, about
    a second after its last byte moved, while the connection is still open
    (the agent's expiry runs once a second)."""
    kpitest.require_root("kpi-agent")
    at.require_built(at.AGENT)
    d = _tmp()
    db = os.path.join(d, "silent.db")
    port = kpitest.free_port()
    srv = kpitest.Proc([sys.executable, "-c", SILENT_SERVER, str(port)])
    srv.wait_line("listening on")
    agent = at.start_agent(db, "--flush-ms", 100, "--port", port, "--http-timeout", "1s")
    agent.wait_line(f"attached to pid {srv.pid}", timeout=60)
    body = json.dumps({"model": "m", "stream": True, "max_tokens": 4}).encode()
    c = socket.create_connection(("127.0.0.1", port))
    c.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-request-id: t-silent\r\n"
              f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    deadline = time.monotonic() + 15
    while "t-silent" not in at.rows(db):        # the row, once the agent gives the exchange up
        assert time.monotonic() < deadline, agent.lines[-10:]
        time.sleep(0.1)
    r = at.rows(db)["t-silent"]
    c.close()
    assert agent.stop() == 0, agent.lines[-10:]
    assert r["end_reason"] == "timeout" and r["http_status"] is None and r["source"] == "http", r
    # it waited for the server until given up: that wait is the row's server_wait
    assert 1e9 < r["e2e_ns"] <= 3e9 and r["net_in_ns"] + r["server_wait_ns"] == r["e2e_ns"], r
    srv.stop()


def _late_reader(port, tag, n):
    """n streams of 48 tokens on one keep-alive connection, each read 30-50 ms
    after its request: the client's kernel ACKs what it holds only as it is
    read, so kpi-infer's later writes wait in TCP (a full window) and reach
    the wire after the write that made them, the last byte included."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    body = json.dumps({"prompt": "hello", "max_tokens": 48, "ignore_eos": True, "stream": True}).encode()
    for i in range(n):
        s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nx-request-id: {tag}-{i}\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        time.sleep(0.03 + 0.01 * (i % 3))     # the client is busy: nothing read, nothing ACKed
        got = b""
        while not got.endswith(b"0\r\n\r\n"):
            chunk = s.recv(65536)
            assert chunk, f"{tag}-{i}: the server closed mid-stream"
            got += chunk
        time.sleep(0.25)                       # idle past the RTO: a fresh window for the next
    s.close()


def test_agent_http_kpi_infer_usdt_and_http_agree():
    """kpi-infer traced at once by an agent through its USDT probes and by one
    with --http-only: TTFT, e2e, status and event counts per request id.  With
    the capture, the --http-only rows against the wire (WIRE_P99_US), late
    readers' streams included: their last bytes leave when TCP lets them go,
    after the write (the black-box end of issue 44)."""
    kpitest.require_root("kpi-agent")
    at.require_built(at.INFER)
    import servertest
    d = _tmp()
    daemon = servertest.Daemon("--max-seqs", 4, "--max-queue", 4)
    usdt_db, http_db = os.path.join(d, "usdt.db"), os.path.join(d, "http.db")
    a_usdt = at.start_agent(usdt_db, "--flush-ms", 200, pid=daemon.p.pid)
    a_http = at.start_agent(http_db, "--flush-ms", 200, "--http-only", pid=daemon.p.pid)
    assert "HTTP mode (--http-only)" in a_http.wait_line(f"attached to pid {daemon.p.pid}")
    cap = pcaptest.Capture([daemon.port], noise=True) if os.geteuid() == 0 and pcaptest.shutil.which("tcpdump") else None
    results = at.run_load(daemon.port, 120, threads=4, max_tokens=(1, 16), prefix="both")
    if cap:
        at.in_threads(range(3), lambda w: _late_reader(daemon.port, f"late-{w}", 4), threads=3)
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
    m = {"ttft": at.stats_us(ttft), "e2e": at.stats_us(e2e)}
    print(f"     http - usdt, µs (|diff|), {len(e2e)} requests: {m}; {empty_first} streams "
          f"whose first token had no text (TTFT not comparable), {len(wire)} on the wire")
    assert not problems, problems[:10]
    assert len(e2e) >= 0.9 * len([r for r in results if r.status is not None])
    assert m["ttft"]["p99"] <= BOTH_TTFT_P99_US, m
    if cap:
        late = [rid for rid in wire if rid.startswith("late-")]
        assert len(late) == 12 and all(rid in h for rid in late), (late, a_http.lines[-10:])
        _compare_wire(h, wire, http_db, "kpi-infer --http-only: agent - wire", stalls=cap.stalls)
    daemon.stop()


def _ngx_stream(port, rid, body):
    """One streamed request on its own connection through nginx: its status."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        return _post(c, "/v1/completions", rid, {"stream": True, **body})
    finally:
        c.close()


def _ngx_disconnect(port, rid, max_tokens):
    """A stream kpi-infer would go on with for a while, left after three events."""
    s = socket.create_connection(("127.0.0.1", port))
    body = json.dumps({"prompt": "x", "max_tokens": max_tokens, "ignore_eos": True, "stream": True}).encode()
    s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nx-request-id: {rid}\r\n"
              f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    got = b""
    while got.count(b"data:") < 3:
        chunk = s.recv(65536)
        assert chunk, got
        got += chunk
    s.close()


def _ngx_cases(port, ctx):
    """The status codes of a 404 (kpi-infer's), a 500 (nginx's own), a 429
    (kpi-infer's queue full, through nginx), three requests on one keep-alive
    connection and a client gone mid-stream: {request id: status sent back}."""
    want = {}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    want["ngx-404"] = _post(c, "/v1/nope", "ngx-404", {"model": "x"})
    want["ngx-500"] = _post(c, "/boom", "ngx-500", {"model": "x"})
    for k in range(3):
        want[f"ngx-keepalive-{k}"] = _post(c, "/v1/completions", f"ngx-keepalive-{k}",
                                           {"prompt": "hello", "max_tokens": 5, "ignore_eos": True, "stream": True,
                                            "stream_options": {"include_usage": True}})
    c.close()
    # 4 running and 4 queued at most: a burst of 16 long ones is partly refused
    burst, go = {}, threading.Barrier(16)

    def one(k):
        go.wait()       # all at once: 16 long streams against room for 8
        burst[f"ngx-burst-{k}"] = _ngx_stream(port, f"ngx-burst-{k}",
                                              {"prompt": "x", "max_tokens": 256, "ignore_eos": True})
    ts = [threading.Thread(target=one, args=(k,)) for k in range(16)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert 429 in burst.values() and 200 in burst.values(), burst
    want.update(burst)
    _ngx_disconnect(port, "ngx-disconnect", ctx - 8)
    want["ngx-disconnect"] = 200
    return want


def test_agent_http_nginx_in_front_of_kpi_infer():
    """nginx (Debian's) as a reverse proxy in front of kpi-infer, traced on its
    own port: its master and worker are found by --port, only the connections
    accepted on that port make request rows (its upstream ones are outbound
    exchanges, schema/008_hops.sql), and every row is checked against the
    capture of the client's side: a load, then a 404, a 500, a 429, a
    keep-alive connection carrying three requests and a client gone
    mid-stream."""
    kpitest.require_root("kpi-agent")
    pcaptest.require()
    at.require_built(at.INFER)
    nginxtest.find()
    import servertest
    d = _tmp()
    daemon = servertest.Daemon("--max-seqs", 4, "--max-queue", 4)
    port = kpitest.free_port()
    ng = nginxtest.start(d, port, daemon.port)
    db = os.path.join(d, "nginx.db")
    agent = at.start_agent(db, "--flush-ms", 100, "--port", port)
    agent.wait_line("HTTP mode", timeout=60)
    time.sleep(0.6)     # the worker as well as the master (next rescan at the latest)
    cap = pcaptest.Capture([port], noise=True)
    results = at.run_load(port, 60, threads=3, max_tokens=(1, 16), prefix="ngx")
    want = _ngx_cases(port, daemon.ctx)
    # kpi-bench through nginx: the ids are kpi-infer's, passed back by nginx
    bench_csv = os.path.join(d, "bench.csv")
    p = kpitest.run([os.path.join(kpitest.BUILD, "kpi-bench"), "--url", f"http://127.0.0.1:{port}",
                     "--endpoint", "completions", "--requests", "20", "--concurrency", "2", "--max-tokens", "8",
                     "--ignore-eos", "--quiet", "--csv", bench_csv], timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    pcap = cap.stop()
    time.sleep(0.3)
    assert agent.stop() == 0, agent.lines[-20:]
    ng.stop()
    rows = at.rows(db)
    wire = pcaptest.exchanges_by_id(pcap, port)
    assert want["ngx-404"] == 404 and want["ngx-500"] == 500, want
    for rid, st in want.items():
        r = rows.get(rid)
        assert r is not None and r["http_status"] == st, (rid, st, r, agent.lines[-15:])
        if st != 200:
            assert r["decode_ns"] is None and r["content_events"] == 0 and r["end_reason"] == "complete", r
    for k in range(3):
        r = rows[f"ngx-keepalive-{k}"]
        assert r["end_reason"] == "complete" and r["content_events"] == wire[f"ngx-keepalive-{k}"]["content_events"] \
            and r["output_tokens"] == 5, r
    with open(bench_csv) as f:
        bench_rows = list(csv.DictReader(f))
    assert len(bench_rows) == 20 and all(b["request_id"] for b in bench_rows), bench_rows[:2]
    for b in bench_rows:
        r = rows.get(b["request_id"])
        assert r and r["http_status"] == int(b["status"]) == 200 and r["output_tokens"] == 8 and \
            r["content_events"] >= 1, (b, r)
    dis = rows["ngx-disconnect"]
    assert dis["end_reason"] == "client_closed" and dis["content_events"] >= 1 and \
        dis["content_events"] == wire["ngx-disconnect"]["content_events"], (dis, wire.get("ngx-disconnect"))
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
    _compare_wire(rows, wire, db, "nginx: agent - wire", stalls=cap.stalls)
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


CLIENT_WIRE_P99_US = 1000  # kpi-bench's TTFT beyond the wire's (its own sending and parsing)


def _bench_matches_the_trace(argv_of_port):
    """kpi-bench --url drives a server (argv_of_port(port) runs it; chat and
    completions) traced with --port, the port captured with tcpdump: every
    request of kpi-bench's CSV has its row, joined on the x-request-id the
    server answered with; the statuses and content-event counts are equal.
    Each side is timed against the wire, never against the other: the
    agent's marks within WIRE_P99_US of the capture (_compare_wire), and
    kpi-bench's TTFT (its clock: before the request's first byte is sent,
    after the first content event is parsed) never less than the wire's
    (first request byte to the byte that completes the first content event)
    and within CLIENT_WIRE_P99_US of it at p99.  kpi-bench runs at
    SCHED_FIFO (as test_bench_sweep's timed runs do): what it adds beyond the
    wire is then its own work, not the minutes of CPU another job on a
    shared 2-core machine takes from a client thread."""
    kpitest.require_root("kpi-agent")
    pcaptest.require()
    at.require_built(at.AGENT)
    bench = os.path.join(kpitest.BUILD, "kpi-bench")
    at.require_built(bench)
    rt = ["chrt", "-f", "10"] if shutil.which("chrt") else []
    d = _tmp()
    db = os.path.join(d, "bench.db")
    port = kpitest.free_port()
    srv = kpitest.Proc(argv_of_port(port))
    srv.wait_line("listening on")
    agent = at.start_agent(db, "--flush-ms", 100, "--port", port)
    assert "HTTP mode" in agent.wait_line(f"attached to pid {srv.pid}", timeout=60)
    cap = pcaptest.Capture([port], noise=True)
    csvs = {}
    for ep in ("chat", "completions"):
        csvs[ep] = os.path.join(d, f"{ep}.csv")
        p = kpitest.run([*rt, bench, "--url", f"http://127.0.0.1:{port}", "--endpoint", ep, "--requests", "40",
                         "--concurrency", "4", "--prompt-len", "16", "--max-tokens", "12", "--quiet",
                         "--csv", csvs[ep]], timeout=120)
        assert p.returncode == 0, f"kpi-bench --endpoint {ep} exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
    pcap = cap.stop()
    time.sleep(0.3)
    assert agent.stop() == 0, agent.lines[-20:]
    srv.stop()
    rows = at.rows(db)
    # the server names each request in its answer: the wire by that id
    wire = {x["response_headers"].get("x-request-id"): x for x in pcaptest.exchanges(pcap, port)}
    beyond = []
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
            x = wire.get(rid)
            assert x and x["t_first_content"] is not None, (rid, x)
            wire_ns = x["t_first_content"] - x["t_first_byte"]
            ttft_ns = float(b["ttft_ms"]) * 1e6
            # the instants compared: the wire's first content, and about when
            # kpi-bench parsed it (its send is the wire's first byte, to µs)
            beyond.append((ttft_ns - wire_ns, x["t_first_content"], x["t_first_byte"] + ttft_ns,
                           f"{rid} (connect_ms {b['connect_ms']}, t_sent_ms {b['t_sent_ms']}, client port "
                           f"{x['client_port']}, wire TTFT {wire_ns / 1e6:.3f} ms)"))
    beyond.sort()
    assert beyond[0][0] >= 0, f"kpi-bench's TTFT is shorter than the wire's: {beyond[:3]}"
    kept = noisetest.judged(beyond, CLIENT_WIRE_P99_US * 1000, cap.stalls, "kpi-bench - wire TTFT")
    p99 = kept[int(0.99 * (len(kept) - 1))][0]
    print(f"     kpi-bench - wire TTFT, µs: min {kept[0][0] / 1e3:.1f}, p50 "
          f"{kept[len(kept) // 2][0] / 1e3:.1f}, p99 {p99 / 1e3:.1f}, max {kept[-1][0] / 1e3:.1f}")
    assert p99 <= CLIENT_WIRE_P99_US * 1e3, [(d, name) for d, _, _, name in kept[-5:]]
    _compare_wire(rows, {rid: wire[rid] for rid in rows if rid in wire}, db, stalls=cap.stalls)


def test_agent_http_kpi_bench_matches_the_trace():
    """kpi-bench against the Python server (ThreadingHTTPServer)."""
    _bench_matches_the_trace(lambda port: [sys.executable, SERVER, str(port), "--role-with-content"])


def test_agent_http_kpi_bench_matches_the_trace_node():
    """kpi-bench against the Node server (http.createServer)."""
    node = _node()
    _bench_matches_the_trace(lambda port: [node, SERVER_JS, str(port), "--role-with-content"])


def test_agent_http_forked_workers_traced_from_their_first_request():
    """nginx with four workers started after the agent (--port): its master
    becomes a target at its listen(), and each worker it forks at its fork,
    before it runs (bpf/kpi.bpf.c kpi_proc_fork), not at the agent's next
    rescan half a second later.  Requests sent the moment the port accepts,
    each on a connection of its own (so every worker may take one), are all
    rows, each under the worker that served it."""
    kpitest.require_root("kpi-agent")
    at.require_built(at.AGENT)
    nginxtest.find()
    d = _tmp()
    up = kpitest.free_port()
    backend = kpitest.Proc(["python3", SERVER, str(up)])
    backend.wait_line("listening on")
    port = kpitest.free_port()
    db = os.path.join(d, "forked.db")
    agent = at.start_agent(db, "--flush-ms", 100, "--port", port)
    agent.wait_line(f"waiting for a process to listen on port {port}", timeout=60)
    ng = nginxtest.start(d, port, up, workers=4)
    got = {}
    for i in range(12):
        rid = f"fork-{i}"
        st, _, body = kpitest.http_request(port, "POST", "/v1/completions",
                                           json.dumps({"model": "m", "stream": True, "max_tokens": 2}).encode(),
                                           {"Content-Type": "application/json", "x-request-id": rid,
                                            "Connection": "close"})
        got[rid] = st
    time.sleep(0.3)
    assert agent.stop() == 0, agent.lines[-20:]
    ng.stop()
    backend.stop()
    rows = at.rows(db)
    pids = {r["pid"] for rid, r in rows.items() if rid in got}
    attached = [l for l in agent.lines if l.startswith("attached to pid") and "nginx" in l]
    print(f"     {sum(rid in rows for rid in got)} of {len(got)} requests rows, served by {len(pids)} "
          f"workers; {len(attached)} nginx processes attached")
    assert all(st == 200 for st in got.values()), got
    assert set(got) <= set(rows), (sorted(set(got) - set(rows)), agent.lines[-15:])
    assert all(rows[rid]["http_status"] == 200 for rid in got)
    assert len(attached) == 5, attached       # the master and its four workers
