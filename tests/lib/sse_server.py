"""A stand-in OpenAI-compatible server in the Python standard library, for the
HTTP path's tests: ThreadingHTTPServer, a chat completion streamed chunked,
one wfile.write per event (or, by the x-test-mode header, several events
packed in one write, or each event split across two writes); /status/NNN
answers NNN. Run: python3 sse_server.py PORT [--nagle] (prints 'listening on
PORT'); TCP_NODELAY unless --nagle."""
import json, socket, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def chunk(data):
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse(obj):
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _plain(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.headers.get("x-request-id"):
            self.send_header("x-request-id", self.headers["x-request-id"])
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._plain(200, {"status": "ok"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path.startswith("/status/"):
            code = int(self.path.split("/")[2])
            self._plain(code, {"error": {"message": "test error", "code": code}})
            return
        n = int(body.get("max_tokens", 8))
        mode = self.headers.get("x-test-mode", "event")
        gap = float(self.headers.get("x-test-gap-ms", "2")) / 1000
        cid = "chatcmpl-test"
        events = [sse({"id": cid, "object": "chat.completion.chunk",
                       "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})]
        for i in range(n):
            events.append(sse({"id": cid, "object": "chat.completion.chunk",
                               "choices": [{"index": 0, "delta": {"content": f" tok{i}"},
                                            "finish_reason": None}]}))
        events.append(sse({"id": cid, "object": "chat.completion.chunk",
                           "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
        events.append(sse({"id": cid, "object": "chat.completion.chunk", "choices": [],
                           "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}}))
        events.append(sse(b"[DONE]"))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        if self.headers.get("x-request-id"):
            self.send_header("x-request-id", self.headers["x-request-id"])
        self.end_headers()
        try:
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
                    time.sleep(gap)
                    self.wfile.write(chunk(e))
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


class NoDelayServer(ThreadingHTTPServer):
    """TCP_NODELAY on every connection, as production servers set it: without
    it Nagle holds a small write while the previous one is unacknowledged,
    and a keep-alive client's delayed ACK puts up to 40 ms between the write
    (what the agent times) and the wire."""

    def get_request(self):
        conn, addr = super().get_request()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn, addr


if __name__ == "__main__":
    cls = ThreadingHTTPServer if "--nagle" in sys.argv else NoDelayServer
    srv = cls(("127.0.0.1", int(sys.argv[1])), Handler)
    srv.daemon_threads = True
    print(f"listening on {sys.argv[1]}", flush=True)
    srv.serve_forever()
