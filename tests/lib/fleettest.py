"""Helpers for the fleet exporters' tests: a real Prometheus server on
loopback (temp config and data dir, 1 s scrapes), an OTLP/HTTP JSON receiver
written here (http.server in a thread, plain or TLS with a self-signed
certificate), Prometheus text parsing, and load over both OpenAI endpoints."""
import json, os, shutil, ssl, subprocess, threading, time, urllib.parse, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import kpitest

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


# gen_ai.operation.name of each endpoint (abi/kpi_reasons.h enum kpi_operation)
ENDPOINTS = {"text_completion": "/v1/completions", "chat": "/v1/chat/completions"}
WORDS = ["the", "cat", "sat", "on", "a", "mat", "of", "red", "wool"]


def _body(op, rnd, max_tokens, prompt_words=(2, 20)):
    text = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(*prompt_words)))
    body = {"max_tokens": rnd.randint(*max_tokens), "temperature": 0}
    if op == "chat":
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    return body


def _op(i):
    return "chat" if i % 2 else "text_completion"


def _ops(results):
    """{request id: operation}: ids end with the request's index."""
    return {r.rid: _op(int(r.rid.rsplit("-", 1)[1])) for r in results}


def mixed_load(port, n, threads=4, seed=7, prefix="mix", max_tokens=(1, 16), keepalive=0.5):
    """n requests alternating /v1/completions and /v1/chat/completions (streamed
    or not, keep-alive or fresh connections) from `threads` client threads.
    Returns (Results, {request id: gen_ai.operation.name})."""
    import agenttest as at
    out = at.run_load(port, n, threads=threads, seed=seed, prefix=prefix, keepalive=keepalive,
                      request=lambda i, rnd: (ENDPOINTS[_op(i)], _body(_op(i), rnd, max_tokens)))
    return out, _ops(out)


def mixed_burst(port, n, prefix="mixburst", max_tokens=24):
    """n requests at once on fresh connections, alternating the endpoints (to
    overflow --max-queue).  Returns (Results, {request id: operation})."""
    import agenttest as at
    out = at.burst(port, n, prefix=prefix, request=lambda i, rnd: (
        ENDPOINTS[_op(i)], _body(_op(i), rnd, (max_tokens, max_tokens), (6, 6))))
    return out, _ops(out)


tmpdir = kpitest.tmpdir


class Prometheus:
    """prometheus(1) scraping targets every second, its API on a free port."""

    def __init__(self, targets, job="kpi-agent", features=()):
        if not os.access(PROMETHEUS, os.X_OK):
            raise kpitest.Skip("prometheus is not installed (run make deps: Debian package prometheus)")
        d = tmpdir("kpi-prom-")
        cfg = os.path.join(d, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    f"scrape_configs:\n  - job_name: {job}\n    static_configs:\n"
                    f"      - targets: [{', '.join(repr(t) for t in targets)}]\n")
        self.port = kpitest.free_port()
        self.proc = kpitest.Proc([PROMETHEUS, f"--config.file={cfg}",
                                  f"--storage.tsdb.path={os.path.join(d, 'data')}",
                                  f"--web.listen-address=127.0.0.1:{self.port}",
                                  "--log.level=warn", *(f"--enable-feature={f}" for f in features)])
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if self.proc.p.poll() is not None or time.monotonic() > deadline:
                self.proc.drain()
                raise AssertionError("prometheus did not become ready:\n" + "\n".join(self.proc.lines[-20:]))
            time.sleep(0.2)

    def query(self, promql):
        """Instant query: list of (labels dict, float value)."""
        url = (f"http://127.0.0.1:{self.port}/api/v1/query?"
               + urllib.parse.urlencode({"query": promql}))
        with urllib.request.urlopen(url, timeout=10) as r:
            doc = json.load(r)
        assert doc["status"] == "success", doc
        return [(s["metric"], float(s["value"][1])) for s in doc["data"]["result"]]

    def scalar(self, promql):
        res = self.query(promql)
        return res[0][1] if res else None

    def wait_value(self, promql, want, timeout=30):
        """Polls until promql's single value equals want; returns the last value."""
        deadline = time.monotonic() + timeout
        v = None
        while time.monotonic() < deadline:
            v = self.scalar(promql)
            if v is not None and v == want:
                return v
            time.sleep(0.5)
        raise AssertionError(f"{promql} is {v} after {timeout}s, want {want}")


def series(parsed, name, **want):
    """Values of name whose labels include want (a want of None: the label is absent)."""
    return [v for (n, labels), v in parsed.items()
            if n == name and all(dict(labels).get(k) == (None if w is None else str(w))
                                 for k, w in want.items())]


def self_signed(d, name="127.0.0.1"):
    """A key and a self-signed certificate for the IP address name, made by
    openssl(1) in d; returns (cert path, key path).  The certificate is its
    own CA, readable by anyone (the agent reads it after dropping root)."""
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    p = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj", f"/CN={name}",
                        "-addext", f"subjectAltName=IP:{name}", "-keyout", key, "-out", cert],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    os.chmod(d, 0o755)
    os.chmod(cert, 0o644)
    return cert, key


class Receiver:
    """An OTLP/HTTP JSON receiver: POST /v1/traces bodies are decoded and kept;
    with tls=(cert, key) it speaks https.  connections counts the TCP
    connections it accepted (keep-alive shows as fewer than the POSTs)."""

    def __init__(self, port=None, status=200, tls=None):
        self.port = port or kpitest.free_port()
        self.bodies, self.paths, self.headers = [], [], []
        self.status = status
        self.connections = 0
        outer = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                outer.connections += 1
                super().setup()

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(n)
                outer.paths.append(self.path)
                outer.headers.append(dict(self.headers))
                outer.bodies.append(json.loads(raw))
                body = b"{}"
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.srv = ThreadingHTTPServer(("127.0.0.1", self.port), H)
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.srv.socket = ctx.wrap_socket(self.srv.socket, server_side=True)
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()
        kpitest.on_cleanup(self.stop)

    def stop(self):
        if self.srv:
            self.srv.shutdown()
            self.srv.server_close()
            self.srv = None

    def spans(self):
        """[(resource attrs dict, scope name, span)] over every body received."""
        out = []
        for b in self.bodies:
            for rs in b["resourceSpans"]:
                res = attrs(rs["resource"]["attributes"])
                for ss in rs["scopeSpans"]:
                    for sp in ss["spans"]:
                        out.append((res, ss["scope"]["name"], sp))
        return out

    def wait_spans(self, pred, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred(self.spans()):
                return
            time.sleep(0.1)
        raise AssertionError(f"receiver: condition not met in {timeout}s ({len(self.spans())} spans)")


def attrs(lst):
    """OTLP JSON attribute list -> {key: python value} (int64 strings -> int)."""
    out = {}
    for a in lst:
        v = a["value"]
        if "stringValue" in v:
            out[a["key"]] = v["stringValue"]
        elif "intValue" in v:
            out[a["key"]] = int(v["intValue"])
        elif "doubleValue" in v:
            out[a["key"]] = float(v["doubleValue"])
        elif "boolValue" in v:
            out[a["key"]] = bool(v["boolValue"])
        elif "arrayValue" in v:
            out[a["key"]] = [x.get("stringValue") for x in v["arrayValue"].get("values", [])]
        else:
            raise AssertionError(f"attribute {a['key']}: unknown value {v}")
    return out
