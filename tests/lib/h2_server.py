#!/usr/bin/python3
"""HTTP/2 servers for kpi-agent's HTTP/2 tests (tests/test_agent_h2.py), run
under Debian's /usr/bin/python3 (python3-hypercorn, python3-grpcio).

    h2_server.py asgi PORT [--tls CERT KEY]
        an ASGI app served by hypercorn on PORT: HTTP/2 in the clear (prior
        knowledge) and HTTP/1.1, or with --tls over TLS with ALPN h2 (its TLS
        runs in asyncio's memory BIOs: its SSL calls make no syscall of
        their own, as Node's).  POST /v1/chat/completions {"max_tokens": N,
        "gap_ms": G} streams N chat-completion chunks as SSE events, G ms
        apart, then [DONE].
    h2_server.py grpc PORT
        a gRPC service kpi.Gen on grpcio: Stream (server streaming: the
        request's N as decimal text, N messages back, each 20 + i bytes, 3 ms
        apart, grpc-status 0, or 5 NOT_FOUND for N = 0) and Unary (one message).

Each prints "listening on PORT" once it accepts connections."""
import asyncio, json, socket, sys, time


def _wait_listening(port):
    for _ in range(500):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.01)
    raise SystemExit(f"nothing listens on {port}")


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            m = await receive()
            if m["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif m["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = b""
    while True:
        m = await receive()
        body += m.get("body", b"")
        if not m.get("more_body"):
            break
    req = json.loads(body or b"{}")
    n, gap = int(req.get("max_tokens", 4)), float(req.get("gap_ms", 3)) / 1000
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]})
    for i in range(n):
        await asyncio.sleep(gap)
        chunk = {"id": "chatcmpl-h2", "object": "chat.completion.chunk", "model": "test-model",
                 "choices": [{"index": 0, "delta": {"content": f"tok{i} "},
                              "finish_reason": "length" if i == n - 1 else None}]}
        await send({"type": "http.response.body", "body": f"data: {json.dumps(chunk)}\n\n".encode(),
                    "more_body": True})
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})


def asgi(argv):
    from hypercorn.asyncio import serve
    from hypercorn.config import Config
    port = int(argv[0])
    cfg = Config()
    cfg.accesslog = cfg.errorlog = None
    if argv[1:2] == ["--tls"]:
        cfg.certfile, cfg.keyfile = argv[2], argv[3]
    # a socket that says it is TCP, so asyncio sets TCP_NODELAY on what it
    # accepts (hypercorn's own has proto 0, and Nagle would hold its events
    # past the writes that sent them: a delay no write() shows)
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", port))
    lsock.listen(128)
    lsock.set_inheritable(True)
    cfg.bind = [f"fd://{lsock.fileno()}"]

    async def main():
        task = asyncio.ensure_future(serve(app, cfg))
        await asyncio.get_running_loop().run_in_executor(None, _wait_listening, port)
        print(f"listening on {port}", flush=True)
        await task
    asyncio.run(main())


def grpc_server(argv):
    from concurrent import futures
    import grpc
    port = int(argv[0])

    def stream(request, context):
        n = int(request.decode() or "0")
        if n == 0:
            context.abort(grpc.StatusCode.NOT_FOUND, "no tokens asked")
        for i in range(n):
            time.sleep(0.003)
            yield b"m" * (20 + i)

    def unary(request, context):
        time.sleep(0.002)
        return b"u" * 40

    handler = grpc.method_handlers_generic_handler("kpi.Gen", {
        "Stream": grpc.unary_stream_rpc_method_handler(stream),
        "Unary": grpc.unary_unary_rpc_method_handler(unary)})
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    srv.add_generic_rpc_handlers((handler,))
    srv.add_insecure_port(f"127.0.0.1:{port}")
    srv.start()
    _wait_listening(port)
    print(f"listening on {port}", flush=True)
    srv.wait_for_termination()


if __name__ == "__main__":
    {"asgi": asgi, "grpc": grpc_server}[sys.argv[1]](sys.argv[2:])
