"""A three-hop chain for the hops tests, in the Python standard library: a
gateway that calls a guardrail, then a model server, and answers with the
model's answer; a guardrail that waits the time the request asks for. Run:
python3 hop_chain.py guardrail PORT
python3 hop_chain.py gateway PORT GUARD_PORT MODEL_PORT [--propagate] [--echo PORT]
python3 hop_chain.py echo PORT
(each prints 'listening on PORT').  With --echo, the gateway also sends a
line to a line-echo server (not HTTP) for each request and reads it back,
on a connection it keeps: a client connection the agent must leave alone.  The gateway's calls carry the client's
x-request-id only with --propagate; their bodies always say whose they are
("user": the client's x-request-id), which the agent never reads and the
tests read off the wire as the truth.  The client's x-guard-wait-us header
goes to the guardrail, which sleeps that long before it answers."""
import http.client, json, socket, socketserver, sys, threading, time
from http.server import ThreadingHTTPServer

from httpfixture import Handler


class Guardrail(Handler):
    def do_POST(self):
        self.body()
        time.sleep(int(self.headers.get("x-guard-wait-us") or 0) / 1e6)
        self.answer(200, b'{"allowed":true}')


def call(port, path, body, headers):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json",
                                                                 **headers})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


class Echo(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            self.wfile.write(line)


_echo = threading.local()


def echo_line():
    """One line to the echo server and back, on this thread's connection."""
    if not ECHO_PORT:
        return
    if not getattr(_echo, "f", None):
        _echo.s = socket.create_connection(("127.0.0.1", ECHO_PORT))
        _echo.f = _echo.s.makefile("rwb")
    _echo.f.write(b"PING 1\r\n")
    _echo.f.flush()
    _echo.f.readline()


class Gateway(Handler):
    def do_POST(self):
        req = json.loads(self.body() or b"{}")
        echo_line()
        rid = self.headers.get("x-request-id", "")
        fwd = {"x-request-id": rid} if PROPAGATE and rid else {}
        st, _ = call(GUARD_PORT, "/v1/check", {"user": rid, "input": "x"},
                     {**fwd, "x-guard-wait-us": self.headers.get("x-guard-wait-us", "0")})
        if st != 200:
            return self.answer(502, b'{"error":"guardrail"}')
        st, data = call(MODEL_PORT, "/v1/completions",
                        {"user": rid, "model": req.get("model", "m"), "prompt": req.get("prompt", "hi"),
                         "max_tokens": req.get("max_tokens", 4)}, fwd)
        self.answer(st, data)


if __name__ == "__main__":
    role, port = sys.argv[1], int(sys.argv[2])
    if role == "echo":
        srv = socketserver.ThreadingTCPServer(("127.0.0.1", port), Echo)
        srv.daemon_threads = True
        print(f"listening on {port}", flush=True)
        srv.serve_forever()
    if role == "gateway":
        GUARD_PORT, MODEL_PORT = int(sys.argv[3]), int(sys.argv[4])
        PROPAGATE = "--propagate" in sys.argv
        ECHO_PORT = int(sys.argv[sys.argv.index("--echo") + 1]) if "--echo" in sys.argv else 0
    srv = ThreadingHTTPServer(("127.0.0.1", port), Gateway if role == "gateway" else Guardrail)
    srv.daemon_threads = True
    print(f"listening on {port}", flush=True)
    srv.serve_forever()
