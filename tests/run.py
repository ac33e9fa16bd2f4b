#!/usr/bin/env python3
"""kpiscope test runner: runs the C unit-test binaries in build/tests/ and the
python integration tests tests/test_*.py, and ends with the slowest tests and
'N passed, N failed'.

Tests that measure no time run side by side, --jobs at once: every unit-test
binary, the tests of a module that says CONCURRENT = True (but those it
marks @kpitest.alone), and any test marked @kpitest.beside. Every other test runs alone, one after another, with
nothing of the suite beside it: a test that times something, counts what a
BPF program saw on the whole host, or needs a core to itself. Each module
runs in a process of its own; modules naming the same FIXTURE (one ClickHouse
cluster, say) share one."""
import argparse, concurrent.futures, glob, importlib.util, json, os, re, signal, subprocess, sys, time, traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
import kpitest  # noqa: E402

LINE = re.compile(r"^(PASS|FAIL|SKIP) (\S+?)(?::\s*(.*))?$")
RESULT = "@@result "   # a child's last line: its tally and times, as JSON


class Tally:
    def __init__(self):
        self.passed = self.failed = self.skipped = 0
        self.failures = []
        self.seconds = {}   # test (or unit suite, or module import) -> wall seconds
        self.out = []       # lines printed, kept in order for a child's parent

    def say(self, line):
        self.out.append(line)
        print(line)
        sys.stdout.flush()

    def report(self, status, name, why=""):
        if status == "PASS":
            self.passed += 1
            self.say(f"ok   {name}")
        elif status == "SKIP":
            self.skipped += 1
            self.say(f"skip {name}: {why}")
        else:
            self.failed += 1
            self.failures.append(name)
            self.say(f"FAIL {name}: {why}")

    def took(self, name, secs):
        self.seconds[name] = self.seconds.get(name, 0.0) + secs

    def merge(self, d):
        self.passed += d["passed"]
        self.failed += d["failed"]
        self.skipped += d["skipped"]
        self.failures += d["failures"]
        for k, v in d["seconds"].items():
            self.took(k, v)

    def as_dict(self):
        return {"passed": self.passed, "failed": self.failed, "skipped": self.skipped,
                "failures": self.failures, "seconds": self.seconds}

    def slowest(self, n=15):
        """The n tests that took longest, as the lines the run ends with."""
        top = sorted(self.seconds.items(), key=lambda kv: -kv[1])[:n]
        return [f"  {secs:7.1f}s  {name}" for name, secs in top]


# ---- unit-test binaries -------------------------------------------------------

def run_unit(path, timeout):
    """One binary's results, as a Tally of its own (binaries run side by side)."""
    tally = Tally()
    tally.say = tally.out.append   # printed by the caller, in one block
    suite = os.path.basename(path)
    t0 = time.monotonic()
    try:
        p = subprocess.run([path], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        tally.report("FAIL", suite, f"timed out after {timeout}s")
        return tally
    finally:
        tally.took(suite, time.monotonic() - t0)
    own_fails = 0
    for line in p.stdout.splitlines():
        m = LINE.match(line)
        if m:
            own_fails += m.group(1) == "FAIL"
            tally.report(m.group(1), f"{suite}.{m.group(2)}", m.group(3) or "")
        elif line.strip():
            tally.out.append(f"     {line}")
    # A non-zero exit is a failure of its own unless this suite already named
    # one; a signal (a crash after some passes) always is, whatever came before.
    if p.returncode < 0 or (p.returncode != 0 and own_fails == 0):
        tally.report("FAIL", suite, f"exit {p.returncode}: {p.stderr.strip()[-600:]}")
    elif p.returncode != 0 and p.stderr.strip():
        tally.out.append(p.stderr.strip()[-2000:])
    return tally


# ---- python modules, in a child process ---------------------------------------

class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout()


def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return name, mod


def is_alone(mod, fn):
    if getattr(fn, "beside", False):
        return False
    return not getattr(mod, "CONCURRENT", False) or getattr(fn, "alone", False)


def run_module(path, tally, flt, timeout, which):
    """Runs the tests of one module that match flt and which ('alone' or
    'concurrent')."""
    t0 = time.monotonic()
    name = os.path.splitext(os.path.basename(path))[0]
    try:
        name, mod = load(path)
    except kpitest.Skip as s:
        tally.report("SKIP", name, str(s))
        return
    except Exception:
        tally.report("FAIL", name, "import failed:\n" + traceback.format_exc())
        return
    finally:
        tally.took(f"{name} (import)", time.monotonic() - t0)
    for n, f in selected(name, mod, flt, which):
        full = f"{name}.{n}"
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
        secs = time.monotonic() - t0
        tally.took(full, secs)
        if secs > 20:
            tally.say(f"     ({full} took {secs:.0f}s)")


def child(a):
    """--child: run the named modules' tests of one kind, then print the tally."""
    tally = Tally()
    for path in a.child:
        name = os.path.splitext(os.path.basename(path))[0]
        run_module(path, tally, "" if a.filter in name else a.filter, a.timeout, a.which)
    print(RESULT + json.dumps(tally.as_dict()), flush=True)
    sys.exit(0)


def selected(name, mod, flt, which=None):
    """The tests of an imported module that match flt (and, given which,
    run in that phase), in the order they stand in the file."""
    tests = [(n, f) for n, f in vars(mod).items() if n.startswith("test_") and callable(f)]
    tests.sort(key=lambda t: t[1].__code__.co_firstlineno)
    return [(n, f) for n, f in tests if not (flt and flt not in f"{name}.{n}")
            and (which is None or is_alone(mod, f) == (which == "alone"))]


def plan_child(a):
    """--plan: imports every module and prints which phases it has tests in
    under the filter, and its FIXTURE, as JSON: the same is_alone() the
    children run by decides, so no test falls between the phases."""
    out = {}
    for path in a.plan:
        name = os.path.splitext(os.path.basename(path))[0]
        flt = "" if a.filter in name else a.filter
        try:
            name, mod = load(path)
        except BaseException:   # a skip or a failure at import: its child reports it
            out[path] = {"kinds": ["alone"] if not flt else [], "fixture": name}
            continue
        kinds = {"alone" if is_alone(mod, f) else "concurrent" for _, f in selected(name, mod, flt)}
        if not kinds and not flt:
            kinds.add("alone")   # a module with no tests still says so
        out[path] = {"kinds": sorted(kinds), "fixture": getattr(mod, "FIXTURE", name)}
    print(json.dumps(out), flush=True)
    sys.exit(0)


def plan(paths, a):
    """Which modules have tests of each kind under the filter, grouped by
    FIXTURE: {'alone': [[paths]...], 'concurrent': [[paths]...]}. Asked of a
    child that imports them (the parent imports no test module)."""
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--filter", a.filter, "--plan", *paths],
                       cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"tests/run.py: planning the run failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    found = json.loads(p.stdout.strip().splitlines()[-1])
    groups = {"alone": {}, "concurrent": {}}
    for path in paths:
        for k in found[path]["kinds"]:
            groups[k].setdefault(found[path]["fixture"], []).append(path)
    return {k: list(v.values()) for k, v in groups.items()}


def spawn(paths, which, a, live=False):
    """A child running paths' tests of one kind; returns its Tally. Live, its
    lines are printed as they come; else the caller prints them in one block."""
    argv = [sys.executable, os.path.abspath(__file__), "--which", which, "--timeout", str(a.timeout),
            "--filter", a.filter, "--child", *paths]
    p = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True, text=True, errors="replace")
    _children.add(p)
    tally, reported = Tally(), False
    tally.say = tally.out.append   # printed by the caller
    for line in p.stdout:
        line = line.rstrip("\n")
        if line.startswith(RESULT):
            tally.merge(json.loads(line[len(RESULT):]))
            reported = True
        elif live:
            print(line, flush=True)
        else:
            tally.out.append(line)
    p.wait()
    _children.discard(p)
    if p.returncode != 0 or not reported:
        names = ",".join(os.path.splitext(os.path.basename(x))[0] for x in paths)
        tally.report("FAIL", names, f"its test process exited {p.returncode} before it reported")
    return tally


_children = set()
TIMES = os.path.join(ROOT, "build", "test-times.json")


def past_times():
    try:
        with open(TIMES) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _stop_children(signum, frame):
    for p in list(_children):
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except OSError:
            pass
    sys.exit(130)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--filter", default="", help="run only tests whose name contains this")
    ap.add_argument("--timeout", type=int, default=300, help="per-test limit in seconds")
    ap.add_argument("--jobs", type=int, default=0,
                    help="tests run side by side (default: the number of CPUs, at least 2; 1: none)")
    ap.add_argument("--which", choices=("alone", "concurrent"), default="alone", help=argparse.SUPPRESS)
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--plan", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.plan:
        return plan_child(a)
    if a.child:
        return child(a)
    jobs = a.jobs or max(2, os.cpu_count() or 1)
    signal.signal(signal.SIGINT, _stop_children)
    signal.signal(signal.SIGTERM, _stop_children)
    started = time.monotonic()
    tally = Tally()

    def show(t):
        for line in t.out:
            print(line)
        sys.stdout.flush()
        tally.merge(t.as_dict())

    units = [p for p in sorted(glob.glob(os.path.join(ROOT, "build", "tests", "test_*")))
             if os.access(p, os.X_OK) and not p.endswith(".d")
             and (not a.filter or a.filter in os.path.basename(p))]
    mods = plan(sorted(glob.glob(os.path.join(ROOT, "tests", "test_*.py"))), a)
    # side by side: the unit binaries and the concurrent modules, the longest
    # of the last run first, so that the short ones fill in at the end
    last = past_times()

    def cost(g):
        names = [os.path.splitext(os.path.basename(x))[0] for x in g]
        return sum(v for k, v in last.items() if k.split(".")[0].split(" ")[0] in names)
    work = [(cost(g), spawn, (g, "concurrent", a)) for g in mods["concurrent"]]
    work += [(last.get(os.path.basename(u), 0), run_unit, (u, a.timeout)) for u in units]
    work.sort(key=lambda w: -w[0])
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futs = [pool.submit(fn, *args) for _, fn, args in work]
        for f in concurrent.futures.as_completed(futs):
            show(f.result())
    side = time.monotonic() - started
    # then alone, one after another
    for g in mods["alone"]:
        show(spawn(g, "alone", a, live=True))
    total = time.monotonic() - started
    if not a.filter:
        with open(TIMES, "w") as f:
            json.dump(tally.seconds, f, indent=1, sort_keys=True)
    print(f"\n{total / 60:.1f} min: {side / 60:.1f} side by side ({jobs} at once), "
          f"{(total - side) / 60:.1f} alone; slowest:")
    print("\n".join(tally.slowest()))
    if tally.failures:
        print("\nfailed:\n  " + "\n  ".join(tally.failures))
    line = f"{tally.passed} passed, {tally.failed} failed"
    if tally.skipped:
        line += f", {tally.skipped} skipped"
    print(line)
    sys.exit(1 if tally.failed else 0)


if __name__ == "__main__":
    main()
