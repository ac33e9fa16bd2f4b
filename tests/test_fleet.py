"""Fleet view, for real: a real Prometheus scrapes kpi-agent --metrics while
load runs against kpi-infer, and its histogram_quantile() agrees with the
SQLite trace; a receiver written here decodes kpi-agent --otlp spans field by
field, and sees retries and drops while it is down."""
import bisect, os, re, time, urllib.request

import kpitest
import promtext
import agenttest as at
import fleettest as ft

TTFT = "gen_ai_server_time_to_first_token_seconds"
# the conventions' buckets (agent/sinks/export_prom.c)
TTFT_LE = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
           7.5, 10.0]
PHASES = ("net_in", "queue", "prefill", "decode", "net_out")


def _daemon(*args):
    kpitest.require_root("kpi-agent")
    at.require_built(at.INFER)
    at.require_built(at.AGENT)
    import servertest
    return servertest.Daemon(*args)


def _agent(db, pid, *args, env=None):
    argv = [at.AGENT, "--db", db, "--flush-ms", "200", "--pid", str(pid), *map(str, args)]
    a = kpitest.Proc(argv, env=env)
    a.wait_line(f"attached to pid {pid}", timeout=60)
    return a


def _scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4"), r.headers
        return r.read().decode()


def _bucket(v):
    return bisect.bisect_left(TTFT_LE, v)


def _ok(row):
    return row["http_status"] == 200 and row["finish_reason"] in ("stop", "length")


def test_fleet_prometheus_histogram_quantile_matches_trace():
    """PromQL p99 TTFT over the agent's histogram vs the p99 from SQLite."""
    daemon = _daemon("--max-seqs", 4, "--max-queue", 4)
    d = ft.tmpdir("kpi-fleet-")
    db = os.path.join(d, "trace.db")
    mport = kpitest.free_port()
    agent = _agent(db, daemon.p.pid, "--metrics", mport)
    assert any(f"serving metrics on http://127.0.0.1:{mport}/metrics" in l for l in agent.lines)
    prom = ft.Prometheus([f"127.0.0.1:{mport}"])
    # both endpoints: /v1/completions (text_completion) and /v1/chat/completions (chat)
    results, ops = ft.mixed_load(daemon.port, 200, threads=4, max_tokens=(1, 16))
    burst, bops = ft.mixed_burst(daemon.port, 40, max_tokens=24)
    results += burst
    ops.update(bops)
    n429 = sum(1 for r in results if r.status == 429)
    assert n429, "the burst got no 429"
    assert not [r for r in results if r.status not in (200, 429)], \
        [(r.rid, r.status, r.error) for r in results if r.status not in (200, 429)]
    client_ok = {op: sum(1 for r in results if r.status == 200 and ops[r.rid] == op)
                 for op in ft.ENDPOINTS}
    assert all(client_ok.values()), client_ok

    time.sleep(0.5)     # the agent records a request at its last write's sys_exit
    text = _scrape(mport)
    parsed = promtext.by_labels(text)
    pid = daemon.p.pid
    n_ok = ft.series(parsed, TTFT + "_count", pid=pid)
    assert len(n_ok) == 2, f"one TTFT series per operation for pid {pid}: {n_ok}"
    for op, n in client_ok.items():
        assert ft.series(parsed, TTFT + "_count", pid=pid, gen_ai_operation_name=op) == [n], \
            (op, ft.series(parsed, TTFT + "_count", pid=pid, gen_ai_operation_name=op), n)
    # Prometheus has the same numbers once it scraped after the load
    sel = f'{{job="kpi-agent",pid="{pid}"}}'
    prom.wait_value(f"sum({TTFT}_count{sel})", sum(n_ok))
    by_op = {l.get("gen_ai_operation_name"): v for l, v in
             prom.query(f"sum by (gen_ai_operation_name) ({TTFT}_count{sel})")}
    assert by_op == {op: float(n) for op, n in client_ok.items()}, (by_op, client_ok)
    # refused before admission (queue full): no endpoint known, no operation label
    prom.wait_value(f'sum(kpi_requests_total{{pid="{pid}",http_response_status_code="429",'
                    f'gen_ai_operation_name=""}})', n429)
    p99_prom = prom.scalar(f"histogram_quantile(0.99, sum by (le) ({TTFT}_bucket{sel}))")
    n_series = prom.scalar('count({job="kpi-agent"})')
    # every query of the shipped Grafana dashboard parses and runs here
    import json
    dash = json.load(open(os.path.join(kpitest.ROOT, "docs", "grafana-kpiscope.json")))
    for panel in dash["panels"]:
        for t in panel.get("targets", []):
            e = (t["expr"].replace("$__rate_interval", "1m").replace('=~"$job"', '=~"kpi-agent"')
                 .replace('=~"$instance"', '=~".*"').replace('=~"$model"', '=~".*"'))
            prom.query(e)
    assert agent.stop() == 0, agent.lines[-20:]

    rows = at.rows(db)
    ok = [r for r in rows.values() if r["pid"] == pid and _ok(r)]
    assert len(ok) == sum(n_ok), f"trace has {len(ok)} successful requests, histogram {n_ok}"
    for op, n in client_ok.items():
        in_trace = sum(1 for r in ok if ops[r["request_id"]] == op)
        assert in_trace == n, (op, in_trace, n)
    ttfts = sorted(r["ttft_ns"] / 1e9 for r in ok)
    # the rank histogram_quantile interpolates in: ceil-free, q * count
    p99_trace = at.pct(ttfts, 99)
    b_prom, b_trace = _bucket(p99_prom), _bucket(p99_trace)
    print(f"     p99 TTFT: PromQL {p99_prom * 1e3:.3f} ms (bucket {b_prom}), SQLite "
          f"{p99_trace * 1e3:.3f} ms (bucket {b_trace}); {len(ok)} requests; "
          f"{int(n_series)} series scraped")
    assert abs(b_prom - b_trace) <= 1, (p99_prom, p99_trace)

    # counters agree with the trace too
    mine = [r for r in rows.values() if r["pid"] == pid]
    for op in ft.ENDPOINTS:
        out_tokens = sum(r["output_tokens"] or 0 for r in mine if ops[r["request_id"]] == op)
        got = ft.series(parsed, "kpi_tokens_total", pid=pid, gen_ai_token_type="output",
                        gen_ai_operation_name=op)
        assert got == [out_tokens], (op, got, out_tokens)
    assert not ft.series(parsed, "kpi_tokens_total", pid=pid, gen_ai_operation_name=None)
    # by status and operation: an admitted request carries its endpoint's
    # operation, a refused one (no reject_reason: admitted) none
    by_key = {}
    for r in mine:
        k = (r["http_status"], None if r["reject_reason"] else ops[r["request_id"]])
        by_key[k] = by_key.get(k, 0) + 1
    assert (429, None) in by_key and (200, "chat") in by_key and (200, "text_completion") in by_key, by_key
    for (st, op), n in by_key.items():
        assert sum(ft.series(parsed, "kpi_requests_total", pid=pid, http_response_status_code=st,
                             gen_ai_operation_name=op)) == n, (st, op, n)
    assert sum(ft.series(parsed, "kpi_requests_total", pid=pid)) == len(mine)
    for ph in PHASES:
        cnt = ft.series(parsed, f"kpi_request_{'network_in' if ph == 'net_in' else 'network_out' if ph == 'net_out' else ph}_seconds_count", pid=pid)
        want = sum(1 for r in mine if r[ph + "_ns"] is not None)
        assert sum(cnt) == want, (ph, cnt, want)
    # labels of the conventions, with the model the daemon reports
    labels = sorted((dict(l) for (n, l), _ in parsed.items() if n == TTFT + "_count"),
                    key=lambda l: l["gen_ai_operation_name"])
    assert labels == [{"gen_ai_operation_name": op, "gen_ai_request_model": daemon.model,
                       "server_port": str(daemon.port), "pid": str(pid), "kpi_source": "usdt"}
                      for op in ("chat", "text_completion")], labels
    assert ft.series(parsed, "kpi_queue_depth", pid=pid), "no queue depth gauge"
    assert ft.series(parsed, "kpi_agent_ringbuf_drops_total") == [0]


test_fleet_prometheus_histogram_quantile_matches_trace.timeout = 300


# Prometheus interpolates inside the native bucket that holds the rank:
# within this factor of the value there (agent/sinks/prom_native.h)
NATIVE_BASE = 2 ** (1 / 128)


def test_fleet_prometheus_native_histogram_p99_within_schema_error():
    """A real Prometheus 2.42 with native histograms on scrapes the agent's
    protobuf exposition: the TTFT histogram arrives native (schema 7), its
    count and sum are the trace's, and histogram_quantile's p99 is within
    the schema's relative error (2^(1/128) - 1, 0.54%) of the trace's TTFT at
    the rank it interpolates in, where the classic buckets can only place it
    within their 10-20 ms bucket."""
    daemon = _daemon("--max-seqs", 4)
    d = ft.tmpdir("kpi-native-")
    db = os.path.join(d, "trace.db")
    mport = kpitest.free_port()
    agent = _agent(db, daemon.p.pid, "--metrics", mport)
    prom = ft.Prometheus([f"127.0.0.1:{mport}"], features=("native-histograms",))
    results, ops = ft.mixed_load(daemon.port, 200, threads=4, max_tokens=(1, 16))
    n_ok = sum(1 for r in results if r.status == 200)
    assert n_ok == len(results), [(r.rid, r.status, r.error) for r in results if r.status != 200]
    pid = daemon.p.pid
    sel = f'{{job="kpi-agent",pid="{pid}"}}'
    # native: histogram_count() of the series itself, no _count series
    prom.wait_value(f"histogram_count(sum({TTFT}{sel}))", n_ok)
    p99_prom = prom.scalar(f"histogram_quantile(0.99, sum({TTFT}{sel}))")
    h_sum = prom.scalar(f"histogram_sum(sum({TTFT}{sel}))")
    classic = prom.query(f"{TTFT}_bucket{sel}")
    assert agent.stop() == 0, agent.lines[-20:]

    ok = [r for r in at.rows(db).values() if r["pid"] == pid and _ok(r)]
    assert len(ok) == n_ok, (len(ok), n_ok)
    ttfts = sorted(r["ttft_ns"] / 1e9 for r in ok)
    assert abs(h_sum - sum(ttfts)) < 1e-6, (h_sum, sum(ttfts))
    # histogram_quantile's rank: q x count, in the bucket where the
    # cumulative count reaches it; that bucket holds the value of rank
    # ceil(q x count), and its answer lies inside that bucket
    k = -(-99 * n_ok // 100)
    at_rank = ttfts[k - 1]
    p99_trace = at.pct(ttfts, 99)
    print(f"     p99 TTFT of {n_ok}: native histogram_quantile {p99_prom * 1e3:.4f} ms, the trace at rank {k} "
          f"{at_rank * 1e3:.4f} ms ({100 * (p99_prom / at_rank - 1):+.3f}%, bound ±{100 * (NATIVE_BASE - 1):.3f}%), "
          f"interpolated p99 {p99_trace * 1e3:.4f} ms; classic bucket series ingested: {len(classic)}")
    assert at_rank / NATIVE_BASE * (1 - 1e-9) <= p99_prom <= at_rank * NATIVE_BASE * (1 + 1e-9), \
        (p99_prom, at_rank, ttfts[k - 3:k + 2])


def _check_spans(spans, rows, daemon, mono_to_wall, ops):
    """Every field of every request's spans against its SQLite row; ops: the
    gen_ai.operation.name of each request id by the endpoint the client used."""
    roots = {}
    children = {}
    for res, scope, sp in spans:
        assert scope == "kpi-agent"
        assert res == {"service.name": "kpi-infer", "process.pid": daemon.p.pid,
                       "host.name": os.uname().nodename}, res
        assert re.fullmatch(r"[0-9a-f]{32}", sp["traceId"]) and sp["traceId"] != "0" * 32
        assert re.fullmatch(r"[0-9a-f]{16}", sp["spanId"]) and sp["spanId"] != "0" * 16
        if "parentSpanId" in sp:
            children.setdefault(sp["parentSpanId"], []).append(sp)
        else:
            a = ft.attrs(sp["attributes"])
            rid = a["kpi.request_id"]
            assert rid not in roots, f"{rid}: two root spans"
            roots[rid] = (sp, a)
    assert set(roots) == set(rows), (len(roots), len(rows))
    for rid, (sp, a) in roots.items():
        r = rows[rid]
        # admitted: "{operation} {model}"; refused before admission: no endpoint known
        op = None if r["reject_reason"] else ops[rid]
        assert sp["name"] == (f"{op} {daemon.model}" if op else "HTTP"), (rid, sp["name"], op)
        assert sp["kind"] == 2
        start, end = int(sp["startTimeUnixNano"]), int(sp["endTimeUnixNano"])
        t0 = r["t_arrive_ns"] if r["t_arrive_ns"] is not None else r["t_admit_ns"]
        # the exporter's monotonic->wall offset is its own reading: within 5 ms
        assert abs(start - (t0 + mono_to_wall)) < 5_000_000, (rid, start, t0 + mono_to_wall)
        if r["t_done_ns"] is not None:
            assert end - start == r["t_done_ns"] - t0
        want = {"gen_ai.system": "kpi-infer", "kpi.source": "usdt",
                "gen_ai.request.model": daemon.model, "server.port": daemon.port,
                "http.response.status_code": r["http_status"],
                "http.request.header.x-request-id": [rid], "kpi.request_id": rid}
        if op:
            want["gen_ai.operation.name"] = op
        for k, col in (("gen_ai.usage.input_tokens", "prompt_tokens"),
                       ("gen_ai.usage.output_tokens", "output_tokens"),
                       ("kpi.preemptions", "preemptions"), ("kpi.itl_p50_ns", "itl_p50_ns"),
                       ("kpi.itl_p99_ns", "itl_p99_ns"), ("kpi.itl_max_ns", "itl_max_ns"),
                       ("kpi.srtt_us", "srtt_us"), ("kpi.runq_ns", "runq_ns")):
            if r[col] is not None:
                want[k] = r[col]
        for k, col in (("gen_ai.server.time_to_first_token", "ttft_ns"),
                       ("gen_ai.server.time_per_output_token", "tpot_ns"),
                       ("gen_ai.server.request.duration", "e2e_ns")):
            if r[col] is not None:
                want[k] = round(r[col] / 1e9, 9)
        if r["finish_reason"]:
            want["gen_ai.response.finish_reasons"] = [r["finish_reason"]]
        if r["http_status"] >= 400:
            want["error.type"] = str(r["http_status"])
        elif r["finish_reason"] in ("error", "cancelled"):
            want["error.type"] = r["finish_reason"]
        if r.get("reject_reason"):
            want["kpi.reject_reason"] = r["reject_reason"]
        got = dict(a)
        assert got == want, (rid, got, want)
        if r["http_status"] >= 500 or r["finish_reason"] == "error":
            assert sp["status"]["code"] == 2
        else:
            assert "status" not in sp
        # children: one per phase reached, contiguous, inside the root
        kids = sorted(children.get(sp["spanId"], []), key=lambda s: int(s["startTimeUnixNano"]))
        names = [k["name"] for k in kids]
        assert names == [p for p in PHASES if r[p + "_ns"] is not None], (rid, names)
        for k in kids:
            assert k["traceId"] == sp["traceId"] and k["kind"] == 1
            assert ft.attrs(k["attributes"]) == {"kpi.phase": k["name"]}
            assert int(k["endTimeUnixNano"]) - int(k["startTimeUnixNano"]) == r[k["name"] + "_ns"]
        for x, y in zip(kids, kids[1:]):
            assert x["endTimeUnixNano"] == y["startTimeUnixNano"], rid
        if kids and r["t_done_ns"] is not None:
            assert kids[0]["startTimeUnixNano"] == sp["startTimeUnixNano"]
            assert kids[-1]["endTimeUnixNano"] == sp["endTimeUnixNano"]
    ids = [sp["spanId"] for _, _, sp in spans]
    assert len(ids) == len(set(ids)), "span ids repeat"
    assert len({sp["traceId"] for _, _, sp in spans if "parentSpanId" not in sp}) == len(roots)


def _mono_to_wall(db):
    import sqlite3
    c = sqlite3.connect(db)
    try:
        return c.execute("SELECT mono_to_wall_ns FROM agent_runs ORDER BY 1 DESC LIMIT 1").fetchone()[0]
    finally:
        c.close()


def test_fleet_otlp_spans_every_field():
    daemon = _daemon("--max-seqs", 4, "--max-queue", 4)
    d = ft.tmpdir("kpi-fleet-")
    db = os.path.join(d, "trace.db")
    rx = ft.Receiver()
    agent = _agent(db, daemon.p.pid, "--otlp", f"http://127.0.0.1:{rx.port}",
                   env={"OTEL_BSP_SCHEDULE_DELAY": "200"})
    results, ops = ft.mixed_load(daemon.port, 40, threads=4, max_tokens=(1, 12))
    burst, bops = ft.mixed_burst(daemon.port, 30, max_tokens=24)
    results += burst
    ops.update(bops)
    assert agent.stop() == 0, agent.lines[-20:]
    # the trace is the source of truth: every row it has, the receiver has
    rows = {k: v for k, v in at.rows(db).items() if v["pid"] == daemon.p.pid}
    n = len(rows)
    assert n >= len(results) - 2 and any(r["http_status"] == 429 for r in rows.values())
    assert f"otlp: {n} requests exported, 0 dropped" in "\n".join(agent.lines), agent.lines[-5:]
    assert set(rx.paths) == {"/v1/traces"}
    assert all(h.get("Content-Type") == "application/json" for h in rx.headers)
    assert {a.get("gen_ai.operation.name") for _, _, sp in rx.spans() if "parentSpanId" not in sp
            for a in [ft.attrs(sp["attributes"])]} == {"chat", "text_completion", None}
    _check_spans(rx.spans(), rows, daemon, _mono_to_wall(db), ops)


test_fleet_otlp_spans_every_field.timeout = 200


def test_fleet_otlp_receiver_down_then_up():
    """Started with the receiver down: retries with backoff, a full queue drops
    (counted), and what stayed queued arrives once the receiver is up."""
    daemon = _daemon()
    d = ft.tmpdir("kpi-fleet-")
    db = os.path.join(d, "trace.db")
    rport, mport = kpitest.free_port(), kpitest.free_port()
    agent = _agent(db, daemon.p.pid, "--otlp", f"http://127.0.0.1:{rport}", "--metrics", mport,
                   env={"OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_BSP_MAX_QUEUE_SIZE": "8",
                        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "4", "OTEL_EXPORTER_OTLP_TIMEOUT": "2000"})
    results = at.run_load(daemon.port, 30, threads=1, max_tokens=(1, 4))
    agent.wait_line("retrying with backoff", timeout=20)
    time.sleep(0.5)
    m = promtext.by_labels(_scrape(mport))
    full = ft.series(m, "kpi_otlp_requests_dropped_total", reason="queue_full")[0]
    retries = ft.series(m, "kpi_otlp_export_retries_total")[0]
    assert full >= 30 - 8 - 4, f"queue of 8 + a batch of 4 in flight: {full} dropped for full"
    assert retries >= 1
    assert ft.series(m, "kpi_otlp_requests_exported_total") == [0]
    rx = ft.Receiver(port=rport)
    want = 30 - int(full)
    rx.wait_spans(lambda s: sum(1 for _, _, sp in s if "parentSpanId" not in sp) >= want,
                  timeout=30)
    agent.wait_line("works again", timeout=10)
    assert agent.stop() == 0, agent.lines[-20:]
    line = agent.wait_line("otlp: ")
    assert line.startswith(f"otlp: {want} requests exported, {int(full)} dropped "
                           f"({int(full)} queue full, 0 export failed)"), line
    assert line.endswith(", 0 spans rejected by the receiver"), line
    got = {ft.attrs(sp["attributes"])["kpi.request_id"] for _, _, sp in rx.spans()
           if "parentSpanId" not in sp}
    sent = {r.rid for r in results}
    assert len(got) == want and got <= sent, (len(got), want)


test_fleet_otlp_receiver_down_then_up.timeout = 200


def test_fleet_otlp_https_keepalive():
    """https:// verified against the receiver's self-signed certificate given
    as OTEL_EXPORTER_OTLP_CERTIFICATE: every request's span arrives, the
    batches share one kept-alive connection, a non-ASCII service name arrives
    as it is.  Without that CA the certificate is refused and nothing is
    retried: one try per batch, each dropped and counted."""
    daemon = _daemon()
    d = ft.tmpdir("kpi-fleet-")
    cert, key = ft.self_signed(d)
    rx = ft.Receiver(tls=(cert, key))
    db = os.path.join(d, "trace.db")
    agent = _agent(db, daemon.p.pid, "--otlp", f"https://127.0.0.1:{rx.port}",
                   env={"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "4",
                        "OTEL_EXPORTER_OTLP_CERTIFICATE": cert, "OTEL_SERVICE_NAME": "推理-café"})
    results = at.run_load(daemon.port, 20, threads=1, max_tokens=(1, 4))
    rx.wait_spans(lambda s: sum(1 for _, _, sp in s if "parentSpanId" not in sp) >= len(results),
                  timeout=30)
    assert agent.stop() == 0, agent.lines[-20:]
    rows = {k: v for k, v in at.rows(db).items() if v["pid"] == daemon.p.pid}
    n = len(rows)
    assert f"otlp: {n} requests exported, 0 dropped (0 queue full, 0 export failed), 0 retries, " \
           "0 spans rejected by the receiver" in "\n".join(agent.lines), agent.lines[-5:]
    roots = {ft.attrs(sp["attributes"])["kpi.request_id"] for _, _, sp in rx.spans()
             if "parentSpanId" not in sp}
    assert roots == set(rows) and set(rx.paths) == {"/v1/traces"}, (len(roots), n)
    assert {res["service.name"] for res, _, _ in rx.spans()} == {"推理-café"}
    assert len(rx.bodies) >= n / 4 and rx.connections == 1, (len(rx.bodies), rx.connections)

    # the system's CAs do not know the receiver's certificate
    bodies = len(rx.bodies)
    agent = _agent(db, daemon.p.pid, "--otlp", f"https://127.0.0.1:{rx.port}",
                   env={"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "2"})
    at.run_load(daemon.port, 6, threads=1, max_tokens=(1, 4), prefix="untrusted")
    line = agent.wait_line("OTLP export dropped", timeout=30)
    assert "certificate" in line and "OTEL_EXPORTER_OTLP_CERTIFICATE" in line \
        and "not retryable" in line, line
    assert agent.stop() == 0, agent.lines[-20:]
    line = agent.wait_line("otlp: ")
    assert line.startswith("otlp: 0 requests exported, 6 dropped (0 queue full, 6 export failed), "
                           "0 retries"), line
    assert len(rx.bodies) == bodies


test_fleet_otlp_https_keepalive.timeout = 200


def test_fleet_flags_say_what_is_wrong():
    """--metrics and --otlp mistakes are named before anything is loaded; a
    taken port is named after."""
    at.require_built(at.AGENT)
    for args, want in ((["--metrics", "host:port"], "--metrics 'host:port' is not ADDR:PORT"),
                       (["--metrics", "::1:9464"], "[ADDR]:PORT"),
                       (["--otlp", "grpc://collector:4317"], "--otlp wants an http:// or https:// URL")):
        p = kpitest.run([at.AGENT, *args])
        assert p.returncode == 2 and want in p.stderr, (args, p.returncode, p.stderr)
        assert "Try 'kpi-agent --help'" in p.stderr
    h = kpitest.run([at.AGENT, "--help"]).stdout
    assert "--metrics ADDR:PORT" in h and "--otlp URL" in h and "OTEL_BSP_MAX_QUEUE_SIZE" in h \
        and "OTEL_EXPORTER_OTLP_CERTIFICATE" in h
    kpitest.require_root("kpi-agent")
    # each agent below stops at its exporters, before it looks for targets;
    # --pid (this test's) keeps it from ever scanning for every kpi-infer
    me = ["--pid", str(os.getpid())]
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    d = ft.tmpdir("kpi-fleet-")
    p = kpitest.run([at.AGENT, *me, "--db", os.path.join(d, "t.db"), "--metrics", str(port),
                     "--duration", "5"], timeout=60)
    s.close()
    assert p.returncode == 1 and f"--metrics {port}: cannot listen on 127.0.0.1:{port}: Address already in use" \
        in p.stderr, (p.returncode, p.stderr)
    p = kpitest.run([at.AGENT, *me, "--db", os.path.join(d, "t.db"), "--otlp", "http://x"],
                    timeout=60, env={**os.environ, "OTEL_BSP_MAX_QUEUE_SIZE": "0"})
    assert p.returncode == 1 and "OTEL_BSP_MAX_QUEUE_SIZE wants an integer" in p.stderr, p.stderr
    p = kpitest.run([at.AGENT, *me, "--db", os.path.join(d, "t.db"), "--otlp", "https://x"],
                    timeout=60, env={**os.environ, "OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent.pem"})
    assert p.returncode == 1 and "OTEL_EXPORTER_OTLP_CERTIFICATE /nonexistent.pem: No such file" \
        in p.stderr, p.stderr
