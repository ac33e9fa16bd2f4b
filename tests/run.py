#!/usr/bin/env python3
"""kpiscope test runner: runs the C unit-test binaries in build/tests/ and the
python integration tests tests/test_*.py, and ends with 'N passed, N failed'."""
import argparse, glob, importlib.util, os, re, signal, subprocess, sys, time, traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
import kpitest  # noqa: E402

LINE = re.compile(r"^(PASS|FAIL|SKIP) (\S+?)(?::\s*(.*))?$")


class Tally:
    def __init__(self):
        self.passed = self.failed = self.skipped = 0
        self.failures = []

    def report(self, status, name, why=""):
        if status == "PASS":
            self.passed += 1
            print(f"ok   {name}")
        elif status == "SKIP":
            self.skipped += 1
            print(f"skip {name}: {why}")
        else:
            self.failed += 1
            self.failures.append(name)
            print(f"FAIL {name}: {why}")
        sys.stdout.flush()


def run_unit(path, tally, timeout):
    suite = os.path.basename(path)
    try:
        p = subprocess.run([path], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        tally.report("FAIL", suite, f"timed out after {timeout}s")
        return
    own_fails = 0
    for line in p.stdout.splitlines():
        m = LINE.match(line)
        if m:
            own_fails += m.group(1) == "FAIL"
            tally.report(m.group(1), f"{suite}.{m.group(2)}", m.group(3) or "")
        elif line.strip():
            print(f"     {line}")
    # A non-zero exit is a failure of its own unless this suite already named
    # one; a signal (a crash after some passes) always is, whatever came before.
    if p.returncode < 0 or (p.returncode != 0 and own_fails == 0):
        tally.report("FAIL", suite, f"exit {p.returncode}: {p.stderr.strip()[-600:]}")
    elif p.returncode != 0 and p.stderr.strip():
        print(p.stderr.strip()[-2000:])


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout()


def run_py(path, tally, flt, timeout):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except kpitest.Skip as s:
        tally.report("SKIP", name, str(s))
        return
    except Exception:
        tally.report("FAIL", name, "import failed:\n" + traceback.format_exc())
        return
    tests = [(n, f) for n, f in vars(mod).items() if n.startswith("test_") and callable(f)]
    tests.sort(key=lambda t: t[1].__code__.co_firstlineno)
    for n, f in tests:
        full = f"{name}.{n}"
        if flt and flt not in full:
            continue
        limit = getattr(f, "timeout", timeout)
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(limit)
        t0 = time.monotonic()
        try:
            f()
            tally.report("PASS", full)
        except kpitest.Skip as s:
            tally.report("SKIP", full, str(s))
        except Timeout:
            tally.report("FAIL", full, f"timed out after {limit}s")
        except Exception:
            tally.report("FAIL", full, "\n" + traceback.format_exc())
        finally:
            signal.alarm(0)
            kpitest.cleanup()
        if time.monotonic() - t0 > 20:
            print(f"     ({full} took {time.monotonic() - t0:.0f}s)")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--filter", default="", help="run only tests whose name contains this")
    ap.add_argument("--timeout", type=int, default=300, help="per-test limit in seconds")
    a = ap.parse_args()
    tally = Tally()
    for path in sorted(glob.glob(os.path.join(ROOT, "build", "tests", "test_*"))):
        if not os.access(path, os.X_OK) or path.endswith(".d"):
            continue
        if a.filter and a.filter not in os.path.basename(path):
            continue
        run_unit(path, tally, a.timeout)
    for path in sorted(glob.glob(os.path.join(ROOT, "tests", "test_*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        # a filter matches the module or any test in it
        run_py(path, tally, "" if a.filter in name else a.filter, a.timeout)
    if tally.failures:
        print("\nfailed:\n  " + "\n  ".join(tally.failures))
    line = f"{tally.passed} passed, {tally.failed} failed"
    if tally.skipped:
        line += f", {tally.skipped} skipped"
    print(line)
    sys.exit(1 if tally.failed else 0)


if __name__ == "__main__":
    main()
