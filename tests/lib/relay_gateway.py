"""A Python gateway that relays a model server's answer as it streams, for the
link tests of issue 32: asyncio, one event loop (one thread) serving every
request at once, no id passed upstream (the client's x-request-id stays
here), and the upstream's response relayed unchanged: status line, content
type, x-request-id, framing and every body byte (SSE chunks with their "id")
as they arrive.  Run: python3 relay_gateway.py PORT UPSTREAM_PORT (prints
'listening on PORT').  Client connections are kept alive; each request opens
its own upstream connection (Connection: close)."""
import asyncio, socket, sys

KEEP = ("content-type", "content-length", "transfer-encoding", "x-request-id")


async def read_head(r):
    head = await r.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    hdr = {}
    for l in lines[1:]:
        if ":" in l:
            k, v = l.split(":", 1)
            hdr[k.strip().lower()] = v.strip()
    return lines[0], hdr


async def relay_body(ur, w, hdr):
    """Copies the upstream body to the client as it comes, up to its end by
    its framing (Content-Length, chunked) or the upstream's close."""
    if "content-length" in hdr:
        left = int(hdr["content-length"])
        while left:
            data = await ur.read(min(left, 65536))
            if not data:
                return
            w.write(data)
            left -= len(data)
        return
    if hdr.get("transfer-encoding", "").lower() != "chunked":
        while data := await ur.read(65536):
            w.write(data)
        return
    while True:
        line = await ur.readuntil(b"\r\n")
        size = int(line.split(b";")[0], 16)
        data = await ur.readexactly(size + 2)
        w.write(line + data)          # one write per chunk, as it came
        if size == 0:
            return


async def serve(r, w):
    w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        while True:
            line, hdr = await read_head(r)
            body = await r.readexactly(int(hdr.get("content-length") or 0))
            method, path = line.split(" ")[:2]
            ur, uw = await asyncio.open_connection("127.0.0.1", UPSTREAM)
            uw.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            uw.write(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     f"Content-Type: {hdr.get('content-type', 'application/json')}\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            status, uhdr = await read_head(ur)
            out = status.replace("HTTP/1.0", "HTTP/1.1") + "\r\n" + "".join(
                f"{k}: {v}\r\n" for k, v in uhdr.items() if k in KEEP)
            w.write(out.encode() + b"\r\n")
            await relay_body(ur, w, uhdr)
            await w.drain()
            uw.close()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        w.close()


async def main(port):
    srv = await asyncio.start_server(serve, "127.0.0.1", port, backlog=128)
    print(f"listening on {port}", flush=True)
    async with srv:
        await srv.serve_forever()


if __name__ == "__main__":
    UPSTREAM = int(sys.argv[2])
    asyncio.run(main(int(sys.argv[1])))
