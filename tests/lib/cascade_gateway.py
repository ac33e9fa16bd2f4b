"""A model cascade for the cascade tests (issue 32), in the Python standard
library: a gateway that asks a small model first and escalates a known share
of requests to a large one with the same request.  Run:
python3 cascade_gateway.py PORT SMALL_PORT LARGE_PORT LOG [--share P]
(prints 'listening on PORT').  POST /v1/chat/completions: the client's body
goes to SMALL_PORT with "model": "small" (not streamed); the request is then
escalated - the same body, "model": "large", to LARGE_PORT - when its
x-cascade header says "escalate", or, without the header, when the CRC-32 of
its x-request-id falls in the share P (default 0.3) of the range; the client
gets the last answer.  One thread a request (ThreadingHTTPServer); the client's
x-request-id is not passed on.  LOG gets one JSON line a request: id,
escalated, status, and the CLOCK_MONOTONIC ns around each call (small_t0,
small_t1, large_t0, large_t1).  Each call's body names its request ("user"),
which the agent never reads and the tests read off the wire."""
import http.client, json, sys, threading, time, zlib

from httpfixture import Handler, NoDelayServer


def call(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        c.request("POST", "/v1/chat/completions", body=json.dumps(body),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def escalates(rid, header, share):
    if header in ("escalate", "keep"):
        return header == "escalate"
    return zlib.crc32(rid.encode()) % 1000 < share * 1000


class Gateway(Handler):
    def do_POST(self):
        req = self.json_body()
        rid = self.headers.get("x-request-id", "")
        body = {**req, "user": rid, "stream": False}
        entry = {"id": rid, "escalated": False}
        entry["small_t0"] = time.monotonic_ns()
        st, data = call(SMALL_PORT, {**body, "model": "small"})
        entry["small_t1"] = time.monotonic_ns()
        if st == 200 and escalates(rid, self.headers.get("x-cascade"), SHARE):
            entry["escalated"] = True
            entry["large_t0"] = time.monotonic_ns()
            st, data = call(LARGE_PORT, {**body, "model": "large"})
            entry["large_t1"] = time.monotonic_ns()
        entry["status"] = st
        self.answer(st, data)
        with LOCK, open(LOG, "a") as f:
            f.write(json.dumps(entry) + "\n")


def read_log(path):
    """The gateway's requests, by id."""
    with open(path) as f:
        return {e["id"]: e for e in map(json.loads, f)}


if __name__ == "__main__":
    port, SMALL_PORT, LARGE_PORT, LOG = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    SHARE = float(sys.argv[sys.argv.index("--share") + 1]) if "--share" in sys.argv else 0.3
    LOCK = threading.Lock()
    srv = NoDelayServer(("127.0.0.1", port), Gateway)
    print(f"listening on {port}", flush=True)
    srv.serve_forever()
