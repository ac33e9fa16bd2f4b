"""The fleet in ClickHouse, for real: kpi-agents standing for three hosts ship
their traces with kpi-ship to a two-shard ClickHouse (two clickhouse-server
processes) while kpi-infer serves load; ClickHouse goes away for 20 s and a
shipper is SIGKILLed, and every request row is there exactly once, and every
minute of per-minute aggregates, its counts the rows'; the fleet report names
the host that was slowed and its phase.  Also: the alerting
rules under promtool, and kpi-bench --baseline."""
import json, os, re, shutil, signal, sqlite3, sys, threading, time, urllib.request

import kpitest
import agenttest as at
import clickhousetest as cht
import fleetgen
import tracetest

# tests/run.py runs these beside other tests, but those marked alone: none
# of them times anything or counts what the whole host did.
CONCURRENT = True
# One ClickHouse cluster for the modules that name this fixture (one process).
FIXTURE = "clickhouse"

SHIP = os.path.join(kpitest.BIN, "kpi-ship")
REPORT = os.path.join(kpitest.BIN, "kpi-report")
BENCH = os.path.join(kpitest.BIN, "kpi-bench")
PROMTOOL = "/usr/bin/promtool"
RULES = os.path.join(kpitest.ROOT, "schema", "prometheus")
SSE_SERVER = os.path.join(kpitest.ROOT, "tests", "lib", "sse_server.py")
OUTAGE_S = 20


def _metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def _q(db, sql):
    c = sqlite3.connect(db)
    try:
        return c.execute(sql).fetchall()
    finally:
        c.close()


def _shipper(db, url, host, mport):
    p = kpitest.Proc([SHIP, "--db", db, "--to", url, "--host", host, "--model", "tiny", "--interval", "200",
                      "--metrics", str(mport)])
    p.wait_line(f"serving metrics on http://127.0.0.1:{mport}/metrics")
    p.wait_line(f"as host {host} to")
    return p


def _wait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout}s")


def _exactly_once(cluster, db, host, tables=("requests", "samples")):
    """Every row of the trace's tables is in ClickHouse once (FINAL), and no
    other row of that host is."""
    con = sqlite3.connect(db)
    counts = {}
    for t in tables:
        want = {r[0] for r in con.execute(f"SELECT rowid FROM {t}")}
        got = cluster.rows(f"SELECT row_id FROM kpiscope.{t} FINAL WHERE host = '{host}'")
        ids = [int(r["row_id"]) for r in got]   # 64-bit integers come quoted in JSON
        assert len(ids) == len(set(ids)), f"{host} {t}: {len(ids) - len(set(ids))} rows twice after FINAL"
        missing, extra = want - set(ids), set(ids) - want
        assert not missing and not extra, f"{host} {t}: {len(missing)} missing, {len(extra)} not in the trace"
        assert want, f"{host} {t}: the trace has no rows"
        counts[t] = len(want)
    con.close()
    return counts


@kpitest.alone
def test_ship_three_hosts_outage_kill_and_slow_host():
    """Three hosts ship while serving; ClickHouse stopped 20 s and restarted,
    a shipper SIGKILLed and restarted: every row exactly once, every
    aggregate minute once with the rows' counts, lag back under 5 s; the
    report across hosts names the slowed host and its phase."""
    kpitest.require_root("kpi-agent")
    for b in (at.AGENT, at.INFER, SHIP, REPORT):
        at.require_built(b)
    cht.require()
    import servertest
    cluster = cht.shared_cluster()
    tag = f"{os.getpid()}-{int(time.time()) % 100000}"
    names = [f"alpha-{tag}", f"bravo-{tag}", f"charlie-{tag}"]
    d = kpitest.tmpdir("kpi-ship-")
    # charlie is slowed on purpose: one sequence at a time, so its requests queue
    daemons = [servertest.Daemon("--threads", "1"), servertest.Daemon("--threads", "1"),
               servertest.Daemon("--threads", "1", "--max-seqs", "1")]
    dbs = [os.path.join(d, f"{n}.db") for n in names]
    agents = [at.start_agent(db, "--flush-ms", "200", pid=dm.p.pid) for db, dm in zip(dbs, daemons)]
    mports = [kpitest.free_port() for _ in names]
    ships = [_shipper(db, cluster.url, n, mp) for db, n, mp in zip(dbs, names, mports)]

    stop_load = threading.Event()
    conc = [1, 1, 1]

    def load(i):
        k = 0
        while not stop_load.is_set():
            at.run_load(daemons[i].port, 6 * conc[i], threads=conc[i], seed=k, prefix=f"h{i}-{k}",
                        max_tokens=(4, 12))
            k += 1

    threads = [threading.Thread(target=load, args=(i,), daemon=True) for i in range(3)]
    base_from = time.time()
    for t in threads:
        t.start()
    try:
        time.sleep(15)                        # baseline: every host alike
        base_to = time.time()
        conc[2] = 4                           # charlie now gets 4 at once: they queue behind one
        cluster.stop()
        down = time.monotonic()
        for s in ships:
            line = s.wait_line("is unreachable", timeout=30)
            assert "rows wait in the trace" in line, line
        assert all(_metrics(mp)["kpi_ship_up"] == 0 for mp in mports)
        # long enough for every shipper's backoff to reach its 5 s ceiling
        # (0.5 + 1 + 2 + 4 s) and retry there twice
        time.sleep(max(0, OUTAGE_S - (time.monotonic() - down)))
        cluster.start()
        up = time.monotonic()
        for s in ships:
            s.wait_line("takes rows again", timeout=60)
        # lag under 5 s on every shipper while the load goes on
        _wait(lambda: all(0 <= _metrics(mp)["kpi_ship_lag_seconds"] < 5 for mp in mports), 60,
              "kpi_ship_lag_seconds < 5 on every shipper after ClickHouse came back")
        recovered = time.monotonic() - up
        print(f"     lag under 5 s on all three shippers {recovered:.1f} s after ClickHouse restarted")
        # a shipper killed mid-load, then restarted on the same trace
        time.sleep(3)
        ships[0].p.send_signal(signal.SIGKILL)
        ships[0].p.wait()
        time.sleep(3)
        ships[0] = _shipper(dbs[0], cluster.url, names[0], mports[0])
        time.sleep(5)
    finally:
        stop_load.set()
        for t in threads:
            t.join(120)
    inc_to = time.time()
    for a in agents:
        assert a.stop() == 0, "\n".join(a.lines[-20:])
    # the traces are final: every shipper catches up to their last row
    _wait(lambda: all(_metrics(mp)["kpi_ship_backlog_rows{table=\"requests\"}"] == 0 and
                      _metrics(mp)["kpi_ship_backlog_rows{table=\"samples\"}"] == 0 for mp in mports),
          60, "every shipper shipped its trace to the end")
    for s in ships:
        assert s.stop() == 0
        assert any("rows shipped" in l and "0 rows behind" in l for l in s.lines), s.lines[-5:]
    counts = [_exactly_once(cluster, db, n) for db, n in zip(dbs, names)]
    print(f"     rows per host, each exactly once: {counts}")
    minutes = [cht.minutes_once(cluster, db, n) for db, n in zip(dbs, names)]
    print(f"     aggregate minutes per host, each exactly once: {minutes}")
    # a resent batch collapses: the restarted shipper sent at most one batch twice
    dup = cluster.rows(f"SELECT count() AS n, uniqExact(row_id) AS u FROM kpiscope.requests WHERE host = '{names[0]}'")
    print(f"     {names[0]}: {dup[0]['n']} request rows stored before merges, {dup[0]['u']} distinct")

    # the fleet report: charlie and its queue
    r = kpitest.run([REPORT, "--db", cluster.url, "--from", f"@{int(base_to) + 1}", "--to", f"@{int(inc_to)}",
                     "--baseline", f"@{int(base_from)}..@{int(base_to)}"], timeout=120)
    assert r.returncode == 0, r.stderr
    m = re.search(r"\*\*Host (\S+) carries (\d+)% of the p99 TTFT increase .*?, most of it in ([a-z -]+)", r.stdout)
    assert m, r.stdout[:3000]
    print(f"     report: {m.group(0)}")
    assert m.group(1) == names[2], m.group(0)
    assert m.group(3).startswith("queue wait"), m.group(0)
    assert int(m.group(2)) >= 50, m.group(0)


test_ship_three_hosts_outage_kill_and_slow_host.timeout = 480


@kpitest.alone
def test_ship_retention_counts_unshipped_rows():
    """Rows the agent's retention removes before kpi-ship shipped them are the
    loss unshipped_rows: in the trace's losses and meta, /metrics and the
    agent's exit line; shipped ones are not."""
    kpitest.require_root("kpi-agent")
    for b in (at.AGENT, at.INFER, SHIP):
        at.require_built(b)
    import servertest
    daemon = servertest.Daemon("--threads", "1")
    d = kpitest.tmpdir("kpi-ship-ret-")
    db = os.path.join(d, "trace.db")
    mport = kpitest.free_port()
    # a cursor for a ClickHouse that is never there: nothing is ever shipped
    agent = at.start_agent(db, "--flush-ms", "200", "--metrics", mport, pid=daemon.p.pid)
    ship = kpitest.Proc([SHIP, "--db", db, "--to", f"clickhouse://127.0.0.1:{kpitest.free_port()}/kpiscope",
                         "--interval", "200"])
    ship.wait_line("is unreachable", timeout=30)
    res = at.run_load(daemon.port, 20, threads=2, max_tokens=(2, 6))
    assert all(not x.error for x in res)
    _wait(lambda: _q(db, "SELECT count(*) FROM requests")[0][0] >= 20, 30, "20 rows written")
    agent.stop()
    ship.stop()
    # the same trace, an agent whose --retain removes everything older than 1 s
    time.sleep(1.5)
    agent = at.start_agent(db, "--flush-ms", "200", "--retain", "1s", "--metrics", mport, pid=daemon.p.pid)
    _wait(lambda: _q(db, "SELECT count(*) FROM requests")[0][0] == 0, 30, "retention emptied requests")
    total = _wait(lambda: int(_q(db, "SELECT coalesce(sum(n), 0) FROM losses WHERE cause = 'unshipped_rows'")[0][0]) or None,
                  30, "losses rows of unshipped_rows")
    assert total >= 20, total
    prom = _wait(lambda: (lambda v: v if v else None)(
        _metrics(mport).get('kpi_agent_losses_total{cause="unshipped_rows"}', 0)), 10, "/metrics unshipped_rows")
    assert prom >= 20, prom
    agent.stop()
    meta = _q(db, "SELECT value FROM meta WHERE key = 'loss_unshipped_rows_total'")
    assert meta and int(meta[0][0]) >= 20, meta
    assert any(re.search(r"losses:.* \d+ unshipped_rows", l) for l in agent.lines), agent.lines[-10:]
    # every cursor on requests (the rows' and the per-minute aggregates',
    # kpi-ship's two) came back to the emptied table's start: new rows are
    # not hidden from either
    cur = _q(db, "SELECT sink, last_rowid FROM ship_cursor WHERE tbl = 'requests' ORDER BY sink")
    assert len(cur) == 2 and cur[1][0] == cur[0][0] + " minutes" and all(r[1] == 0 for r in cur), cur


def test_ship_waits_for_trace_and_gives_files_its_owner():
    """kpi-ship started before the agent waits for the trace and never makes
    it; run as root on a trace an unprivileged agent owns, the -wal and -shm
    files SQLite creates are that user's, who can still write the trace while
    kpi-ship follows it, and the row written then is shipped."""
    kpitest.require_root("chown and setpriv")
    at.require_built(SHIP)
    if not shutil.which("setpriv"):
        raise kpitest.Skip("setpriv is not installed (util-linux)")
    cluster = cht.shared_cluster()
    import pwd
    nobody = pwd.getpwnam("nobody")
    d = kpitest.tmpdir("kpi-ship-own-")
    os.chown(d, nobody.pw_uid, nobody.pw_gid)   # the agent's directory, given to its --user
    db = os.path.join(d, "trace.db")
    host = f"own-{os.getpid()}"
    ship = kpitest.Proc([SHIP, "--db", db, "--to", cluster.url, "--host", host, "--interval", "100"])
    ship.wait_line("waiting for the trace (no trace at")
    # the agent (privdrop_own_db) leaves the trace with its user; no -wal or -shm yet
    tmp = os.path.join(d, "making.db")
    fleetgen.make_trace(tmp, host, 20, time.time_ns() - 60 * 10**9, 20)
    os.chown(tmp, nobody.pw_uid, nobody.pw_gid)
    os.chmod(tmp, 0o640)
    os.rename(tmp, db)
    assert not os.path.exists(db + "-wal") and not os.path.exists(db + "-shm")
    ship.wait_line(f"as host {host} to")
    _wait(lambda: int(cluster.query(f"SELECT count() FROM kpiscope.requests FINAL WHERE host = '{host}'")) == 20,
          60, "the trace's 20 requests in ClickHouse")
    for sfx in ("-wal", "-shm"):
        st = os.stat(db + sfx)
        assert (st.st_uid, st.st_gid) == (nobody.pw_uid, nobody.pw_gid), f"{sfx} owned by {st.st_uid}:{st.st_gid}"
    # the agent's user writes a row while kpi-ship (root) holds the trace
    r = kpitest.run(["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups",
                     "/usr/bin/python3", "-c",
                     "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
                     "c.execute(\"INSERT INTO requests (request_id, pid, wall_ns, t_arrive_ns) "
                     "SELECT 'late', pid, wall_ns + 1, t_arrive_ns + 1 FROM requests ORDER BY rowid DESC LIMIT 1\"); "
                     "c.commit()", db])
    assert r.returncode == 0, r.stderr
    _wait(lambda: int(cluster.query(f"SELECT count() FROM kpiscope.requests FINAL WHERE host = '{host}' "
                                    f"AND request_id = 'late'")) == 1, 30, "the row the agent's user wrote, shipped")
    assert ship.stop() == 0
    # nothing of kpi-ship's is root's in the agent's directory
    owners = {f: os.stat(os.path.join(d, f)).st_uid for f in os.listdir(d)}
    assert set(owners.values()) == {nobody.pw_uid}, owners
    # --once does not wait: no trace is an error that says what to do
    r = kpitest.run([SHIP, "--db", os.path.join(d, "none.db"), "--to", cluster.url, "--once"])
    assert r.returncode == 1 and "start kpi-agent --db" in r.stderr, r.stderr
    assert not os.path.exists(os.path.join(d, "none.db"))


def test_ship_fleet_report_synthetic_hosts():
    """Three generated traces (10 minutes, one host's prefill 200 ms slower in
    the last 200 s, in one of its two pods) shipped with --once: the report
    across hosts names that host, that pod and prefill, and its figures match
    the traces'."""
    for b in (SHIP, REPORT):
        at.require_built(b)
    cluster = cht.shared_cluster()
    url = cluster.database("synth")
    d = kpitest.tmpdir("kpi-fleetgen-")
    start = (time.time_ns() // 10**9 - 3600) * 10**9
    tag = f"{os.getpid()}"
    names = [f"gen-a-{tag}", f"gen-b-{tag}", f"gen-c-{tag}"]
    for i, h in enumerate(names):
        p = os.path.join(d, f"{h}.db")
        # host a runs outside any pod; b and c two pods each, c's second slowed
        fleetgen.make_trace(p, h, 3000, start, 600, seed=i, slow_from_s=400 if i == 2 else None,
                            slow_phase="prefill_ns", model="m-c" if i == 2 else "m-ab",
                            pods=[f"serve/{h}-0", f"serve/{h}-1"] if i else (), slow_pod=1 if i == 2 else None)
        r = kpitest.run([SHIP, "--db", p, "--to", url, "--once"])
        assert r.returncode == 0, r.stdout + r.stderr
        assert "3000" in r.stdout and "0 rows behind" in r.stdout, r.stdout
        # a second --once resends nothing: the cursor is in the trace
        r = kpitest.run([SHIP, "--db", p, "--to", url, "--once"])
        assert "0 rows shipped" in r.stdout, r.stdout
    s0 = start // 10**9
    r = kpitest.run([REPORT, "--db", url, "--from", f"@{s0 + 400}", "--to", f"@{s0 + 600}",
                     "--baseline", f"@{s0}..@{s0 + 400}"])
    assert r.returncode == 0, r.stderr
    m = re.search(r"\*\*Host (\S+) carries (\d+)% of the p99 TTFT increase .*?, most of it in ([a-z -]+); "
                  r"model (\S+) (\d+)%; pod (\S+) (\d+)%, most of it in ([a-z -]+)\.", r.stdout)
    assert m, r.stdout[:3000]
    assert (m.group(1), m.group(3).strip(), m.group(4)) == (names[2], "prefill", "m-c"), m.group(0)
    assert int(m.group(2)) >= 90, m.group(0)
    # the pod: the slowed one of c's two, in its phase; the table lists every
    # pod (and the host outside any), their shares adding up to 100%
    assert (m.group(6), m.group(8).strip()) == (f"serve/{names[2]}-1", "prefill"), m.group(0)
    assert int(m.group(7)) >= 90, m.group(0)
    pods = dict(re.findall(r"^\| (serve/\S+|\(none\)) \| \d+ → \d+ \| \S+ → \S+ \| \S+ \| (\d+)% \|", r.stdout,
                           re.M))
    want = {"(none)"} | {f"serve/{h}-{k}" for h in names[1:] for k in (0, 1)}
    assert set(pods) == want, (pods, r.stdout[-3000:])
    assert 99 <= sum(map(int, pods.values())) <= 101, pods
    assert "9000 requests of 3 hosts" in r.stdout, r.stdout[:1500]
    # the same from the per-minute aggregates alone: the host, its phase, and
    # every host's p99 within the buckets' 1 % (+ rounding) of its rows' exact p99
    m = re.search(r"\*\*From the aggregates: host (\S+)'s p99 TTFT changed most, \S+ → \S+, most of it in "
                  r"([a-z -]+)\.\*\*", r.stdout)
    assert m and (m.group(1), m.group(2)) == (names[2], "prefill"), r.stdout[-3000:]
    alpha = cht.lhist_layout()[0]
    wins = [(-(-s0 // 60) * 60, (s0 + 400) // 60 * 60), (-(-(s0 + 400) // 60) * 60, (s0 + 600) // 60 * 60)]
    for h in names:
        row = re.search(rf"^\| {re.escape(h)} \| \d+ → \d+ \| (\S+) → (\S+) \|", r.stdout, re.M)
        assert row, (h, r.stdout[-2000:])
        con = sqlite3.connect(os.path.join(d, f"{h}.db"))
        for shown, (f, t) in zip(row.groups(), wins):
            vals = [v for (v,) in con.execute("SELECT ttft_ns FROM requests WHERE ttft_ns IS NOT NULL AND "
                                              "ifnull(http_status, 0) != 429 AND wall_ns >= ? AND wall_ns < ?",
                                              (f * 10**9, t * 10**9))]
            exact = tracetest.pct(vals, 99)
            assert abs(tracetest.parse_dur(shown) - exact) <= (alpha + 0.006) * exact, (h, shown, exact)
        con.close()
    # --host narrows to one host: the others' rows are not read
    r = kpitest.run([REPORT, "--db", url, "--host", names[0]])
    assert r.returncode == 0 and "3000 requests of 1 hosts" in r.stdout, r.stdout[:1500] + r.stderr
    # a wrong address says what to do
    r = kpitest.run([REPORT, "--db", f"clickhouse://127.0.0.1:{kpitest.free_port()}/synth"])
    assert r.returncode == 1 and "is clickhouse-server running there" in r.stderr, r.stderr


def test_ship_inferred_split_stays_inferred():
    """A trace whose http rows have their split inferred from stream timing
    (split_rule) shipped and read back through the fleet: ClickHouse holds
    every rule, and kpi-report over clickhouse:// counts the rows as
    'http (split inferred)' and names their queue wait as inferred, as it does
    on the SQLite trace (without the column they would read as http rows of
    unknown split that nonetheless hold a queue)."""
    for b in (SHIP, REPORT):
        at.require_built(b)
    cluster = cht.shared_cluster()
    url = cluster.database("split")
    d = kpitest.tmpdir("kpi-ship-split-")
    host = f"inferred-{os.getpid()}"
    p = os.path.join(d, "inferred.db")
    tracetest.generate(p, duration_s=900, rate=5, incidents=[tracetest.Incident("queue", 600, 660)],
                       source="inferred")
    r = kpitest.run([SHIP, "--db", p, "--to", url, "--once", "--host", host])
    assert r.returncode == 0 and "0 rows behind" in r.stdout, r.stdout + r.stderr
    with sqlite3.connect(p) as c:
        want = c.execute("SELECT count(*), count(split_rule), sum(step_ns) FROM requests").fetchone()
    got = cluster.rows(f"SELECT count() AS n, count(split_rule) AS r, sum(step_ns) AS s "
                       f"FROM split.requests FINAL WHERE host = '{host}'")[0]
    assert [int(got[k]) for k in "nrs"] == list(want) and want[1] > 0, (got, want)
    s0 = tracetest.WALL0 // 10**9
    args = ["--from", f"@{s0 + 600}", "--to", f"@{s0 + 660}"]
    local = kpitest.run([REPORT, "--db", p, *args])
    fleet = kpitest.run([REPORT, "--db", url, "--host", host, "--window", "20m", *args])
    for out in (local, fleet):
        assert out.returncode == 0, out.stderr
        assert re.search(r"^- \*\*Sources\*\*: incident http \(split inferred\) \(\d+\);", out.stdout,
                         re.M), out.stdout[:3000]
        assert "is queue wait (inferred)" in out.stdout, out.stdout[:3000]


def test_ship_alert_rules_promtool():
    """promtool checks the rules and passes their unit tests; a copy with a
    wrong threshold fails them."""
    if not os.access(PROMTOOL, os.X_OK):
        raise kpitest.Skip("promtool is not installed (run make deps: Debian package prometheus)")
    rules = os.path.join(RULES, "kpiscope-alerts.yml")
    tests = os.path.join(RULES, "kpiscope-alerts.test.yml")
    r = kpitest.run([PROMTOOL, "check", "rules", rules])
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr
    r = kpitest.run([PROMTOOL, "test", "rules", tests])
    assert r.returncode == 0, r.stdout + r.stderr
    d = kpitest.tmpdir("kpi-rules-")
    shutil.copy(tests, d)
    text = open(rules).read()
    wrong = text.replace("rate(gen_ai_server_time_to_first_token_seconds_bucket[5m]))) > 1\n",
                         "rate(gen_ai_server_time_to_first_token_seconds_bucket[5m]))) > 3\n")
    assert wrong != text
    with open(os.path.join(d, "kpiscope-alerts.yml"), "w") as f:
        f.write(wrong)
    r = kpitest.run([PROMTOOL, "test", "rules", os.path.join(d, "kpiscope-alerts.test.yml")])
    assert r.returncode != 0 and "KpiTtftP99OverSlo" in r.stdout + r.stderr, r.stdout + r.stderr


def _sse_server(gap_ms):
    """tests/lib/sse_server.py pausing gap_ms before each event: a server
    whose latency is what the test says, whatever the machine's load does
    to a model's compute."""
    port = kpitest.free_port()
    p = kpitest.Proc([sys.executable, SSE_SERVER, str(port), "--gap-ms", str(gap_ms)])
    p.wait_line("listening on")
    kpitest.on_cleanup(p.stop)
    return f"http://127.0.0.1:{port}"


@kpitest.alone
def test_ship_bench_baseline_gate():
    """kpi-bench --baseline with three runs of the baseline: an equal run
    passes, a run against the server made 2x slower on purpose fails with
    exit 3 and says what moved, at the default thresholds; p99 of 60
    requests is shown but not gated; an old baseline without intervals and
    an unreadable one."""
    at.require_built(BENCH)
    fast, slow = _sse_server(20), _sse_server(40)
    d = kpitest.tmpdir("kpi-bench-base-")
    common = ["--requests", "60", "--max-tokens", "4", "--concurrency", "2", "--slo", "ttft=2000", "--quiet"]
    # the baseline: three runs of the same build, whose spread counts as noise (docs/bench.md)
    bases = []
    for k in range(3):
        path = os.path.join(d, f"base{k}.json")
        r = kpitest.run([BENCH, "--url", fast, *common, "--json", path])
        assert r.returncode == 0, r.stderr
        bases += ["--baseline", path]
    with open(path) as f:
        js = json.load(f)
    lo, hi = js["ttft_ms"]["p50_ci"]
    assert lo <= js["ttft_ms"]["p50"] <= hi and js["ttft_ms"]["p99_ci"] is None, js["ttft_ms"]
    r = kpitest.run([BENCH, "--url", fast, *common, *bases])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no regression past the thresholds" in r.stdout and "WORSE" not in r.stdout, r.stdout
    assert re.search(r"TTFT p99 ms .* not gated: p99 needs 368 values in each run \(60, 60\)", r.stdout), r.stdout
    r = kpitest.run([BENCH, "--url", slow, *common, *bases])
    assert r.returncode == 3, r.stdout + r.stderr
    assert re.search(r"TTFT p50 ms .* WORSE", r.stdout) and "regression:" in r.stdout, r.stdout
    # a baseline written before kpi-bench kept intervals: compared by its value
    for m in ("ttft_ms", "tpot_ms", "e2e_ms", "itl_ms"):
        for k in ("p50_ci", "p90_ci", "p99_ci"):
            js[m].pop(k, None)
    old = os.path.join(d, "old.json")
    with open(old, "w") as f:
        json.dump(js, f)
    r = kpitest.run([BENCH, "--url", slow, *common, "--baseline", old])
    assert r.returncode == 3 and re.search(r"TTFT p50 ms +\d+\.\d+ +\d.* WORSE", r.stdout), r.stdout
    r = kpitest.run([BENCH, "--url", fast, "--requests", "1", "--baseline", os.path.join(d, "none.json")])
    assert r.returncode == 1 and "--baseline" in r.stderr, r.stderr
