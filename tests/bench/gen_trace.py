#!/usr/bin/env python3
"""Writes a synthetic kpi-agent trace store (schema/001_init.sql) of N requests
for the kpitop and kpi-report benchmarks: Poisson arrivals, realistic phase
times, once-a-second samples, batch steps, and one incident. Reuses the file
when it was made with the same parameters.

  python3 tests/bench/gen_trace.py --requests 1000000 --out build/bench/trace_1m.db"""
import argparse, json, os, sqlite3, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
import tracetest  # noqa: E402


def ensure(path, requests, rate=100.0, incident="queue", seed=1, log=sys.stderr):
    duration = int(requests / rate)
    params = {"requests": requests, "rate": rate, "incident": incident, "seed": seed, "v": 1}
    if os.path.exists(path):
        try:
            got = sqlite3.connect(path).execute("SELECT value FROM meta WHERE key = 'tracegen'").fetchone()
            if got and json.loads(got[0]) == params:
                return path
        except sqlite3.Error:
            pass
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    t0 = time.monotonic()
    print(f"generating {path}: {requests} requests over {duration}s ...", file=log, flush=True)
    inc = [tracetest.Incident(incident, int(duration * 0.8), int(duration * 0.8) + 300)] if incident else []
    db = tracetest.generate(path + ".tmp", duration_s=duration, rate=rate, incidents=inc, seed=seed,
                            progress=False)
    db.execute("INSERT INTO meta VALUES ('tracegen', ?)", (json.dumps(params),))
    db.commit()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    for ext in ("", "-wal", "-shm"):
        if os.path.exists(path + ext):
            os.unlink(path + ext)
    os.rename(path + ".tmp", path)
    for ext in ("-wal", "-shm"):
        if os.path.exists(path + ".tmp" + ext):
            os.unlink(path + ".tmp" + ext)
    n = sqlite3.connect(path).execute("SELECT count(*) FROM requests").fetchone()[0]
    print(f"  {n} requests written in {time.monotonic() - t0:.0f}s", file=log, flush=True)
    return path


def bench_setup(description, binary):
    """The command line and trace every bench over a generated trace shares:
    --out and --quick parsed, the tool under test checked, the trace of 1M
    requests (100k with --quick) made once under --out. Returns (args, n, db)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", default=os.path.join(root, "build", "bench"))
    ap.add_argument("--quick", action="store_true", help="100,000 requests, fewer rounds")
    a = ap.parse_args()
    if not os.path.exists(binary):
        sys.exit(f"build/{os.path.basename(binary)} is not built: run make")
    n = 100_000 if a.quick else 1_000_000
    return a, n, ensure(os.path.join(a.out, f"trace_{n // 1000}k.db"), n)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1_000_000, help="how many requests (default 1000000)")
    ap.add_argument("--rate", type=float, default=100.0, help="arrivals per second (default 100)")
    ap.add_argument("--incident", default="queue", choices=["queue", "kv", "cpu", "prefill", "network", ""],
                    help="the incident at 80%% of the trace, 300 s long (default queue; '' for none)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True, help="trace store to write")
    a = ap.parse_args()
    if a.requests < 1 or a.rate <= 0:
        ap.error("--requests and --rate must be positive")
    ensure(a.out, a.requests, a.rate, a.incident, a.seed)


if __name__ == "__main__":
    main()
