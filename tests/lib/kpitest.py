"""Shared helpers for kpiscope's python integration tests: real processes,
real sockets, cleanup after every test, and skips that say why."""
import http.client as httpclient, json, os, select, shutil, signal, socket, subprocess, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, "build")
BIN = BUILD  # programs live directly in build/


class Skip(Exception):
    """Raise to skip a test; the message is the reason printed."""


_procs = []
_cleanups = []


def alone(fn):
    """Marks a test of a CONCURRENT = True module that must run with nothing
    of the suite beside it: it times something, or counts what the whole
    host did (tests/run.py runs every test of other modules alone too)."""
    fn.alone = True
    return fn


def beside(fn):
    """Marks a test of a module that runs alone as one that may run beside
    other tests: it times nothing, counts nothing host-wide and starts no
    kpi-agent (a resource use of its own process, say, read from rusage)."""
    fn.beside = True
    return fn


def on_cleanup(fn):
    _cleanups.append(fn)


def cleanup():
    """Stop every process a test started (SIGTERM, then SIGKILL)."""
    while _cleanups:
        try:
            _cleanups.pop()()
        except Exception:
            pass
    while _procs:
        p = _procs.pop()
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def tmpdir(prefix="kpi-test-"):
    """A fresh directory, removed after the test."""
    d = tempfile.mkdtemp(prefix=prefix)
    on_cleanup(lambda: shutil.rmtree(d, ignore_errors=True))
    return d


SCHED_CPU, SCHED_RUN_DELAY = 0, 1   # fields of /proc/PID/task/TID/schedstat


def schedstat_ns(pid, field):
    """A /proc/PID/task/TID/schedstat field (SCHED_CPU: time on a CPU,
    SCHED_RUN_DELAY: time waiting on a run queue) summed over pid's threads,
    in ns; threads that exit while it reads are left out."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[field])
        except (OSError, IndexError):
            pass
    return total


def merge_json(path, key, value):
    """Sets key in the JSON object kept in path (made, with its directory,
    when missing): each test adds its own numbers to a shared report."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        data = {}
    data[key] = value
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)


def require_root(what="this test"):
    if os.geteuid() != 0:
        raise Skip(f"{what} needs root (BPF); run make test as root")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_accepts(port, proc, timeout=20):
    """Until 127.0.0.1:port accepts a connection; proc (a Proc) must not exit
    meanwhile (its output is the assertion's message)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline and proc.p.poll() is None, proc.drain()
            time.sleep(0.05)


class Proc:
    """A child process whose merged stdout/stderr can be awaited line by line."""

    def __init__(self, argv, env=None, **kw):
        e = dict(os.environ)
        if env:
            e.update(env)
        self.argv = argv
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  env=e, **kw)
        _procs.append(self.p)
        self.lines = []
        self._buf = b""

    @property
    def pid(self):
        return self.p.pid

    def _pump(self, timeout):
        r, _, _ = select.select([self.p.stdout], [], [], timeout)
        if not r:
            return False
        chunk = os.read(self.p.stdout.fileno(), 65536)
        if not chunk:
            return None
        self._buf += chunk
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            self.lines.append(line.decode(errors="replace"))
        return True

    def wait_line(self, needle, timeout=30):
        """Block until a line containing needle appears; return that line."""
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for line in self.lines[seen:]:
                if needle in line:
                    return line
            seen = len(self.lines)
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{self.argv[0]}: no line with {needle!r} within {timeout}s; "
                                     f"output:\n" + "\n".join(self.lines[-30:]))
            r = self._pump(left)
            if r is None:
                self.p.wait()
                for line in self.lines[seen:]:
                    if needle in line:
                        return line
                raise AssertionError(f"{self.argv[0]} exited {self.p.returncode} before "
                                     f"printing {needle!r}; output:\n" + "\n".join(self.lines[-30:]))

    def drain(self):
        while self._pump(0):
            pass
        return self.lines

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            # keep reading so a chatty child never blocks on a full pipe
            deadline = time.monotonic() + timeout
            while self.p.poll() is None and time.monotonic() < deadline:
                if self._pump(0.1) is None:
                    break
            rc = self.p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
            raise AssertionError(f"{self.argv[0]} did not exit within {timeout}s of signal {sig}")
        self.drain()
        return rc


def run(argv, timeout=120, check=False, **kw):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"{argv} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


def http_request(port, method, path, body=None, headers=None, timeout=60, host="127.0.0.1"):
    """One request on a fresh connection; returns (status, headers dict, body bytes)."""
    c = httpclient.HTTPConnection(host, port, timeout=timeout)
    h = dict(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
        h.setdefault("Content-Type", "application/json")
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, hdrs, data
