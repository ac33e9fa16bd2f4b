#!/usr/bin/env python3
"""Runs the libFuzzer targets in build/fuzz/ for a fixed time each, starting
from the committed seeds (tests/fuzz/corpus/<target>/) plus what earlier runs
found (build/fuzz/work/<target>/, never written back into the tree).
A crash leaves its input in build/fuzz/crashes/ and the run prints the command
that replays it. Exit status 1 when any target crashed.

    tests/fuzz/run.py --seconds 30 [TARGET ...]     (what `make fuzz` runs)
"""
import argparse, glob, os, re, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FUZZ = os.path.join(ROOT, "build", "fuzz")
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")

# per-target limits: inputs bigger than these only slow the search down
MAX_LEN = {"http": 20000, "json": 8192, "chat": 4096, "gguf": 65536, "agent_http_track": 16384,
           "agent_http2": 16384}


def targets():
    return sorted(os.path.basename(p)[len("fuzz_"):] for p in glob.glob(os.path.join(FUZZ, "fuzz_*"))
                  if os.access(p, os.X_OK) and not p.endswith(".o"))


def run_target(name, seconds):
    """Fuzzes one target; returns (ok, summary, reproducer path or None, log tail)."""
    binary = os.path.join(FUZZ, f"fuzz_{name}")
    work = os.path.join(FUZZ, "work", name)
    crashes = os.path.join(FUZZ, "crashes")
    os.makedirs(work, exist_ok=True)
    os.makedirs(crashes, exist_ok=True)
    before = set(os.listdir(crashes))
    argv = [binary, f"-max_total_time={seconds}", f"-max_len={MAX_LEN.get(name, 4096)}",
            "-timeout=10", "-rss_limit_mb=2048", "-print_final_stats=1",
            f"-artifact_prefix={crashes}/{name}-", work, os.path.join(CORPUS, name)]
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    try:
        p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env,
                           timeout=seconds + 60)
        out, rc = p.stderr + p.stdout, p.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or ""), -1
    new = sorted(set(os.listdir(crashes)) - before)
    runs = re.search(r"stat::number_of_executed_units:\s*(\d+)", out)
    cov = re.findall(r"cov: (\d+)", out)
    summary = (f"{name}: {runs.group(1) if runs else '?'} runs in {seconds}s, "
               f"cov {cov[-1] if cov else '?'}, corpus {len(os.listdir(work))} files")
    repro = os.path.join(crashes, new[0]) if new else None
    ok = rc == 0 and not new
    return ok, summary, repro, "\n".join(out.splitlines()[-40:])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=30, help="fuzzing time per target (default 30)")
    ap.add_argument("targets", nargs="*", help="targets to run (default: all in build/fuzz/)")
    a = ap.parse_args()
    names = a.targets or targets()
    if not names:
        print("tests/fuzz/run.py: no targets in build/fuzz/ (run make fuzz)", file=sys.stderr)
        return 1
    failed = 0
    for n in names:
        if not os.access(os.path.join(FUZZ, f"fuzz_{n}"), os.X_OK):
            print(f"tests/fuzz/run.py: unknown target '{n}' (have: {' '.join(targets())})", file=sys.stderr)
            return 2
        ok, summary, repro, tail = run_target(n, a.seconds)
        print(("ok   " if ok else "FAIL ") + summary, flush=True)
        if not ok:
            failed += 1
            print(tail)
            if repro:
                print(f"reproducer: {repro}\n  replay: build/fuzz/fuzz_{n} {repro}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
