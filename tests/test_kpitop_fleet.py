"""kpitop's fleet view (kpitop --db clickhouse://...): generated traces of
several hosts shipped by kpi-ship to a two-shard ClickHouse (two
clickhouse-server processes); every host row kpitop shows equals the same
question asked of that host's SQLite trace, a batch shipped twice counts once,
and the interactive screen (keys, replay, live refresh) under tmux."""
import os, re, sqlite3, sys, time

sys.path.insert(0, os.path.dirname(__file__) + "/lib")
import kpitest, tracetest  # noqa: E402
import clickhousetest as cht  # noqa: E402
import fleetgen  # noqa: E402
from tracetest import KPITOP, run_tool  # noqa: E402
from tmuxtest import Tmux  # noqa: E402

# tests/run.py runs these beside other tests, but those marked alone: none
# of them times anything or counts what the whole host did.
CONCURRENT = True
# One ClickHouse cluster for the modules that name this fixture (one process).
FIXTURE = "clickhouse"

ROW = re.compile(r"^ (\S+)\s+(\d+\.\d)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\S+)(?:\s+(\S+?)(, \.\.\.)?)?$")
WIN = re.compile(r"^window \[(\d+), (\d+)\) wall ns; (\d+) hosts, (\d+) requests")
LOOKBACK_NS = 15 * 60 * 10**9      # KT_FLEET_LOOKBACK_NS
ALPHA = cht.lhist_layout()[0]


def once(url, *args):
    return tracetest.kpitop_once(url, "--width", "140", "--rows", "40", *args)


def parse(out):
    """The host rows and the window line of a fleet frame."""
    rows, win = {}, None
    for line in out.splitlines():
        m = ROW.match(line)
        if m and m.group(1) != "HOST":
            rows[m.group(1)] = m.groups()
        m = WIN.match(line)
        if m:
            win = tuple(int(x) for x in m.groups())
    assert win, f"no window line in:\n{out}"
    return rows, win


def expected(trace, frm, to):
    """The fleet view's question asked of one host's SQLite trace: the rows
    that arrived in [frm, to) (wall ns), counted and percentiled as kpitop
    counts one trace's window."""
    db = sqlite3.connect(f"file:{trace}?mode=ro", uri=True)
    rows = db.execute("SELECT http_status, finish_reason, ttft_ns, tpot_ns, wall_ns FROM requests "
                      "WHERE wall_ns >= ? AND wall_ns < ?", (frm, to)).fetchall()
    ok = [r for r in rows if r[0] != 429]
    losses = db.execute("SELECT cause, sum(n) AS k FROM losses WHERE wall_ns >= ? AND wall_ns < ? "
                        "GROUP BY cause ORDER BY k DESC, cause", (frm, to)).fetchall()
    last = max([r[4] for r in rows] + [db.execute("SELECT coalesce(max(wall_ns), 0) FROM samples WHERE wall_ns >= ? "
                                                   "AND wall_ns < ?", (to - LOOKBACK_NS, to)).fetchone()[0]])
    db.close()
    ttft = [r[2] for r in ok if r[2] is not None]
    tpot = [r[3] for r in ok if r[3] is not None]
    pct = lambda v, p: tracetest.pct(v, p) if v else None  # noqa: E731
    return {"rate": len(rows) / ((to - frm) / 1e9), "requests": len(rows),
            "ttft": (pct(ttft, 50), pct(ttft, 99)), "tpot": (pct(tpot, 50), pct(tpot, 99)),
            "errors": sum(1 for r in ok if (r[0] or 0) >= 400 or r[1] == "error"),
            "rejected": len(rows) - len(ok), "lost": sum(k for _, k in losses),
            "cause": losses[0][0] if losses else None, "last": last}


def _close(shown, exact, buckets):
    """A shown percentile against the exact one: kpitop's rounding (3
    significant digits), plus the buckets' stated error (schema/lhist.h)."""
    if not buckets or shown is None or exact is None:
        return tracetest.close_to(shown, exact)
    return abs(shown - exact) <= (ALPHA + 0.006) * abs(exact) + 1e3


def check_frame(out, traces):
    """Every host row of a frame equals its trace's answer; returns the rows."""
    rows, (frm, to, nhosts, nreq) = parse(out)
    # request_minutes is there (kpi-ship ships it): percentiles from its buckets
    buckets = "percentiles from per-minute buckets, within 1 % of the exact ones" in out
    assert buckets, out
    want = {h: expected(t, frm, to) for h, t in traces.items()}
    want = {h: w for h, w in want.items() if w["requests"] or w["lost"] or w["last"]}
    assert set(rows) == set(want), f"hosts shown {sorted(rows)}, with rows {sorted(want)}:\n{out}"
    assert nhosts == len(want) and nreq == sum(w["requests"] for w in want.values()), (nhosts, nreq, out)
    for h, r in rows.items():
        w = want[h]
        what = f"host {h} in [{frm}, {to}):\n{out}"
        assert abs(float(r[1]) - w["rate"]) <= 0.05 + 1e-9, f"req/s {r[1]} vs {w['rate']}: {what}"
        assert int(r[2]) == w["requests"], f"requests {r[2]} vs {w['requests']}: {what}"
        for k, (shown, exact) in enumerate(zip(r[3:7], w["ttft"] + w["tpot"])):
            assert _close(tracetest.parse_dur(shown), exact, buckets), f"column {k}: {shown} vs {exact}: {what}"
        assert (int(r[7]), int(r[8]), int(r[9])) == (w["errors"], w["rejected"], w["lost"]), (r[7:10], w, what)
        assert r[11] == w["cause"], f"largest loss cause {r[11]} vs {w['cause']}: {what}"
        tenths = (to - w["last"]) // 10**8
        assert r[10] == f"{tenths / 10:.1f}s", f"LAST {r[10]} vs {(to - w['last']) / 1e9:.3f}s: {what}"
    return rows


def _fleet(cluster, db, d, start, n=3000, span=600):
    """Four hosts: one with 429s and errors, one with losses of two causes,
    one slowed in its last 200 s, one whose agent served nothing (samples
    only); each trace shipped with kpi-ship --once."""
    url = cluster.database(db)
    tag = os.getpid()
    spec = {f"err-{tag}": dict(reject_every=7, error_every=11),
            f"lossy-{tag}": dict(losses=[(s, "ringbuf_drops", 3) for s in range(0, span, 5)] +
                                 [(s, "orphans", 1) for s in range(0, span, 13)]),
            f"slow-{tag}": dict(slow_from_s=span - 200, slow_phase="prefill_ns"),
            f"idle-{tag}": dict()}
    traces = {}
    for i, (h, kw) in enumerate(spec.items()):
        p = os.path.join(d, f"{h}.db")
        fleetgen.make_trace(p, h, 0 if h.startswith("idle") else n, start, span, seed=i, **kw)
        cht.ship_once(p, url)
        traces[h] = p
    return url, traces


def test_kpitop_fleet_rows_equal_the_traces():
    """Replayed windows (10 s, 1 m, 5 m, one that holds the slowdown's start)
    and the live one: every host's rate, TTFT/TPOT p50/p99, errors, 429s,
    losses and age equal the same question asked of its SQLite trace."""
    cht.require()
    cluster = cht.shared_cluster()
    d = kpitest.tmpdir("kpitop-fleet-")
    start = (time.time_ns() // 10**9 - 3600) * 10**9
    url, traces = _fleet(cluster, "kt_rows", d, start)
    s0 = start // 10**9
    for at, window in ((s0 + 100, "10s"), (s0 + 300, "1m"), (s0 + 450, "5m"), (s0 + 601, "5m")):
        check_frame(once(url, "--at", f"@{at}", "--window", window), traces)
    # relative to the start: the fleet's oldest row, found from the aggregates'
    # first minute and the rows before its end (not every row), exactly
    first = None
    for p in traces.values():
        con = sqlite3.connect(p)
        for (t,) in con.execute("SELECT min(wall_ns) FROM requests UNION ALL SELECT min(wall_ns) FROM samples"):
            first = t if first is None or (t is not None and t < first) else first
        con.close()
    _, (frm, to, _, _) = parse(once(url, "--at", "+100s", "--window", "10s"))
    assert to == first + 100 * 10**9, (to, first)
    out = once(url, "--window", "1m")
    rows = check_frame(out, traces)
    # live: the window ends at the newest row shipped (the last sample, at 600 s)
    _, (frm, to, _, _) = parse(out)
    assert to == start + 600 * 10**9 + 1, (to, start)
    # sorted by p99 TTFT, the slowed host first; the idle one last, with no percentile
    names = [l.split()[0] for l in out.splitlines() if ROW.match(l)]
    assert names[0].startswith("slow-") and names[-1].startswith("idle-"), names
    assert rows[names[-1]][3] == "-" and rows[names[-1]][2] == "0", rows[names[-1]]
    assert "hosts 4 (1 idle)" in out, out
    # the fleet line: every host's requests and losses together
    w = [expected(t, frm, to) for t in traces.values()]
    m = re.search(r"requests (\d+)\s+429s (\d+)\s+errors (\d+)\s+lost (\d+) \((\w+), \.\.\.\)", out)
    assert m and [int(x) for x in m.groups()[:4]] == [sum(x["requests"] for x in w), sum(x["rejected"] for x in w),
                                                      sum(x["errors"] for x in w), sum(x["lost"] for x in w)], out
    assert m.group(5) == "ringbuf_drops", out


def test_kpitop_fleet_batch_shipped_twice_counts_once():
    """A trace shipped again from the start (its cursor removed: a kpi-ship
    killed before it moved its cursor, repeated for every batch) holds every
    row twice in ClickHouse until its parts merge; kpitop's rows do not
    change (FINAL)."""
    cht.require()
    cluster = cht.shared_cluster()
    d = kpitest.tmpdir("kpitop-fleet-twice-")
    start = (time.time_ns() // 10**9 - 3600) * 10**9
    url, traces = _fleet(cluster, "kt_twice", d, start, n=1000, span=200)
    before = once(url, "--window", "5m")
    h, p = next((h, p) for h, p in traces.items() if h.startswith("err-"))
    c = sqlite3.connect(p)
    c.execute("DELETE FROM ship_cursor")
    c.commit()
    c.close()
    # no merge may collapse the copies before kpitop reads them
    tables = ("requests_local", "samples_local", "losses_local")
    for n in cluster.nodes:
        for t in tables:
            n.query(f"SYSTEM STOP MERGES kt_twice.{t}")
    try:
        cht.ship_once(p, url, "--batch", "100")
        count = f"SELECT count() FROM kt_twice.requests WHERE host = '{h}'"
        assert int(cluster.query(count)) == 2000, cluster.query(count)
        after = once(url, "--window", "5m")
        assert int(cluster.query(count)) == 2000, "the copies merged while kpitop read"
    finally:
        for n in cluster.nodes:
            for t in tables:
                n.query(f"SYSTEM START MERGES kt_twice.{t}")
    assert parse(after)[0] == parse(before)[0], f"{before}\n{after}"
    check_frame(after, traces)


def test_kpitop_fleet_refusals():
    """A server that is not there, a database without the tables, and the
    flags that read one trace only: each says what to do."""
    tracetest.require(KPITOP, "tools/kpitop/")
    cht.require()
    p = run_tool([KPITOP, "--db", f"clickhouse://127.0.0.1:{kpitest.free_port()}/kpiscope", "--once"])
    assert p.returncode == 1 and "is clickhouse-server running there?" in p.stderr, p.stderr
    cluster = cht.shared_cluster()
    cluster.query("CREATE DATABASE IF NOT EXISTS kt_empty")
    p = run_tool([KPITOP, "--db", cluster.url.rsplit("/", 1)[0] + "/kt_empty", "--once"])
    assert p.returncode == 1 and "create them from schema/clickhouse/" in p.stderr, p.stderr
    p = run_tool([KPITOP, "--db", "clickhouse://127.0.0.1:8123/no-such;db", "--once"])
    assert p.returncode == 1 and "letters, digits and '_'" in p.stderr, p.stderr
    p = run_tool([KPITOP, "--db", cluster.url, "--once", "--hops", "x"])
    assert p.returncode == 2 and "--hops reads one host's trace" in p.stderr, p.stderr
    p = run_tool([KPITOP, "--db", cluster.url, "--once", "--at", "yesterday"])
    assert p.returncode == 2 and "--at" in p.stderr, p.stderr


def test_kpitop_fleet_interactive_live_keys_replay():
    """Under tmux: the live fleet screen takes a host that starts shipping
    while it runs; s sorts, / filters, 1/2/3 change the window, ← replays
    and → comes back to live, h helps; a shard that stops leaves the last
    frame with the reason; q exits with the terminal restored."""
    tracetest.require(KPITOP, "tools/kpitop/")
    cht.require()
    cluster = cht.shared_cluster()
    d = kpitest.tmpdir("kpitop-fleet-tmux-")
    start = (time.time_ns() // 10**9 - 600) * 10**9
    url, traces = _fleet(cluster, "kt_tmux", d, start, n=1000, span=300)
    t = Tmux([KPITOP, "--db", url, "--interval", "200"], w=140)
    s = t.wait(lambda s: "HOST" in s and " live " in s and "slow-" in s, "the live fleet screen", timeout=20)
    assert "sort: TTFT p99" in s, s
    # a fifth host ships while kpitop runs: its row appears, the window moves on to its rows
    late = f"late-{os.getpid()}"
    p = os.path.join(d, "late.db")
    fleetgen.make_trace(p, late, 300, start + 200 * 10**9, 300, seed=9)
    cht.ship_once(p, url)
    s = t.wait(lambda s: late in s and "hosts 5" in s, "the host shipped while kpitop ran", timeout=20)
    # sort and filter
    t.keys("s")
    t.wait(lambda s: "sort: TTFT p50" in s, "sorted by p50 TTFT")
    t.keys("/")
    t.wait(lambda s: "filter (host name" in s, "the filter prompt")
    t.keys("lossy", "Enter")
    s = t.wait(lambda s: "filter: lossy" in s, "the filter applied")
    shown = [l.split()[0] for l in s.splitlines() if ROW.match(l)]
    assert shown == [f"lossy-{os.getpid()}"], shown
    t.keys("/", "Escape")
    t.wait(lambda s: "filter:" not in s and late in s, "the filter cleared")
    # windows, replay and back
    t.keys("3")
    t.wait(lambda s: "window 5m00s" in s, "the 5m window")
    t.keys("1")
    t.wait(lambda s: "window 10s" in s, "the 10s window")
    span = re.compile(r"window 10s\s+(\d\d:\d\d:\d\d) → (\d\d:\d\d:\d\d)")
    end0 = span.search(t.wait(lambda s: span.search(s), "the 10s window's span")).group(2)
    t.keys("Left")
    s = t.wait(lambda s: "replay" in s and span.search(s), "replay mode")
    assert span.search(s).group(2) < end0, (end0, s)
    t.keys("Right", "Right")
    t.wait(lambda s: " live " in s, "back to live")
    t.keys("h")
    t.wait(lambda s: "fleet view" in s and "sort the hosts" in s, "the fleet help")
    t.keys("x")
    t.wait(lambda s: "HOST" in s, "the screen after help")
    # a shard goes away: the last frame stays, the status line says why (the
    # cluster's next user starts it again)
    cluster.nodes[1].stop()
    s = t.wait(lambda s: "showing the last frame" in s, "the failure on the status line", timeout=30)
    assert late in s and "HOST" in s, s
    t.keys("q")
    t.wait(lambda s: "EXITED 0" in s and "HOST" not in s, "exit 0 and a restored terminal")


test_kpitop_fleet_interactive_live_keys_replay.timeout = 180
