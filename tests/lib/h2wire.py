#!/usr/bin/python3
"""h2wire.py PCAP PORT... - the HTTP/2 streams a tcpdump capture carried to and
from the given server ports, as the ground truth of kpi-agent's HTTP/2 tests.
Runs under Debian's /usr/bin/python3: header blocks are decoded with
python3-hpack (the decoder python3-h2 uses), independently of the agent's
libnghttp2.  Frames, padding, CONTINUATION, SSE events and gRPC's
length-prefixed messages are parsed here, over the TCP byte streams that
pcaptest rebuilds (every byte with the capture time of its segment).

Prints a JSON list, one object per stream: port, cport (client port), sid,
rid (x-request-id), method, path, status, grpc_status, content_type,
t_first_byte (the request HEADERS' first byte), t_req_end, content (the
times of the bytes that completed each SSE content event or gRPC message),
t_end (the last byte of the response's END_STREAM frame, or its RST_STREAM),
all CLOCK_REALTIME ns; streams whose request began before the capture are left out."""
import json, os, struct, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pcaptest                                         # noqa: E402
import hpack                                            # noqa: E402

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frames(data, times):
    """(type, flags, sid, payload, t_first, t_last, payload_times) of a direction."""
    i = len(PREFACE) if data.startswith(PREFACE) else 0
    while i + 9 <= len(data):
        n = int.from_bytes(data[i:i + 3], "big")
        if i + 9 + n > len(data):
            break
        typ, flags = data[i + 3], data[i + 4]
        sid = struct.unpack(">I", data[i + 5:i + 9])[0] & 0x7fffffff
        yield typ, flags, sid, data[i + 9:i + 9 + n], times[i], times[i + 8 + n], times[i + 9:i + 9 + n]
        i += 9 + n


def strip(typ, flags, payload, ptimes):
    """A DATA or HEADERS payload without its padding and priority fields."""
    pad = 0
    if flags & 0x08:
        pad, payload, ptimes = payload[0], payload[1:], ptimes[1:]
    if typ == 1 and flags & 0x20:
        payload, ptimes = payload[5:], ptimes[5:]
    return payload[:len(payload) - pad], ptimes[:len(ptimes) - pad]


def sse_content(body, btimes):
    out, start = [], 0
    while True:
        e = body.find(b"\n\n", start)
        if e < 0:
            return out
        if pcaptest.is_content_event(body[start:e]):
            out.append(btimes[e + 1])
        start = e + 2


def grpc_messages(body, btimes):
    out, i = [], 0
    while i + 5 <= len(body):
        n = int.from_bytes(body[i + 1:i + 5], "big")
        if i + 5 + n > len(body):
            break
        out.append(btimes[i + 4 + n])
        i += 5 + n
    return out


def direction(data, times, side, streams, port, cport):
    dec, block, bsid, bflags, bt = hpack.Decoder(), b"", 0, 0, 0
    dec.max_allowed_table_size = 65536
    for typ, flags, sid, payload, t0, t1, pt in frames(data, times):
        s = streams.get((cport, sid))
        if typ in (1, 9):
            if typ == 1:
                frag, _ = strip(typ, flags, payload, pt)
                block, bsid, bflags, bt = frag, sid, flags, t0
            else:
                block += payload
            if not flags & 0x04:
                continue
            hdr = {k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v
                   for k, v in dec.decode(block, raw=False)}
            s = streams.get((cport, bsid))
            if side == "req" and s is None:
                s = streams[(cport, bsid)] = {
                    "port": port, "cport": cport, "sid": bsid, "rid": hdr.get("x-request-id"),
                    "method": hdr.get(":method"), "path": hdr.get(":path", "").split("?")[0],
                    "t_first_byte": bt, "t_req_end": None, "status": None, "grpc_status": None,
                    "content_type": None, "body": b"", "btimes": [], "t_end": None}
            elif side == "resp" and s is not None:
                if ":status" in hdr and s["status"] is None:
                    s["status"] = int(hdr[":status"])
                    s["content_type"] = hdr.get("content-type", "")
                if "grpc-status" in hdr:
                    s["grpc_status"] = int(hdr["grpc-status"])
            if s is not None and bflags & 0x01:
                s["t_req_end" if side == "req" else "t_end"] = t1
        elif s is None:
            continue
        elif typ == 0:
            body, bts = strip(typ, flags, payload, pt)
            if side == "resp":
                s["body"] += body
                s["btimes"] += bts
            if flags & 0x01:
                s["t_req_end" if side == "req" else "t_end"] = t1
        elif typ == 3 and s["t_end"] is None:
            s["t_end"] = t1


def main(path, ports):
    out = []
    for port in ports:
        streams = {}
        for cport, (req, resp) in sorted(pcaptest.streams(path, port).items()):
            direction(*req.assemble(), "req", streams, port, cport)
            direction(*resp.assemble(), "resp", streams, port, cport)
        for s in streams.values():
            ct = s["content_type"] or ""
            s["content"] = grpc_messages(s["body"], s["btimes"]) if ct.startswith("application/grpc") \
                else sse_content(s["body"], s["btimes"]) if ct.startswith("text/event-stream") else []
            del s["body"], s["btimes"]
            out.append(s)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], [int(p) for p in sys.argv[2:]])
