"""The views of schema/views.sql and schema/views_split.sql in the sqlite3 CLI,
as a user runs them: measured and inferred queue and prefill in columns of
their own, checked against the rows; an older trace reads views.sql alone."""
import os, sqlite3, sys

sys.path.insert(0, os.path.dirname(__file__) + "/lib")
import kpitest, tracetest  # noqa: E402
from tracetest import run_tool  # noqa: E402

# tests/run.py runs these beside other tests, but those marked alone: none
# of them times anything or counts what the whole host did.
CONCURRENT = True

VIEWS = os.path.join(tracetest.ROOT, "schema", "views.sql")
VIEWS_SPLIT = os.path.join(tracetest.ROOT, "schema", "views_split.sql")


def sql(db, query, *reads):
    cmd = ["sqlite3", "-separator", "|"]
    for r in reads:
        cmd += ["-cmd", f".read {r}"]
    p = run_tool(cmd + [db, query])
    assert p.returncode == 0 and not p.stderr, f"{query}\n{p.stderr}"
    return [line.split("|") for line in p.stdout.splitlines()]


def num(x):
    return None if x == "" else float(x)


def test_views_keep_measured_and_inferred_apart():
    """A trace of an engine with probes and one whose split kpi-agent inferred
    (every other row), plus http rows whose split stayed unknown: each row's
    split kind, its queue and prefill in the measured or the inferred columns
    (never both), the percentile view's queue and queue_inferred counts, and
    phase shares that still add up to 1."""
    d = kpitest.tmpdir("views-test-")
    db = os.path.join(d, "mixed.db")
    tracetest.generate(db, duration_s=120, rate=10, source="mixed-inferred")
    with sqlite3.connect(db) as c:   # a third of the usdt rows: an http row of unknown split
        c.execute("UPDATE requests SET source = 'http', server_wait_ns = queue_ns + prefill_ns, "
                  "queue_ns = NULL, prefill_ns = NULL, t_sched_ns = NULL, t_first_ns = NULL "
                  "WHERE split_rule IS NULL AND rowid % 3 = 0 AND prefill_ns IS NOT NULL")
        want = dict(c.execute(
            "SELECT CASE WHEN split_rule IS NOT NULL THEN 'inferred' WHEN source = 'http' "
            "THEN 'unknown' ELSE 'measured' END, count(*) FROM requests GROUP BY 1").fetchall())
        rows = {r[0]: r[1:] for r in c.execute(
            "SELECT request_id, split_rule, queue_ns, prefill_ns, server_wait_ns, step_ns FROM requests")}
    assert set(want) == {"measured", "inferred", "unknown"}, want
    both = (VIEWS, VIEWS_SPLIT)
    got = sql(db, "SELECT request_id, split, split_rule, queue_ms, prefill_ms, queue_inferred_ms, "
              "prefill_inferred_ms, server_wait_ms, step_ms FROM request_phases_ms", *both)
    kinds = {}
    for rid, split, rule, q, p, qi, pi, sw, step in got:
        rule_r, q_r, p_r, sw_r, step_r = rows[rid]
        kinds[split] = kinds.get(split, 0) + 1
        ms = lambda ns: None if ns is None else ns / 1e6  # noqa: E731
        if split == "inferred":
            assert rule == rule_r == "step" and (num(q), num(p)) == (None, None), (rid, q, p)
            assert (num(qi), num(pi), num(step)) == (ms(q_r), ms(p_r), ms(step_r)), rid
        elif split == "measured":
            assert rule == "" and (num(qi), num(pi)) == (None, None), (rid, qi, pi)
            assert (num(q), num(p)) == (ms(q_r), ms(p_r)), rid
        else:
            assert split in ("unknown", ""), split
            assert (num(q), num(p), num(qi), num(pi)) == (None,) * 4 and num(sw) == ms(sw_r), rid
    assert kinds.get("measured") == want["measured"] and kinds.get("inferred") == want["inferred"], kinds
    assert kinds.get("unknown", 0) + kinds.get("", 0) == want["unknown"], kinds

    n = {m: 0 for m in ("queue", "queue_inferred")}
    for _, metric, cnt in sql(db, "SELECT minute_s, metric, n FROM latency_percentiles_minute", *both):
        if metric in n:
            n[metric] += int(cnt)
    with sqlite3.connect(db) as c:
        wq, wqi = c.execute("SELECT count(CASE WHEN split_rule IS NULL THEN queue_ns END), "
                            "count(CASE WHEN split_rule IS NOT NULL THEN queue_ns END) FROM requests").fetchone()
    assert n == {"queue": wq, "queue_inferred": wqi} and wq > 0 and wqi > 0, (n, wq, wqi)

    share = sql(db, "SELECT queue_share, queue_inferred_share, server_wait_share, round(net_in_share + "
                "queue_share + prefill_share + queue_inferred_share + prefill_inferred_share + "
                "server_wait_share + decode_share + net_out_share, 6) FROM phase_share", *both)[0]
    assert all(float(x) > 0 for x in share[:3]) and share[3] == "1.0", share
    for row in sql(db, "SELECT round(net_in_share + queue_share + prefill_share + queue_inferred_share + "
                   "prefill_inferred_share + server_wait_share + decode_share + net_out_share, 6) "
                   "FROM phase_share_minute", *both):
        assert row == ["1.0"], row


def test_views_read_an_older_trace():
    """views.sql alone on a version-1 trace (no source, no split_rule): every
    view answers, queue and prefill count as measured, the shares add up."""
    d = kpitest.tmpdir("views-test-")
    db = os.path.join(d, "v1.db")
    tracetest.generate(db, duration_s=60, rate=10)
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == 1
        total = c.execute("SELECT count(*), count(queue_ns) FROM requests").fetchone()
    got = sql(db, "SELECT count(*), count(queue_ms), count(queue_inferred_ms), "
              "count(CASE split WHEN 'measured' THEN 1 END) FROM request_phases_ms", VIEWS)
    assert got == [[str(total[0]), str(total[1]), "0", str(total[1])]], (got, total)
    share = sql(db, "SELECT round(net_in_share + queue_share + prefill_share + decode_share + net_out_share, 6), "
                "queue_inferred_share FROM phase_share", VIEWS)
    assert share == [["1.0", "0.0"]], share
    assert sql(db, "SELECT count(*) FROM latency_percentiles_minute WHERE metric = 'queue_inferred'",
               VIEWS) == [["0"]]
