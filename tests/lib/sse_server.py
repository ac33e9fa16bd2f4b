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
[--tls CERT KEY] [--host ADDR] [--fixed-id ID] (prints 'listening on PORT'); TCP_NODELAY unless
--nagle; --host: the address to listen on (default 127.0.0.1); a request's x-test-text header
is the text of every content event (default " tokN"); --fixed-id: every response's x-request-id
is ID, whatever the request's (as the chunks' ids are always the same: answers a relay cannot
be told apart by); --tls:
HTTPS through Python's ssl (the system libssl), the handshake done at the accept; --gap-ms: the pause before
each event when the request's x-test-gap-ms does not say (default 2); --role-with-content: a chat stream's
role rides on its first content event instead of a role-only first event
(llama.cpp's server does so), so a client that times the first event with
choices (kpi-bench) times the first content.

Reasoning (issue 32): the x-test-reasoning header makes the first K of the n
token events reasoning (K from x-test-reasoning-events, default n // 2), in
one of the shapes servers send it: reasoning (delta.reasoning, vLLM now),
reasoning_content (delta.reasoning_content: SGLang, llama.cpp, older vLLM),
think (inline <think>...</think> in content, the boundary inside the last
reasoning event: " r3</think>\n\na0"), think-split-event (</think> cut
across two events: "</thi" | "nk>..."), think-split-write (the event with
</think> written in two writes cut inside the tag), think-no-open (only the
closing tag, as DeepSeek-R1's template leaves it).  POST /v1/responses
answers as the Responses API (response.created, response.reasoning_text.delta
for the K reasoning events, response.output_text.delta, response.completed
with usage); x-test-reasoning is then implied.  x-test-tool-call: 1 makes the
answer a tool call (delta.tool_calls: the name first, with empty arguments,
then argument deltas; response.output_item.added and
response.function_call_arguments.delta)."""
import itertools, json, os, socket, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from httpfixture import NoDelayServer


def chunk(data):
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse(obj):
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


ROLE_WITH_CONTENT = "--role-with-content" in sys.argv
GAP_MS = sys.argv[sys.argv.index("--gap-ms") + 1] if "--gap-ms" in sys.argv else "2"
FIXED_ID = sys.argv[sys.argv.index("--fixed-id") + 1] if "--fixed-id" in sys.argv else None
_ids = itertools.count(1)       # next() is atomic under the GIL


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _request_id(self):
        if FIXED_ID:
            return FIXED_ID
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
        events, split = stream_events(self.path.split("?")[0], n, self.headers, text)
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
            elif split:                 # the event with </think> across two writes, cut in the tag
                for i, e in enumerate(events):
                    time.sleep(gap)
                    c = chunk(e)
                    if i in split:
                        at = c.index(b"\r\n") + 2 + split[i]
                        self.wfile.write(c[:at])
                        time.sleep(0.0005)
                        c = c[at:]
                    self.wfile.write(c)
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


SHAPES = ("reasoning", "reasoning_content", "think", "think-split-event", "think-split-write",
          "think-no-open")


def _think_pieces(shape, n, k):
    """The content of each of n token events when the first k reason inline
    (<think> ... </think>): the tag's cut as the shape says."""
    out = [(("<think>" if i == 0 and shape != "think-no-open" else "") + f" r{i}") for i in range(k)]
    out += [f" a{j}" for j in range(n - k)]
    if 0 < k < n:
        if shape == "think-split-event":
            out[k - 1] += "</thi"
            out[k] = "nk>\n\n" + out[k]
        elif shape == "think-split-write":
            out[k] = "</think>\n\n" + out[k]
        else:
            out[k - 1] += "</think>\n\n" + out[k]
            out[k] = f" a{n - k}"
    return out


def _responses_events(n, k, tool):
    """The Responses API's stream: k reasoning deltas, then n - k answer
    deltas (output text, or a function call's arguments)."""
    def ev(typ, **kw):
        return b"event: " + typ.encode() + b"\n" + sse({"type": typ, **kw})
    out = [ev("response.created", response={"id": "resp-test", "status": "in_progress"})]
    out += [ev("response.reasoning_text.delta", item_id="rs-1", delta=f" r{i}") for i in range(k)]
    if tool:
        out.append(ev("response.output_item.added", item={"type": "function_call", "id": "fc-1",
                                                          "name": "get_weather", "arguments": ""}))
        out += [ev("response.function_call_arguments.delta", item_id="fc-1", delta=f'{{"a{j}":1}}')
                for j in range(n - k)]
    else:
        out += [ev("response.output_text.delta", item_id="msg-1", delta=f" a{j}") for j in range(n - k)]
    out.append(ev("response.completed", response={
        "id": "resp-test", "status": "completed",
        "usage": {"input_tokens": 5, "output_tokens": n,
                  "output_tokens_details": {"reasoning_tokens": k}}}))
    return out


def stream_events(path, n, headers, text=None):
    """The events of a streamed answer of n tokens (text: every answer
    event's text, default " tokN"), and {event index: the
    byte offset in that event where its write is cut} (think-split-write)."""
    shape = headers.get("x-test-reasoning", "")
    k = int(headers.get("x-test-reasoning-events") or n // 2) if shape or path == "/v1/responses" else 0
    k = min(k, n)
    tool = headers.get("x-test-tool-call") == "1"
    if shape and shape not in SHAPES:
        raise ValueError(f"x-test-reasoning: {shape!r} is not one of {SHAPES}")
    if path == "/v1/responses":
        return _responses_events(n, k, tool), {}
    usage = {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}
    if path == "/v1/completions":
        cid, obj = "cmpl-test", "text_completion"
        pieces = _think_pieces(shape, n, k) if shape.startswith("think") else [text or f" tok{i}" for i in range(n)]
        events = [sse({"id": cid, "object": obj, "choices": [{"index": 0, "text": t,
                                                              "finish_reason": None}]})
                  for t in pieces]
        events.append(sse({"id": cid, "object": obj,
                           "choices": [{"index": 0, "text": "", "finish_reason": "length"}]}))
    else:
        cid, obj = "chatcmpl-test", "chat.completion.chunk"
        role = {"role": "assistant"}
        events = [] if ROLE_WITH_CONTENT else [sse({"id": cid, "object": obj, "choices": [
            {"index": 0, "delta": {**role, "content": ""}}]})]
        inline = _think_pieces(shape, n, k) if shape.startswith("think") else None
        for i in range(n):
            if inline:
                delta = {"content": inline[i]}
            elif i < k:
                delta = {shape: f" r{i}"}
            elif tool:
                fn = {"name": "get_weather", "arguments": ""} if i == k else {"arguments": f'{{"a{i}":1}}'}
                delta = {"tool_calls": [{"index": 0, **({"id": "call-1", "type": "function"} if i == k else {}),
                                         "function": fn}]}
            else:
                delta = {"content": (text or f" tok{i}") if not shape else f" a{i - k}"}
            if ROLE_WITH_CONTENT and i == 0:
                delta = {**role, **delta}
            events.append(sse({"id": cid, "object": obj,
                               "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}))
        events.append(sse({"id": cid, "object": obj,
                           "choices": [{"index": 0, "delta": {},
                                        "finish_reason": "tool_calls" if tool else "length"}]}))
    if k:
        usage["completion_tokens_details"] = {"reasoning_tokens": k}
    events.append(sse({"id": cid, "object": obj, "choices": [], "usage": usage}))
    events.append(sse(b"[DONE]"))
    split = {}
    if shape == "think-split-write" and 0 < k < n:
        i = next(i for i, e in enumerate(events) if b"</think>" in e)
        split[i] = events[i].index(b"</think>") + 4         # "</th" | "ink>"
    return events, split


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
