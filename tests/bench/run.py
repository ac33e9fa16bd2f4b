#!/usr/bin/env python3
"""kpiscope benchmark driver (make bench, make bench QUICK=1): runs every
tests/bench/bench_*.py as `python3 bench_X.py --out build/bench [--quick]`,
gathers the markdown each prints into build/bench/summary.md, keeps going
when one fails, and says which failed and how long everything took."""
import argparse, glob, os, platform, subprocess, sys, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def host_line():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({cpu}), Linux {platform.release()}"


def run_one(path, out, quick, timeout):
    """Runs one bench; returns (rc, stdout markdown, stderr tail, seconds).
    Its stderr is echoed live, so long runs show their progress."""
    name = os.path.splitext(os.path.basename(path))[0]
    argv = [sys.executable, path, "--out", out] + (["--quick"] if quick else [])
    t0 = time.monotonic()
    p = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, errors="replace")
    tail = []

    def pump_stderr():
        for line in p.stderr:
            sys.stderr.write(f"  [{name}] {line}")
            sys.stderr.flush()
            tail.append(line.rstrip("\n"))
            del tail[:-40]

    t = threading.Thread(target=pump_stderr, daemon=True)
    t.start()
    chunks = []
    reader = threading.Thread(target=lambda: chunks.append(p.stdout.read()), daemon=True)
    reader.start()
    try:
        rc = p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        rc = f"timed out after {timeout}s"
    reader.join(5)
    t.join(5)
    return rc, "".join(chunks), tail, time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="the short suite (make bench QUICK=1)")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench"),
                    help="where each bench writes X.json, and summary.md goes (default build/bench)")
    ap.add_argument("--only", default="", help="run only benches whose file name contains this")
    ap.add_argument("--timeout", type=int, default=0,
                    help="seconds one bench may take (default 240 quick, 900 full)")
    a = ap.parse_args()
    timeout = a.timeout or (240 if a.quick else 900)
    os.makedirs(a.out, exist_ok=True)

    benches = sorted(glob.glob(os.path.join(ROOT, "tests", "bench", "bench_*.py")))
    benches = [b for b in benches if a.only in os.path.basename(b)]
    if not benches:
        print(f"run.py: no tests/bench/bench_*.py{' matching ' + repr(a.only) if a.only else ''}",
              file=sys.stderr)
        return 1

    t_all = time.monotonic()
    sections, rows, failed = [], [], []
    for path in benches:
        name = os.path.splitext(os.path.basename(path))[0]
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        rc, md, tail, secs = run_one(path, a.out, a.quick, timeout)
        json_name = name[len("bench_"):] + ".json"
        has_json = os.path.exists(os.path.join(a.out, json_name))
        if rc == 0:
            status = "ok" if has_json else f"ok, but wrote no {json_name}"
            sections.append(md.strip() or f"## {name}\n\n(printed nothing)")
        else:
            failed.append(name)
            status = f"FAILED (exit {rc})" if isinstance(rc, int) else f"FAILED ({rc})"
            body = md.strip()
            sections.append(f"## {name}: {status}\n\n"
                            + (body + "\n\n" if body else "")
                            + "Last lines of its stderr:\n\n```\n" + "\n".join(tail[-25:]) + "\n```")
        rows.append((name, status, secs))
        print(f"bench: {name} {status} in {secs:.1f}s", file=sys.stderr, flush=True)

    total = time.monotonic() - t_all
    head = [
        "# kpiscope benchmarks",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')} · {'quick' if a.quick else 'full'} suite · {host_line()}",
        "",
        "| bench | result | time |",
        "|---|---|---:|",
    ]
    head += [f"| {n} | {s} | {t:.1f} s |" for n, s, t in rows]
    head += ["", f"Total: {total:.1f} s for {len(rows)} benches"
             + (f", {len(failed)} failed: {', '.join(failed)}" if failed else ", all ok") + "."]
    text = "\n".join(head) + "\n\n" + "\n\n".join(sections) + "\n"
    summary = os.path.join(a.out, "summary.md")
    with open(summary, "w") as f:
        f.write(text)
    print(text)
    print(f"bench: wrote {os.path.relpath(summary, ROOT)}; total {total:.1f} s"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
