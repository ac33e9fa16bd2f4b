#!/usr/bin/env python3
"""bench_store: SQLite ingest rate of kpi-agent's writer (build/store-bench:
synthetic streamed requests through the real assembler and trace store,
flushed in batches as the agent does). Median of interleaved runs."""
import argparse, json, os, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kpitest  # noqa: E402

BIN = os.path.join(kpitest.BUILD, "store-bench")


def one(tmp, n, per_flush, i):
    db = os.path.join(tmp, f"s{i}.db")
    p = subprocess.run([BIN, db, str(n), str(per_flush)], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"store-bench failed: {p.stderr}")
    for f in (db, db + "-wal", db + "-shm"):
        if os.path.exists(f):
            os.remove(f)
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=os.path.join(kpitest.BUILD, "bench"))
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if not os.path.exists(BIN):
        print(f"## SQLite ingest\n\nskipped: {BIN} is not built\n")
        return
    n = 20000 if a.quick else 100000
    rounds = 3 if a.quick else 5
    # per_flush 200 ~ a 200 ms flush at 1k requests/s; 2000 ~ at 10k requests/s
    sizes = (200, 2000)
    res = {s: [] for s in sizes}
    with tempfile.TemporaryDirectory(prefix="kpi-store-bench-") as tmp:
        for r in range(rounds):
            for s in (sizes if r % 2 == 0 else sizes[::-1]):
                res[s].append(one(tmp, n, s, r)["requests_per_s"])
    out = {str(s): {"median": statistics.median(v), "min": min(v), "max": max(v), "runs": v}
           for s, v in res.items()}
    with open(os.path.join(a.out, "store.json"), "w") as f:
        json.dump({"requests": n, "rounds": rounds, "requests_per_s_by_flush_size": out}, f, indent=1)
    print("## SQLite ingest (kpi-agent's writer)\n")
    print(f"{n} synthetic streamed requests (16 token writes each) through the real assembler and "
          f"trace store (WAL, prepared statements, one transaction per flush); {rounds} interleaved "
          f"runs, median (min–max).\n")
    print("| requests per flush | requests/s |\n|---:|---:|")
    for s in sizes:
        o = out[str(s)]
        print(f"| {s} | {o['median']:,.0f} ({o['min']:,.0f}–{o['max']:,.0f}) |")
    print()


if __name__ == "__main__":
    main()
