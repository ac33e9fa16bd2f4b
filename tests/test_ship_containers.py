"""The container and pod of a row (schema v13, issue 42) shipped to ClickHouse
by kpi-ship and read back: ClickHouse's tables carry the columns (before they
were skipped on insert as unknown), NULL where the trace has NULL."""
import os, sqlite3

import kpitest
import agenttest as at
import clickhousetest as cht

# tests/run.py runs these beside other tests, but those marked alone: none
# of them times anything or counts what the whole host did.
CONCURRENT = True
# One ClickHouse cluster for the modules that name this fixture (one process).
FIXTURE = "clickhouse"

SHIP = os.path.join(kpitest.BIN, "kpi-ship")
POD_UID = "0b6f4a3c-2d1e-4f5a-9b8c-7d6e5f4a3b2c"


def test_ship_carries_container_and_pod():
    import tracetest
    at.require_built(SHIP)
    cluster = cht.shared_cluster()
    url = cluster.database("ctr")
    d = kpitest.tmpdir("kpi-ship-ctr-")
    host = f"pods-{os.getpid()}"
    p = os.path.join(d, "pods.db")
    tracetest.generate(p, duration_s=120, rate=5, source="mixed").close()   # "mixed": the newest schema
    with sqlite3.connect(p) as c:
        c.execute("UPDATE requests SET container_id = ?, container_name = 'engine', pod_name = 'llm-0', "
                  "pod_namespace = 'serving', pod_uid = ?, cgroup_id = 4242 WHERE rowid % 2 = 0",
                  ("ab" * 32, POD_UID))
        want = c.execute("SELECT count(*), count(pod_name), sum(cgroup_id) FROM requests").fetchone()
    assert want[1] > 0, want
    r = kpitest.run([SHIP, "--db", p, "--to", url, "--once", "--host", host])
    assert r.returncode == 0 and "0 rows behind" in r.stdout, r.stdout + r.stderr
    got = cluster.rows(f"SELECT count() AS n, count(pod_name) AS p, sum(cgroup_id) AS g "
                       f"FROM ctr.requests FINAL WHERE host = '{host}'")[0]
    assert [int(got[k]) for k in "npg"] == list(want), (got, want)
    names = cluster.rows(f"SELECT DISTINCT container_id AS c, container_name AS n, pod_namespace AS ns, "
                         f"pod_name AS p, pod_uid AS u FROM ctr.requests FINAL WHERE host = '{host}' "
                         f"AND pod_name IS NOT NULL")
    assert names == [{"c": "ab" * 32, "n": "engine", "ns": "serving", "p": "llm-0", "u": POD_UID}], names
