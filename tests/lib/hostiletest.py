"""Helpers for the bad-input suite (tests/test_hostile.py): the ASan/UBSan
build of kpi-infer on a free port, raw exchanges that accept "a documented
status or a clean close", a well-behaved client running alongside, and a tally
of every try per input class (written to build/reliability/hostile.json for
docs/reliability.md)."""
import json, os, re, resource, signal, socket, subprocess, threading, time

import kpitest
import promtext
import servertest as st

ASAN_INFER = os.environ.get("KPI_INFER_ASAN") or os.path.join(kpitest.BUILD, "asan", "kpi-infer")
SAN_ENV = {
    # a small quarantine so RSS plateaus and can be compared between rounds
    "ASAN_OPTIONS": "detect_leaks=1:halt_on_error=1:abort_on_error=0:quarantine_size_mb=16",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
    "LSAN_OPTIONS": "report_objects=1",
}
SAN_REPORT = re.compile(r"ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|SUMMARY: \w+Sanitizer")


def require_asan():
    if not os.access(ASAN_INFER, os.X_OK):
        raise kpitest.Skip(f"{ASAN_INFER} is not built (make test builds it; needs clang and "
                           "libclang-rt-14-dev: make deps)")


def raise_nofile(want):
    """Lets this test process hold `want` sockets; returns the limit it got."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        soft = new
    return soft


class AsanDaemon:
    """build/asan/kpi-infer serving the tiny model; nofile= caps its
    descriptors (soft and hard) to see what it does at its fd limit."""

    def __init__(self, *args, nofile=None, timeout=120):
        require_asan()
        self.port = kpitest.free_port()
        self.log_path = os.path.join(st.tmpdir(), f"asan-kpi-infer-{self.port}.log")
        self.log = open(self.log_path, "wb")
        env = dict(os.environ, **SAN_ENV)

        def limit():
            if nofile:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        argv = [ASAN_INFER, "--model", st.tiny_model(), "--port", str(self.port), *map(str, args)]
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                  preexec_fn=limit)
        kpitest.on_cleanup(self.kill)
        deadline = time.monotonic() + timeout
        while "listening on http://" not in self.output():
            if self.p.poll() is not None:
                raise AssertionError(f"{ASAN_INFER} exited {self.p.returncode}:\n{self.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{ASAN_INFER} not ready in {timeout}s:\n{self.output()}")
            time.sleep(0.05)
        self.model = json.loads(self.request("GET", "/v1/models")[2])["data"][0]["id"]

    def output(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def request(self, method, path, body=None, headers=None, timeout=60):
        return kpitest.http_request(self.port, method, path, body, headers, timeout)

    def metrics(self):
        status, _, data = self.request("GET", "/metrics", timeout=30)
        assert status == 200, status
        return promtext.by_key(data.decode())

    def connect(self, timeout=15):
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)

    def rss_kib(self):
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def sanitizer_report(self):
        out = self.output()
        m = SAN_REPORT.search(out)
        return out[max(0, m.start() - 200):m.start() + 4000] if m else None

    def term(self, timeout=60):
        """SIGTERM; returns the exit status (asserting it came within timeout)."""
        self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            raise AssertionError(f"ASan kpi-infer did not exit within {timeout}s of SIGTERM:\n"
                                 + self.output()[-3000:])

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        self.log.close()


class Tally:
    """Per input class: tries, and those that got neither their documented
    status nor a clean close (the 'lost' column of docs/reliability.md)."""

    def __init__(self):
        self.classes = {}
        self.failures = []

    def record(self, cls, ok, what=""):
        c = self.classes.setdefault(cls, {"tries": 0, "unexpected": 0})
        c["tries"] += 1
        if not ok:
            c["unexpected"] += 1
            self.failures.append(f"{cls}: {what}")

    def write(self, name, extra):
        d = os.path.join(kpitest.BUILD, "reliability")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, name), "w") as f:
            json.dump({"classes": self.classes, "failures": self.failures, **extra}, f, indent=1)
        for cls, c in self.classes.items():
            print(f"     {cls}: {c['tries']} tries, {c['unexpected']} unexpected")


def final_response(rd):
    """The response after any 100 Continue interim ones (which have no body)."""
    status, h = rd.head()
    while status == 100:
        status, h = rd.head()
    if "content-length" in h:
        return status, h, rd._exact(int(h["content-length"]))
    if h.get("transfer-encoding") == "chunked":
        return status, h, b"".join(rd.chunks())
    body = rd.buf
    while True:
        try:
            d = rd.s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not d:
            break
        body += d
    rd.buf = b""
    return status, h, body


def exchange(port, data, statuses, close, timeout=15, then=None):
    """Sends data and reads one response. Returns (ok, what): ok when the
    status is one of statuses with a JSON error body whose code matches (None
    in statuses accepts a close without a response), and, when close, the
    server closes afterwards. then(sock) runs after sending (slow senders)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer and close before taking all of it
        if then:
            then(s)
        rd = st.Reader(s)
        try:
            status, h, body = final_response(rd)
        except (EOFError, ConnectionResetError, BrokenPipeError):
            return None in statuses, "closed without a response"
        except socket.timeout:
            return False, f"no response within {timeout}s"
        if status not in statuses:
            return False, f"status {status}, want {statuses}: {body[:200]!r}"
        if status >= 400:
            try:
                e = st.error_of(body)
            except Exception as ex:  # noqa: BLE001
                return False, f"status {status} without a JSON error body ({ex}): {body[:200]!r}"
            if e["code"] != status:
                return False, f"error code {e['code']} != status {status}"
            if not h.get("x-request-id"):
                return False, "no x-request-id header"
        if close and not rd.closed(timeout):
            return False, f"status {status} but the connection stayed open"
        return True, f"status {status}"
    finally:
        s.close()


def post(path, body, extra_headers=b""):
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    elif isinstance(body, str):
        body = body.encode()
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + extra_headers + b"Content-Length: %d\r\n\r\n" % len(body) + body)


class GoodClient(threading.Thread):
    """A well-behaved client: completions and streams back to back on fresh
    connections, recording each one's latency and any failure."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.stop_ev = threading.Event()
        self.latencies = []
        self.errors = []

    def one(self, i):
        body = {"prompt": f"hello {i}", "max_tokens": 8, "temperature": 0}
        t0 = time.monotonic()
        if i % 2:
            status, _, chunks, events = st.stream(self.port, "/v1/completions", dict(body, stream=True))
            ok = status == 200 and events and events[-1] == "[DONE]"
        else:
            status, _, data = kpitest.http_request(self.port, "POST", "/v1/completions", body, timeout=60)
            ok = status == 200 and json.loads(data)["choices"][0]["finish_reason"] in ("length", "stop")
        self.latencies.append(time.monotonic() - t0)
        if not ok:
            self.errors.append(f"request {i}: status {status}")

    def run(self):
        i = 0
        while not self.stop_ev.is_set():
            try:
                self.one(i)
            except Exception as e:  # noqa: BLE001
                self.errors.append(f"request {i}: {type(e).__name__}: {e}")
            i += 1
            time.sleep(0.05)

    def finish(self):
        self.stop_ev.set()
        self.join(120)
