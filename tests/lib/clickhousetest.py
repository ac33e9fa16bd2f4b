"""ClickHouse for the fleet tests: clickhouse-server processes (Debian's 18.16)
run in the foreground with a config written to a temp dir, as a cluster of
shards on loopback, the kpiscope DDL (schema/clickhouse/) applied, and a
small HTTP client for the tests' own queries."""
import atexit, json, os, shutil, signal, subprocess, tempfile, time, urllib.error, urllib.parse, urllib.request

import kpitest

SERVER = "/usr/sbin/clickhouse-server"
SHIP = os.path.join(kpitest.BIN, "kpi-ship")
DDL = os.path.join(kpitest.ROOT, "schema", "clickhouse")
CLUSTER = "kpiscope"


def require():
    if not os.access(SERVER, os.X_OK):
        raise kpitest.Skip("clickhouse-server is not installed (run make deps: Debian package clickhouse-server)")


_CONFIG = """<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><console>1</console></logger>
  <http_port>{http}</http_port>
  <tcp_port>{tcp}</tcp_port>
  <interserver_http_port>{inter}</interserver_http_port>
  <listen_host>127.0.0.1</listen_host>
  <path>{d}/data/</path>
  <tmp_path>{d}/tmp/</tmp_path>
  <user_files_path>{d}/user_files/</user_files_path>
  <format_schema_path>{d}/format_schemas/</format_schema_path>
  <users_config>{d}/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>67108864</mark_cache_size>
  <uncompressed_cache_size>67108864</uncompressed_cache_size>
  <max_concurrent_queries>32</max_concurrent_queries>
  <remote_servers>
    <{cluster}>
{shards}
    </{cluster}>
  </remote_servers>
</yandex>
"""
_SHARD = """      <shard><replica><host>127.0.0.1</host><port>{tcp}</port></replica></shard>"""
_USERS = """<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>4000000000</max_memory_usage></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip></networks>
    <profile>default</profile><quota>default</quota></default></users>
  <quotas><default></default></quotas>
</yandex>
"""


class Node:
    """One clickhouse-server: its ports fixed for its life, so that a stop and
    start (the outage tests) comes back where the shippers look."""

    def __init__(self, d, http, tcp, inter, shard_tcps):
        self.dir, self.http, self.tcp = d, http, tcp
        os.makedirs(d, exist_ok=True)
        self.config = os.path.join(d, "config.xml")
        with open(self.config, "w") as f:
            f.write(_CONFIG.format(http=http, tcp=tcp, inter=inter, d=d, cluster=CLUSTER,
                                   shards="\n".join(_SHARD.format(tcp=t) for t in shard_tcps)))
        with open(os.path.join(d, "users.xml"), "w") as f:
            f.write(_USERS)
        self.p = None
        self.log = os.path.join(d, "server.log")

    def launch(self):
        logf = open(self.log, "ab")
        self.p = subprocess.Popen([SERVER, f"--config-file={self.config}"], stdout=logf, stderr=logf,
                                  cwd=self.dir)
        logf.close()

    def start(self, timeout=180):
        """Starts it (unless launch() did) and waits until it answers. 18.16
        can take ~50 s to come back on a data directory it used before (seen
        on the 2-core development machine), hence the long limit."""
        if self.p is None:
            self.launch()
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.query("SELECT 1").strip() == "1":
                    return
            except (OSError, AssertionError):
                pass
            if self.p.poll() is not None or time.monotonic() > deadline:
                with open(self.log, errors="replace") as f:
                    tail = f.read()[-3000:]
                raise AssertionError(f"clickhouse-server on :{self.http} did not start:\n{tail}")
            time.sleep(0.2)

    def stop(self):
        if self.p and self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.p = None

    def query(self, sql, timeout=60):
        """sql over HTTP; returns the body as text (errors raise with ClickHouse's message)."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.http}/", data=sql.encode(), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.read().decode()
        except urllib.error.HTTPError as e:
            raise AssertionError(f"clickhouse :{self.http}: {e.code} {e.read().decode(errors='replace')[:800]}\n"
                                 f"query: {sql[:400]}")

    def rows(self, sql):
        """sql's result as a list of dicts (JSONEachRow)."""
        out = self.query(sql + " FORMAT JSONEachRow")
        return [json.loads(line) for line in out.splitlines() if line.strip()]


def ddl_statements(path):
    """The statements of one schema/clickhouse/*.sql file, comments removed."""
    text = "\n".join(l for l in open(path).read().splitlines() if not l.lstrip().startswith("--"))
    return [s.strip() for s in text.split(";") if s.strip()]


class Cluster:
    """n shards, one clickhouse-server each, every node with the kpiscope
    tables (local and Distributed) in database db."""

    def __init__(self, shards=2, db="kpiscope"):
        require()
        self.dir = tempfile.mkdtemp(prefix="kpi-ch-")
        self.db = db
        ports = [(kpitest.free_port(), kpitest.free_port(), kpitest.free_port()) for _ in range(shards)]
        tcps = [p[1] for p in ports]
        self.nodes = [Node(os.path.join(self.dir, f"shard{i}"), h, t, x, tcps)
                      for i, (h, t, x) in enumerate(ports)]
        for n in self.nodes:
            n.start()
        for n in self.nodes:
            apply_ddl(n, db)

    @property
    def url(self):
        """What kpi-ship and kpi-report take: the first node's HTTP interface."""
        return f"clickhouse://127.0.0.1:{self.nodes[0].http}/{self.db}"

    def database(self, name):
        """A database of its own with the kpiscope tables on every node (a
        test's rows apart from the others'); its URL."""
        for n in self.nodes:
            n.query(f"DROP DATABASE IF EXISTS {name}")
            apply_ddl(n, name)
        return f"clickhouse://127.0.0.1:{self.nodes[0].http}/{name}"

    def query(self, sql):
        return self.nodes[0].query(sql)

    def rows(self, sql):
        return self.nodes[0].rows(sql)

    def stop(self):
        for n in self.nodes:
            n.stop()

    def start(self):
        for n in self.nodes:
            n.launch()
        for n in self.nodes:
            n.start()

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def apply_ddl(node, db):
    node.query(f"CREATE DATABASE IF NOT EXISTS {db}")
    for f in sorted(os.listdir(DDL)):
        if f.endswith(".sql"):
            for st in ddl_statements(os.path.join(DDL, f)):
                node.query(st.replace("{db}", db).replace("{cluster}", CLUSTER))


def ship_once(trace, url, *args):
    """kpi-ship --once of a whole trace; its exit line (every row shipped)."""
    r = kpitest.run([SHIP, "--db", trace, "--to", url, "--once", *args], timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 rows behind" in r.stdout, r.stdout
    return r.stdout.strip().splitlines()[-1]


LHIST = os.path.join(kpitest.ROOT, "schema", "lhist.h")


def lhist_layout():
    """schema/lhist.h's constants: the relative error, the lowest bound (ns), the buckets."""
    import re
    text = open(LHIST).read()
    get = lambda name: float(re.search(rf"#define {name} ([0-9.]+)", text).group(1))  # noqa: E731
    return get("LHIST_ALPHA"), get("LHIST_MIN_NS"), int(get("LHIST_BUCKETS"))


def lhist_quantile(counts, p):
    """schema/lhist.c's percentile, written again from the header's layout:
    pct.h's interpolation between the ranks, each rank its bucket's value."""
    import math
    alpha, lo_ns, nb = lhist_layout()
    g = (1 + alpha) / (1 - alpha)
    value = lambda i: 0.0 if i == 0 else lo_ns * g ** (i - 1) * (2 * g / (g + 1) if i < nb - 1 else 1)  # noqa: E731
    n = sum(counts)
    ix = (n - 1) * p / 100
    lo = math.floor(ix)
    hi = min(lo + 1, n - 1)

    def at_rank(r):
        seen = 0
        for i, c in enumerate(counts):
            seen += c
            if seen > r:
                return value(i)
    return at_rank(lo) + (at_rank(hi) - at_rank(lo)) * (ix - lo)


def minutes_once(cluster, db, host, dbname="kpiscope"):
    """Every minute of the trace's requests is in request_minutes once
    (FINAL), its counts the raw rows' (requests, 429s, TTFT values), and no
    other minute of that host is; the number of minutes."""
    import sqlite3
    con = sqlite3.connect(db)
    want = {r[0]: tuple(r[1:]) for r in con.execute(
        "SELECT (wall_ns - ((wall_ns % 60000000000) + 60000000000) % 60000000000) / 1000000000, count(*), "
        "sum(ifnull(http_status, 0) = 429), sum(ifnull(http_status, 0) != 429 AND ttft_ns IS NOT NULL) "
        "FROM requests GROUP BY 1")}
    con.close()
    got = cluster.rows(f"SELECT minute, sum(requests) AS n, sum(rejected) AS r, sum(arraySum(ttft)) AS t "
                       f"FROM {dbname}.request_minutes FINAL WHERE host = '{host}' GROUP BY minute")
    have = {int(r["minute"]): (int(r["n"]), int(r["r"]), int(r["t"])) for r in got}
    assert want, f"{host}: the trace has no requests"
    diff = [(m, want.get(m), have.get(m)) for m in sorted(set(want) | set(have)) if want.get(m) != have.get(m)]
    assert not diff, f"{host}: minutes whose aggregates differ from the trace's rows (minute, trace, ClickHouse): {diff}"
    return len(have)


_shared = None


def shared_cluster():
    """One two-shard cluster per test module run, shared by its tests (each
    test ships under host names of its own); stopped when python exits."""
    global _shared
    if _shared is None:
        _shared = Cluster(2)
        atexit.register(_shared.close)
    elif any(n.p is None or n.p.poll() is not None for n in _shared.nodes):
        _shared.stop()
        _shared.start()
    return _shared
