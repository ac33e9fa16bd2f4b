"""bench_fleet.py - the fleet's costs: kpi-ship's rows/s and CPU per 1,000 rows
into a two-shard ClickHouse, and one fleet question (p99 TTFT of every host in
a baseline and an incident window, hosts ranked by the change) asked of
ClickHouse vs of the SQLite traces one by one. JSON: OUT/fleet.json.
Sizes: --quick 10 x 20k rows, default 10 x 100k, --full 10 x 1M (10 M rows)."""
import argparse, json, os, resource, sqlite3, statistics, subprocess, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kpitest  # noqa: E402
import clickhousetest as cht  # noqa: E402
import fleetgen  # noqa: E402

SHIP = os.path.join(kpitest.BIN, "kpi-ship")


def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(kpitest.BUILD, "bench"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--full", action="store_true", help="10 M rows (10 hosts x 1 M)")
    ap.add_argument("--hosts", type=int, default=10)
    a = ap.parse_args()
    per_host = 1_000_000 if a.full else 20_000 if a.quick else 100_000
    os.makedirs(a.out, exist_ok=True)
    d = kpitest.tmpdir("kpi-bench-fleet-")
    cluster = cht.Cluster(2)
    span = 3600
    start = (time.time_ns() // 10**9 - 2 * span) * 10**9
    paths = []
    t0 = time.monotonic()
    for h in range(a.hosts):
        p = os.path.join(d, f"host{h}.db")
        fleetgen.make_trace(p, f"host{h}", per_host, start, span, seed=h,
                            slow_from_s=span * 3 // 4 if h == 3 else None, slow_phase="queue_ns")
        paths.append(p)
    gen_s = time.monotonic() - t0
    # shipping: every trace with --once, one after the other (one shipper per host in a fleet)
    ship = []
    for h, p in enumerate(paths):
        c0, w0 = child_cpu(), time.monotonic()
        r = subprocess.run([SHIP, "--db", p, "--to", cluster.url, "--once", "--host", f"host{h}"],
                           capture_output=True, text=True)
        w, c = time.monotonic() - w0, child_cpu() - c0
        assert r.returncode == 0, r.stdout + r.stderr
        rows = per_host + span + 1      # requests + samples
        ship.append({"rows": rows, "wall_s": w, "cpu_s": c})
    rows_s = [x["rows"] / x["wall_s"] for x in ship]
    cpu_k = [1000 * x["cpu_s"] / x["rows"] * 1000 for x in ship]   # ms per 1,000 rows
    s0 = start // 10**9
    base = (s0 * 10**9, (s0 + span // 2) * 10**9)
    inc = ((s0 + span * 3 // 4) * 10**9, (s0 + span) * 10**9)

    def ask_clickhouse():
        out = {}
        for name, (f, t) in (("base", base), ("inc", inc)):
            for row in cluster.rows(f"SELECT host, quantileExact(0.99)(ttft_ns) AS p99 FROM kpiscope.requests FINAL "
                                    f"WHERE wall_ns >= {f} AND wall_ns < {t} GROUP BY host"):
                out.setdefault(row["host"], {})[name] = float(row["p99"])
        return sorted(out, key=lambda h: out[h]["inc"] - out[h]["base"], reverse=True)

    def ask_sqlite():
        out = {}
        for h, p in enumerate(paths):
            con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
            for name, (f, t) in (("base", base), ("inc", inc)):
                n = con.execute("SELECT count(*) FROM requests WHERE wall_ns >= ? AND wall_ns < ? AND ttft_ns IS NOT NULL",
                                (f, t)).fetchone()[0]
                v = con.execute("SELECT ttft_ns FROM requests WHERE wall_ns >= ? AND wall_ns < ? AND ttft_ns IS NOT NULL "
                                "ORDER BY ttft_ns LIMIT 1 OFFSET ?", (f, t, int((n - 1) * 0.99))).fetchone()[0]
                out.setdefault(f"host{h}", {})[name] = float(v)
            con.close()
        return sorted(out, key=lambda h: out[h]["inc"] - out[h]["base"], reverse=True)

    ch_t, sq_t = [], []
    for _ in range(3):          # A B A B A B
        w = time.monotonic(); top_ch = ask_clickhouse(); ch_t.append(time.monotonic() - w)
        w = time.monotonic(); top_sq = ask_sqlite(); sq_t.append(time.monotonic() - w)
    assert top_ch[0] == top_sq[0] == "host3", (top_ch[:3], top_sq[:3])
    res = {
        "hosts": a.hosts, "rows_per_host": per_host, "total_request_rows": per_host * a.hosts,
        "generate_s": round(gen_s, 1),
        "ship_rows_per_s": {"median": statistics.median(rows_s), "min": min(rows_s), "max": max(rows_s)},
        "ship_cpu_ms_per_1000_rows": {"median": statistics.median(cpu_k), "min": min(cpu_k), "max": max(cpu_k)},
        "fleet_question_clickhouse_s": {"median": statistics.median(ch_t), "all": ch_t},
        "fleet_question_sqlite_one_by_one_s": {"median": statistics.median(sq_t), "all": sq_t},
        "both_name": top_ch[0],
    }
    with open(os.path.join(a.out, "fleet.json"), "w") as f:
        json.dump(res, f, indent=2)
    cluster.close()
    kpitest.cleanup()
    print(f"### fleet ({a.hosts} hosts x {per_host} requests)\n")
    print(f"- kpi-ship: {res['ship_rows_per_s']['median']:.0f} rows/s (median over hosts), "
          f"{res['ship_cpu_ms_per_1000_rows']['median']:.1f} ms CPU per 1,000 rows")
    print(f"- p99 TTFT per host in two windows, hosts ranked: ClickHouse {res['fleet_question_clickhouse_s']['median']:.2f} s, "
          f"SQLite traces one by one {res['fleet_question_sqlite_one_by_one_s']['median']:.2f} s (medians of 3, A B A B)")


if __name__ == "__main__":
    main()
