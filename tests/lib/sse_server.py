"""A stand-in OpenAI-compatible server in the Python standard library, for the
HTTP path's tests: ThreadingHTTPServer, a chat completion streamed chunked
(a text completion, choices[].text, on /v1/completions), one wfile.write per
event (or, by the x-test-mode header, several events
packed in one write, each event split across two writes, or "close": no
chunking, the body delimited by the close, the socket shut down for writing
(the FIN) x-test-close-pause-ms (default 0) before it is closed, as
socketserver does it, by then under load); x-test-last-chunk-ms: a pause
before the zero-length chunk, written on its own after [DONE]; /status/NNN
answers NNN; GET /static sends this file with sendfile(2). A request without x-request-id gets one of the server's in the
response (srv-N), as the servers that make their own do, so a client that
keys on the response's (kpi-bench) and the agent agree. Run:
python3 sse_server.py PORT [--nagle] [--role-with-content] [--gap-ms MS]
[--tls CERT KEY] [--host ADDR] (prints 'listening on PORT'); TCP_NODELAY unless --nagle;
--host: the address to listen on (default 127.0.0.1); a request's x-test-text header is
the text of every content event (default " tokN"); --tls:
HTTPS through Python's ssl (the system libssl), the handshake done at the accept; --gap-ms: the pause before
each event when the request's x-test-gap-ms does not say (default 2); --role-with-content: a chat stream's
role rides on its first content event instead of a role-only first event
(llama.cpp's server does so), so a client that times the first event with
choices (kpi-bench) times the first content."""
import itertools, json, os, socket, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def chunk(data):
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse(obj):
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


ROLE_WITH_CONTENT = "--role-with-content" in sys.argv
GAP_MS = sys.argv[sys.argv.index("--gap-ms") + 1] if "--gap-ms" in sys.argv else "2"
_ids = itertools.count(1)       # next() is atomic under the GIL


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _request_id(self):
        if not self.headers.get("x-request-id"):
            self.headers["x-request-id"] = f"srv-{next(_ids)}"
        return self.headers["x-request-id"]

    def log_message(self, fmt, *args):
        pass

    def _plain(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-request-id", self._request_id())
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/static":      # a file's bytes, kernel to socket: sendfile(2)
            with open(__file__, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(size))
                self.send_header("x-request-id", self._request_id())
                self.end_headers()
                self.connection.sendfile(f)
            return
        self._plain(200, {"status": "ok"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path.startswith("/status/"):
            code = int(self.path.split("/")[2])
            self._plain(code, {"error": {"message": "test error", "code": code}})
            return
        n = int(body.get("max_tokens", 8))
        text = self.headers.get("x-test-text")
        mode = self.headers.get("x-test-mode", "event")
        gap = float(self.headers.get("x-test-gap-ms", GAP_MS)) / 1000
        if self.path.split("?")[0] == "/v1/completions":
            cid, obj = "cmpl-test", "text_completion"
            events = [sse({"id": cid, "object": obj, "choices": [{"index": 0, "text": text or f" tok{i}",
                                                                  "finish_reason": None}]})
                      for i in range(n)]
            events.append(sse({"id": cid, "object": obj,
                               "choices": [{"index": 0, "text": "", "finish_reason": "length"}]}))
        else:
            cid, obj = "chatcmpl-test", "chat.completion.chunk"
            role = {"role": "assistant"}
            events = [] if ROLE_WITH_CONTENT else [sse({"id": cid, "object": obj, "choices": [
                {"index": 0, "delta": {**role, "content": ""}}]})]
            for i in range(n):
                delta = {**(role if ROLE_WITH_CONTENT and i == 0 else {}), "content": text or f" tok{i}"}
                events.append(sse({"id": cid, "object": obj,
                                   "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}))
            events.append(sse({"id": cid, "object": obj,
                               "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
        events.append(sse({"id": cid, "object": obj, "choices": [],
                           "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}}))
        events.append(sse(b"[DONE]"))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        if mode == "close":
            self.send_header("Connection", "close")
        else:
            self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", self._request_id())
        self.end_headers()
        try:
            if mode == "close":         # the body runs to the FIN
                for e in events:
                    if gap:
                        time.sleep(gap)
                    self.wfile.write(e)
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_WR)
                time.sleep(float(self.headers.get("x-test-close-pause-ms", "0")) / 1000)
                return                  # socketserver closes it
            if mode == "packed":        # three events a write
                for i in range(0, len(events), 3):
                    time.sleep(gap)
                    self.wfile.write(chunk(b"".join(events[i:i + 3])))
            elif mode == "split":       # each event's chunk across two writes
                for e in events:
                    time.sleep(gap)
                    c = chunk(e)
                    self.wfile.write(c[:len(c) // 2])
                    time.sleep(0.0005)
                    self.wfile.write(c[len(c) // 2:])
            else:
                for e in events:
                    if gap:
                        time.sleep(gap)
                    self.wfile.write(chunk(e))
            last = float(self.headers.get("x-test-last-chunk-ms", "0")) / 1000
            if last:
                time.sleep(last)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


class NoDelayServer(ThreadingHTTPServer):
    """TCP_NODELAY on every connection, as production servers set it: without
    it Nagle holds a small write while the previous one is unacknowledged,
    and a keep-alive client's delayed ACK puts up to 40 ms between the write
    (what the agent times) and the wire.  A listen backlog for many clients
    at once: socketserver's 5 drops the SYNs of a burst, which come again a
    second later."""
    request_queue_size = 128

    def get_request(self):
        conn, addr = super().get_request()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn, addr


if __name__ == "__main__":
    cls = ThreadingHTTPServer if "--nagle" in sys.argv else NoDelayServer
    host = sys.argv[sys.argv.index("--host") + 1] if "--host" in sys.argv else "127.0.0.1"
    srv = cls((host, int(sys.argv[1])), Handler)
    srv.daemon_threads = True
    if "--tls" in sys.argv:
        import ssl
        i = sys.argv.index("--tls")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(sys.argv[i + 1], sys.argv[i + 2])
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    print(f"listening on {sys.argv[1]}", flush=True)
    srv.serve_forever()
