"""Every column of the trace tables kpi-ship ships is a column of ClickHouse's
(schema/clickhouse/001_tables.sql): the DDL is compared with a trace migrated
to the newest schema (fails the day a schema/NNN_*.sql adds a column
ClickHouse lacks: kpi-ship would skip it on insert without a word), and a
trace with every column filled is shipped and read back column by column."""
import os, re, sqlite3

import kpitest
import agenttest as at
import clickhousetest as cht
import tracetest

CONCURRENT = True
FIXTURE = "clickhouse"

SHIP = os.path.join(kpitest.BIN, "kpi-ship")
SHIPPED = ("requests", "exchanges_out", "steps", "samples", "losses")   # tools/kpi-ship/ship.c
CH_TYPE = {"INTEGER": "Int64", "TEXT": "String", "REAL": "Float64"}


def _trace_columns():
    db = sqlite3.connect(":memory:")
    db.executescript(open(tracetest.SCHEMA).read())
    tracetest.migrate(db)
    return {t: [(r[1], r[2]) for r in db.execute(f"PRAGMA table_info({t})")] for t in SHIPPED}


def _ch_columns():
    out = {}
    for st in cht.ddl_statements(os.path.join(cht.DDL, "001_tables.sql")):
        m = re.match(r"CREATE TABLE IF NOT EXISTS \{db\}\.(\w+)_local \((.*)\)\s*ENGINE", st, re.S)
        if m:
            out[m.group(1)] = dict(l.strip().split(None, 1) for l in m.group(2).split(",\n") if l.strip())
    return out


def test_clickhouse_has_every_trace_column():
    ch = _ch_columns()
    missing, wrong = [], []
    for t, cols in _trace_columns().items():
        assert t in ch, f"schema/clickhouse/001_tables.sql has no {t}_local"
        for name, ty in cols:
            if name not in ch[t]:
                missing.append(f"{t}.{name} {ty}")
            elif CH_TYPE[ty] not in ch[t][name]:
                wrong.append(f"{t}.{name}: SQLite {ty}, ClickHouse {ch[t][name]}")
    assert not missing, ("add these columns to schema/clickhouse/001_tables.sql (and an ALTER TABLE line for "
                         "existing tables, docs/fleet.md): " + ", ".join(missing))
    assert not wrong, wrong


def _fill(c, table, cols, rowid_mod):
    """Every NULL of the table's columns filled with a value of its type
    (integers from the rowid, so that sums tell rows apart)."""
    sets = []
    for name, ty in cols:
        if ty == "INTEGER":
            sets.append(f"{name} = coalesce({name}, rowid * 7 + {len(sets)})")
        elif ty == "REAL":
            sets.append(f"{name} = coalesce({name}, rowid * 0.5)")
        else:
            sets.append(f"{name} = coalesce({name}, '{name}-' || (rowid % {rowid_mod}))")
    c.execute(f"UPDATE {table} SET {', '.join(sets)}")


def _agg(n, ty, distinct):
    """A figure of a column that tells its values apart: integers summed
    modulo a prime (the marks' sums overflow), reals summed, texts counted."""
    return {"INTEGER": f"sum({n} % 1000003)", "REAL": f"sum({n})"}.get(ty, distinct.format(n))


def test_ship_carries_every_column():
    at.require_built(SHIP)
    cluster = cht.shared_cluster()
    url = cluster.database("cols")
    d = kpitest.tmpdir("kpi-ship-cols-")
    host = f"cols-{os.getpid()}"
    p = os.path.join(d, "cols.db")
    tracetest.generate(p, duration_s=20, rate=5, source="mixed").close()
    cols = _trace_columns()
    with sqlite3.connect(p) as c:
        shared = [n for n, _ in cols["exchanges_out"] if n in {m for m, _ in cols["requests"]}]
        c.execute(f"INSERT INTO exchanges_out ({', '.join(shared)}) SELECT {', '.join(shared)} FROM requests "
                  f"LIMIT 30")
        for t in ("requests", "exchanges_out"):
            _fill(c, t, cols[t], 5)
    with sqlite3.connect(p) as c:
        want = {t: c.execute("SELECT " + ", ".join(
            f"count({n}), " + _agg(n, ty, "count(DISTINCT {})") for n, ty in cols[t])
            + f" FROM {t}").fetchone() for t in ("requests", "exchanges_out")}
    assert want["requests"][0] > 50 and want["exchanges_out"][0] == 30, want
    r = kpitest.run([SHIP, "--db", p, "--to", url, "--once", "--host", host])
    assert r.returncode == 0 and "0 rows behind" in r.stdout, r.stdout + r.stderr
    for t in ("requests", "exchanges_out"):
        got = cluster.query("SELECT " + ", ".join(
            f"count({n}), " + _agg(n, ty, "uniqExact({})") for n, ty in cols[t])
            + f" FROM cols.{t} FINAL WHERE host = '{host}' FORMAT TabSeparated").split("\t")
        for i, (n, ty) in enumerate(cols[t]):
            w, g = want[t][2 * i:2 * i + 2], got[2 * i:2 * i + 2]
            if ty == "REAL":
                assert int(g[0]) == w[0] and abs(float(g[1]) - w[1]) <= 1e-6 * abs(w[1]), (t, n, w, g)
            else:
                assert [int(g[0]), int(float(g[1]))] == list(w), (t, n, w, g)
