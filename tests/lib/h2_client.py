#!/usr/bin/python3
"""HTTP/2 clients for kpi-agent's HTTP/2 tests, run under Debian's
/usr/bin/python3 (python3-h2, python3-grpcio).  Prints one JSON object,
{request id: what the client got (its status, its "data: {" events, its
body)}, on its last line.

    h2_client.py sse PORT PREFIX STREAMS [--tls] [--hold] [--model M]
        one connection, prior knowledge (or TLS 1.2 with ALPN h2); STREAMS
        concurrent streaming chat requests (x-request-id PREFIX-k) for model
        M (default test-model).  --tls:
        one stream at a time, and the client writes only when it sends a
        request, so each exchange is a run of TLS records on the wire.
        --hold: the same again after "ready" is printed and a line is read
        from stdin (streams opened later on a connection already open).
    h2_client.py grpc PORT PREFIX CALLS
        one channel: CALLS concurrent server-streaming calls (PREFIX-sK), three
        unary ones (PREFIX-uK) and one that fails with NOT_FOUND (PREFIX-fail).

    --rounds R (both): R rounds of the STREAMS or CALLS at once, one after
    another on the same connection (ids PREFIX-rR-...), for a benchmark's
    load; --gap-ms G (sse): the server's gap between events (default 3)."""
import json, socket, ssl, sys, threading

MODEL = "test-model"
GAP_MS = 3


def _request(conn, rid, n, tls):
    sid = conn.get_next_available_stream_id()
    body = json.dumps({"model": MODEL, "stream": True, "max_tokens": n, "gap_ms": GAP_MS,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    conn.send_headers(sid, [(":method", "POST"), (":path", "/v1/chat/completions?x=1"),
                            (":scheme", "https" if tls else "http"), (":authority", "127.0.0.1"),
                            ("content-type", "application/json"), ("x-request-id", rid),
                            ("content-length", str(len(body)))])
    conn.send_data(sid, body, end_stream=True)
    return sid


def _round(sock, conn, rids, tls, got):
    """Sends the streams of rids (all at once, or one by one with --tls) and
    reads until each ended."""
    import h2.events
    pending = list(rids)
    live = {}

    def send_next():
        rid, n = pending.pop(0)
        live[_request(conn, rid, n, tls)] = rid
        got[rid] = {"events": 0, "status": None}
        sock.sendall(conn.data_to_send())

    while pending and not (tls and live):
        send_next()
    buf = {}
    while live:
        data = sock.recv(65536)
        if not data:
            raise SystemExit("server closed the connection")
        for ev in conn.receive_data(data):
            rid = live.get(getattr(ev, "stream_id", None))
            if isinstance(ev, h2.events.ResponseReceived) and rid:
                got[rid]["status"] = int(dict(ev.headers)[b":status"])
            elif isinstance(ev, h2.events.DataReceived):
                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                if rid:
                    buf[rid] = buf.get(rid, b"") + ev.data
            elif isinstance(ev, h2.events.StreamEnded) and rid:
                body = buf.pop(rid, b"")
                got[rid]["events"] = sum(e.startswith(b"data: {") for e in body.split(b"\n\n"))
                got[rid]["body"] = body.decode("latin-1")
                del live[ev.stream_id]
        if not tls:
            sock.sendall(conn.data_to_send())
        elif not live and pending:
            send_next()     # the window updates and acks go out with it
        while tls and pending and not live:
            send_next()


def sse(port, prefix, streams, tls=False, hold=False, n_rounds=1):
    import h2.config, h2.connection
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_alpn_protocols(["h2"])
        sock = ctx.wrap_socket(sock)
        assert sock.selected_alpn_protocol() == "h2", sock.selected_alpn_protocol()
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    got = {}
    rounds = 2 if hold else 1
    for r in range(rounds):
        if r:
            print("ready", flush=True)
            sys.stdin.readline()
        tag = f"{prefix}-late" if r else prefix
        for b in range(n_rounds):
            t = f"{tag}-r{b}" if n_rounds > 1 else tag
            _round(sock, conn, [(f"{t}-{k}", 3 + (k * 3) % 8) for k in range(streams)], tls, got)
    sock.close()
    return got


def grpc_calls(port, prefix, calls, n_rounds=1):
    import grpc
    ch = grpc.insecure_channel(f"127.0.0.1:{port}")
    stream = ch.unary_stream("/kpi.Gen/Stream")
    unary = ch.unary_unary("/kpi.Gen/Unary")
    got, lock = {}, threading.Lock()

    def one(k):
        rid, n = f"{prefix}-s{k}", 3 + (k * 5) % 9
        msgs = list(stream(str(n).encode(), metadata=(("x-request-id", rid),)))
        with lock:
            got[rid] = {"messages": len(msgs), "code": 0}
    for b in range(n_rounds):
        ts = [threading.Thread(target=one, args=(k + b * calls,)) for k in range(calls)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    for k in range(3):
        rid = f"{prefix}-u{k}"
        unary(b"x", metadata=(("x-request-id", rid),))
        got[rid] = {"messages": 1, "code": 0}
    try:
        list(stream(b"0", metadata=(("x-request-id", f"{prefix}-fail"),)))
        raise SystemExit("the failing call did not fail")
    except grpc.RpcError as e:
        got[f"{prefix}-fail"] = {"messages": 0, "code": e.code().value[0]}
    ch.close()
    return got


if __name__ == "__main__":
    a = sys.argv[1:]
    if "--model" in a:
        MODEL = a[a.index("--model") + 1]
    if "--gap-ms" in a:
        GAP_MS = float(a[a.index("--gap-ms") + 1])
    rounds = int(a[a.index("--rounds") + 1]) if "--rounds" in a else 1
    if a[0] == "sse":
        out = sse(int(a[1]), a[2], int(a[3]), "--tls" in a, "--hold" in a, rounds)
    else:
        out = grpc_calls(int(a[1]), a[2], int(a[3]), rounds)
    print(json.dumps(out), flush=True)
