"""Helpers for kpi-infer's integration tests and benchmark: a real daemon on a
free port serving the tiny built-in model, raw-socket HTTP, SSE parsing and
/metrics scraping. Standard library only."""
import atexit, json, os, shutil, signal, socket, subprocess, tempfile, time

import kpitest
import promtext

# KPI_INFER=path runs the suite against another build (an ASan one, say)
KPI_INFER = os.environ.get("KPI_INFER") or os.path.join(kpitest.BIN, "kpi-infer")
_tmp = None
_model = None


def require_binary():
    if not os.access(KPI_INFER, os.X_OK):
        raise kpitest.Skip(f"{KPI_INFER} is not built (run make)")


def tmpdir():
    global _tmp
    if _tmp is None:
        _tmp = tempfile.mkdtemp(prefix="kpi-server-test-")
        atexit.register(shutil.rmtree, _tmp, True)
    return _tmp


_models = {}


def preset_model(preset="tiny", seed=1):
    """A built-in preset written once per test session by kpi-infer --make-model."""
    require_binary()
    key = (preset, seed)
    if key not in _models:
        path = os.path.join(tmpdir(), f"{preset}-s{seed}.gguf")
        kpitest.run([KPI_INFER, "--make-model", path, "--preset", preset, "--seed", str(seed)],
                    check=True, timeout=600)
        _models[key] = path
    return _models[key]


# argv: TAG N PORT.  N completions to 127.0.0.1:PORT, one connection each,
# x-request-id TAG-0..N-1; run as `python3 -c NS_CLIENT ...` inside another
# network namespace (ip netns exec, nsenter --net), where the test's own
# sockets cannot reach.
NS_CLIENT = """
import http.client, json, sys
tag, n, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", "/v1/completions", json.dumps({"prompt": "hello there", "max_tokens": 6}),
              {"content-type": "application/json", "x-request-id": f"{tag}-{i}"})
    r = c.getresponse()
    r.read()
    assert r.status == 200, r.status
    c.close()
"""


def tiny_model():
    """The tiny preset written once per test session by kpi-infer --make-model."""
    return preset_model("tiny", 1)


class Daemon:
    """kpi-infer on a free port; output goes to a log file so it never blocks.
    shared=True daemons outlive kpitest.cleanup (one per test module) and stop
    at exit; others are stopped after the test like every kpitest.Proc."""

    def __init__(self, *args, shared=False, timeout=60, model="tiny", prefix=(), models=True):
        """model: "tiny", a path, or None (no --model: the router); prefix: argv
        put before kpi-infer (taskset...); models: read /v1/models when ready."""
        self.port = kpitest.free_port()
        self.log_path = os.path.join(tmpdir(), f"kpi-infer-{self.port}.log")
        self.log = open(self.log_path, "wb")
        margs = [] if model is None else ["--model", tiny_model() if model == "tiny" else model]
        argv = [*prefix, KPI_INFER, *margs, "--port", str(self.port), *map(str, args)]
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        if shared:
            atexit.register(self.stop)
        else:
            kpitest.on_cleanup(self.stop)
        deadline = time.monotonic() + timeout
        while "listening on http://" not in self.output():
            if self.p.poll() is not None:
                raise AssertionError(f"kpi-infer exited {self.p.returncode}:\n{self.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"kpi-infer not ready in {timeout}s:\n{self.output()}")
            time.sleep(0.05)
        if models:
            info = self.json("GET", "/v1/models")[2]["data"][0]
            self.model = info["id"]
            self.ctx = info["max_model_len"]

    @property
    def addr(self):
        return f"127.0.0.1:{self.port}"

    def output(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def alive(self):
        return self.p.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()
        return self.p.returncode

    def request(self, method, path, body=None, headers=None, timeout=60):
        return kpitest.http_request(self.port, method, path, body, headers, timeout)

    def json(self, method, path, body=None, headers=None, timeout=60):
        st, h, data = self.request(method, path, body, headers, timeout)
        return st, h, json.loads(data) if data else None

    def metrics(self):
        st, _, data = self.request("GET", "/metrics")
        assert st == 200, st
        return promtext.by_key(data.decode())

    def connect(self, timeout=60):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s


def post_bytes(path, body, headers=None, port=None):
    h = {"Host": "127.0.0.1", "Content-Type": "application/json",
         "Content-Length": str(len(body))}
    h.update(headers or {})
    head = f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items())
    return head.encode() + b"\r\n" + body


class Reader:
    """Reads HTTP/1.1 responses (Content-Length, chunked or until close) from a
    socket, keeping the body of a chunked response as its list of chunks."""

    def __init__(self, sock):
        self.s = sock
        self.buf = b""

    def _fill(self):
        d = self.s.recv(65536)
        if not d:
            raise EOFError("connection closed")
        self.buf += d

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n:
            self._fill()
        d, self.buf = self.buf[:n], self.buf[n:]
        return d

    def head(self):
        status = self._line()
        parts = status.split(b" ", 2)
        assert parts[0].startswith(b"HTTP/1."), status
        headers = {}
        while True:
            line = self._line()
            if not line:
                break
            k, _, v = line.partition(b":")
            headers[k.decode().strip().lower()] = v.decode().strip()
        return int(parts[1]), headers

    def chunks(self):
        """Yields each chunk of a chunked body as it arrives."""
        while True:
            size = int(self._line().split(b";")[0], 16)
            if size == 0:
                while self._line():
                    pass
                return
            data = self._exact(size)
            assert self._exact(2) == b"\r\n"
            yield data

    def response(self):
        status, h = self.head()
        if "content-length" in h:
            body = self._exact(int(h["content-length"]))
            return status, h, body
        if h.get("transfer-encoding") == "chunked":
            return status, h, b"".join(self.chunks())
        while True:
            try:
                self._fill()
            except EOFError:
                break
        body, self.buf = self.buf, b""
        return status, h, body

    def closed(self, timeout=5):
        """True when the peer closes (EOF or reset) within timeout."""
        self.s.settimeout(timeout)
        try:
            while True:
                if not self.s.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False


def sse_events(chunk_bytes):
    """JSON payloads of the 'data:' events in a byte string ('[DONE]' as a str)."""
    out = []
    for ev in chunk_bytes.decode("utf-8").split("\n\n"):
        if not ev.strip():
            continue
        assert ev.startswith("data: "), ev
        payload = ev[6:]
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def stream(port_or_sock, path, body, headers=None):
    """One streaming request on a fresh (or given) socket. Returns
    (status, headers, chunks, events): chunks as received, events parsed."""
    s = port_or_sock
    if isinstance(s, int):
        s = socket.create_connection(("127.0.0.1", s), timeout=120)
    r = Reader(s)
    s.sendall(post_bytes(path, json.dumps(body).encode(), headers))
    status, h = r.head()
    if status != 200:
        n = int(h.get("content-length", 0))
        return status, h, [r._exact(n)], []
    chunks = list(r.chunks())
    events = []
    for c in chunks:
        events.extend(sse_events(c))
    if isinstance(port_or_sock, int):
        s.close()
    return status, h, chunks, events


def error_of(data):
    """The error object of a JSON error body, asserting its shape."""
    body = json.loads(data)
    e = body["error"]
    assert isinstance(e["message"], str) and e["message"], body
    assert isinstance(e["code"], int), body
    return e


def wait_for(pred, timeout=10, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)
