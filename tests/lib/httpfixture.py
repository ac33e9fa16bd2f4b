"""What the tests' Python HTTP fixtures share (sse_server.py, hop_chain.py,
task_agent.py, cascade_gateway.py): a quiet HTTP/1.1 handler with body and
answer helpers, and the threading server with TCP_NODELAY they run on."""
import json, socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def body(self):
        n = int(self.headers.get("content-length") or 0)
        return self.rfile.read(n) if n else b""

    def json_body(self):
        return json.loads(self.body() or b"{}")

    def answer(self, status, data, ctype="application/json", extra=None):
        """One response with a Content-Length; data: bytes, or an object sent
        as JSON.  A client gone meanwhile ends the connection."""
        data = data if isinstance(data, bytes) else json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


class NoDelayServer(ThreadingHTTPServer):
    """TCP_NODELAY on every connection, as production servers set it: without
    it Nagle holds a small write while the previous one is unacknowledged,
    and a keep-alive client's delayed ACK puts up to 40 ms between the write
    (what the agent times) and the wire.  A listen backlog for many clients
    at once: socketserver's 5 drops the SYNs of a burst, which come again a
    second later.  Handler threads do not hold the process at exit."""
    request_queue_size = 128
    daemon_threads = True

    def get_request(self):
        conn, addr = super().get_request()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn, addr
