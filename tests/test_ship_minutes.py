"""kpi-ship's per-minute aggregates (schema/clickhouse/003_minutes.sql) on
hostile input, against a real two-shard ClickHouse: a trace whose wall clock
jumps an hour ahead and then two back, a minute with no request and one with
only 429s; rows that arrive for minutes already shipped ship them again with a
higher version; every minute is counted once and its counts are the raw rows';
every p99 from the buckets is within the stated error of the rows' exact p99."""
import os, re, sqlite3

import kpitest
import agenttest as at
import clickhousetest as cht
import tracetest

CONCURRENT = True
FIXTURE = "clickhouse"

SHIP = os.path.join(kpitest.BIN, "kpi-ship")
MIN = 60 * 10**9


def _ship(url, p, host):
    r = kpitest.run([SHIP, "--db", p, "--to", url, "--once", "--host", host])
    assert r.returncode == 0 and "0 rows behind" in r.stdout, r.stdout + r.stderr
    return r.stdout.strip().splitlines()[-1]


def test_ship_minutes_hostile_clock_empty_minute_late_rows():
    at.require_built(SHIP)
    cluster = cht.shared_cluster()
    url = cluster.database("mins")
    d = kpitest.tmpdir("kpi-ship-mins-")
    host = f"mins-{os.getpid()}"
    p = os.path.join(d, "mins.db")
    tracetest.generate(p, duration_s=300, rate=8, source="mixed").close()
    with sqlite3.connect(p) as c:
        w0 = c.execute("SELECT min(wall_ns) FROM requests").fetchone()[0]
        m0 = w0 // MIN * MIN
        # minute 2 has no request; minute 3 only 429s (no TTFT, no phases)
        c.execute("DELETE FROM requests WHERE wall_ns >= ? AND wall_ns < ?", (m0 + 2 * MIN, m0 + 3 * MIN))
        c.execute("UPDATE requests SET http_status = 429, ttft_ns = NULL, tpot_ns = NULL, e2e_ns = NULL, "
                  "finish_reason = NULL, reject_reason = 'queue_full' WHERE wall_ns >= ? AND wall_ns < ?",
                  (m0 + 3 * MIN, m0 + 4 * MIN))
        # the clock jumps: the rows after minute 4 an hour ahead, the last 40 two hours back
        c.execute("UPDATE requests SET wall_ns = wall_ns + 3600000000000 WHERE wall_ns >= ?", (m0 + 4 * MIN,))
        c.execute("UPDATE requests SET wall_ns = wall_ns - 7200000000000 WHERE rowid > "
                  "(SELECT max(rowid) - 40 FROM requests)")
    line = _ship(url, p, host)
    n = cht.minutes_once(cluster, p, host, "mins")
    assert n >= 6, n
    rows = cluster.rows(f"SELECT minute, sum(requests) AS n, sum(rejected) AS r, max(length(ttft)) AS l "
                        f"FROM mins.request_minutes FINAL WHERE host = '{host}' GROUP BY minute")
    by_minute = {int(r["minute"]): r for r in rows}
    assert (m0 + 2 * MIN) // 10**9 not in by_minute, "a minute with no request has no aggregate row"
    only429 = by_minute[(m0 + 3 * MIN) // 10**9]
    assert int(only429["n"]) == int(only429["r"]) > 0 and int(only429["l"]) == 0, only429
    assert "0 minutes again" in line, line

    # rows that come after their minute was shipped (a late flush): the
    # minute goes again, with a higher version, and still counts once
    with sqlite3.connect(p) as c:
        cols = [r[1] for r in c.execute("PRAGMA table_info(requests)")]
        sel = ", ".join("request_id || '-late'" if k == "request_id" else k for k in cols)
        c.execute(f"INSERT INTO requests ({', '.join(cols)}) SELECT {sel} FROM requests "
                  f"WHERE wall_ns >= ? AND wall_ns < ? LIMIT 5", (m0 + MIN, m0 + 2 * MIN))
    line = _ship(url, p, host)
    assert re.search(r"and 1 minutes \(\d+ request_minutes rows, 1 minutes again\)", line), line
    cht.minutes_once(cluster, p, host, "mins")
    v = cluster.rows(f"SELECT max(version) AS v FROM mins.request_minutes FINAL WHERE host = '{host}' "
                     f"AND minute = {(m0 + MIN) // 10**9}")
    assert int(v[0]["v"]) == 2, v

    # p99 TTFT and TPOT from the buckets, per minute and over the trace,
    # against the exact p99 of the same rows
    alpha = cht.lhist_layout()[0]
    con = sqlite3.connect(p)
    checked = 0
    for col, arr in (("ttft_ns", "ttft"), ("tpot_ns", "tpot"), ("e2e_ns", "e2e")):
        got = cluster.rows(f"SELECT minute, sumForEach({arr}) AS h FROM mins.request_minutes FINAL "
                           f"WHERE host = '{host}' GROUP BY minute")
        got += cluster.rows(f"SELECT 0 AS minute, sumForEach({arr}) AS h FROM mins.request_minutes FINAL "
                            f"WHERE host = '{host}'")     # the whole trace
        for r in got:
            h = [int(x) for x in r["h"]]
            if not sum(h):
                continue
            m = int(r["minute"])
            where = "" if m == 0 else f"AND wall_ns >= {m * 10**9} AND wall_ns < {m * 10**9 + MIN}"
            vals = [x for (x,) in con.execute(f"SELECT {col} FROM requests WHERE {col} IS NOT NULL AND "
                                              f"ifnull(http_status, 0) != 429 {where}")]
            assert len(vals) == sum(h), (col, m, len(vals), sum(h))
            exact, est = tracetest.pct(vals, 99), cht.lhist_quantile(h, 99)
            assert abs(est - exact) <= alpha * exact + 1e-9 * exact, (col, m, exact, est)
            checked += 1
    con.close()
    assert checked == 3 * n, (checked, n)   # every minute but the 429s', and the whole trace


def test_ship_minutes_of_a_trace_past_one_mark():
    """A trace of more rows than kpi-ship marks in two transactions (100,000
    each), shipped with --once --minutes-only: every minute of it is in ClickHouse,
    counted as the trace counts it (the 10 M-request bench found 1 M-row traces
    shipped with the minutes of their first 200,000 rows alone: --once stopped
    once the marked minutes were out, with rows still unmarked)."""
    at.require_built(SHIP)
    cluster = cht.shared_cluster()
    url = cluster.database("mins")
    d = kpitest.tmpdir("kpi-ship-mark-")
    host = f"mark-{os.getpid()}"
    p = os.path.join(d, "big.db")
    tracetest.generate(p, duration_s=520, rate=480, steps=False, inflight=0).close()
    with sqlite3.connect(p) as c:
        total = c.execute("SELECT count(*) FROM requests").fetchone()[0]
    assert total > 210000, total
    r = kpitest.run([SHIP, "--db", p, "--to", url, "--once", "--minutes-only", "--host", host], timeout=300)
    assert r.returncode == 0 and "0 rows behind" in r.stdout, r.stdout + r.stderr
    n = cht.minutes_once(cluster, p, host, "mins")
    got = cluster.rows(f"SELECT sum(requests) AS n FROM mins.request_minutes FINAL WHERE host = '{host}'")
    assert int(got[0]["n"]) == total, (got, total)
    print(f"     {total} rows, {n} minutes, every one shipped once: {r.stdout.strip().splitlines()[-1]}")
