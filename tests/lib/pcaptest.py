"""The wire as ground truth: a tcpdump capture of loopback traffic, read here
without any library, turned into per-connection byte streams whose every byte
knows the time its segment was captured.  Tests compare the agent's times with
these (the capture clock is CLOCK_REALTIME; the agent's is CLOCK_MONOTONIC, so
comparisons go through the trace's mono_to_wall offset)."""
import os, shutil, signal, struct, subprocess, time

import kpitest


def require():
    kpitest.require_root("capturing loopback traffic with tcpdump")
    if not shutil.which("tcpdump"):
        raise kpitest.Skip("tcpdump is not installed (make deps installs it)")


class Capture:
    """tcpdump -i lo on the given TCP ports, nanosecond timestamps, into a
    file; stop() flushes it and returns the path."""

    def __init__(self, ports, path=None, noise=False):
        """noise: also measure the machine's stalls meanwhile (noisetest; a
        number: the probe's period in µs): stop() leaves them in self.stalls."""
        self.path = path or os.path.join(kpitest.tmpdir("kpi-pcap-"), "lo.pcap")
        self.probe, self.stalls = None, []
        flt = " or ".join(f"tcp port {p}" for p in ports)
        # --immediate-mode: without it libpcap hands packets over a block at a
        # time, and the last ones before the stop never reach the file
        self.p = subprocess.Popen(["tcpdump", "-i", "lo", "--immediate-mode", "-U", "-n", "-s", "0", "-B", "16384",
                                   "--time-stamp-precision=nano", "-w", self.path, flt],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        kpitest.on_cleanup(self.stop)
        # tcpdump says "listening on lo" once its filter is in place
        line = self.p.stderr.readline().decode(errors="replace")
        if "listening" not in line:
            raise AssertionError(f"tcpdump did not start: {line}")
        if noise:
            import noisetest
            self.probe = noisetest.Probe(noisetest.PERIOD_US if noise is True else noise)

    def stop(self):
        if self.p.poll() is None:
            time.sleep(0.2)     # the last segments reach the kernel's buffer
            self.p.send_signal(signal.SIGINT)
            self.p.wait(10)
        if self.probe:
            self.stalls = self.probe.stop()
        return self.path


def read_pcap(path):
    """Yields (t_ns, src_port, dst_port, seq, flags, payload) for every IPv4
    TCP segment of an Ethernet/loopback capture (pcap, µs or ns precision)."""
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack("<I", data[:4])[0]
    if magic in (0xa1b2c3d4, 0xa1b23c4d):
        endian = "<"
    else:
        endian = ">"
        magic = struct.unpack(">I", data[:4])[0]
    nano = magic == 0xa1b23c4d
    linktype = struct.unpack(endian + "I", data[20:24])[0]
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack(endian + "IIII", data[off:off + 16])
        pkt = data[off + 16:off + 16 + incl]
        off += 16 + incl
        t_ns = sec * 10**9 + (frac if nano else frac * 1000)
        if linktype == 1:       # Ethernet (Linux lo): 14-byte header
            if len(pkt) < 14 or pkt[12:14] != b"\x08\x00":
                continue
            ip = pkt[14:]
        elif linktype == 113:   # Linux cooked
            ip = pkt[16:]
        else:
            raise AssertionError(f"unexpected link type {linktype}")
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
            continue
        ihl = (ip[0] & 15) * 4
        total = struct.unpack(">H", ip[2:4])[0]
        tcp = ip[ihl:total]
        sport, dport, seq = struct.unpack(">HHI", tcp[:8])
        doff = (tcp[12] >> 4) * 4
        yield t_ns, sport, dport, seq, tcp[13], tcp[doff:]


class Stream:
    """One direction of one connection: its bytes in order and, per byte
    offset, the capture time of the segment that first carried it."""

    def __init__(self):
        self.base = None
        self.chunks = {}        # relative seq -> (t_ns, bytes); retransmits keep the first
        self.fin = None         # when its FIN was first on the wire (the sender's end)

    def add(self, t_ns, seq, flags, payload):
        if self.base is None:
            self.base = (seq + 1) if flags & 0x02 else seq      # SYN takes one
        if flags & 0x01 and self.fin is None:
            self.fin = t_ns
        if payload:
            rel = (seq - self.base) & 0xffffffff
            self.chunks.setdefault(rel, (t_ns, payload))

    def assemble(self):
        """(bytes, times): times[i] is when byte i was first on the wire."""
        out, times = bytearray(), []
        for rel in sorted(self.chunks):
            t, payload = self.chunks[rel]
            if rel > len(out):          # a hole (a lost capture): stop there
                break
            new = payload[len(out) - rel:]
            out += new
            times += [t] * len(new)
        return bytes(out), times


def streams(path, server_port):
    """{client_port: (request Stream, response Stream)} for connections to
    server_port."""
    conns = {}
    for t, sport, dport, seq, flags, payload in read_pcap(path):
        if dport == server_port:
            conns.setdefault(sport, (Stream(), Stream()))[0].add(t, seq, flags, payload)
        elif sport == server_port:
            conns.setdefault(dport, (Stream(), Stream()))[1].add(t, seq, flags, payload)
    return conns


def client_fins(path, server_port):
    """{client_port: the capture time of the client's first FIN or RST} on
    connections to server_port: when a client that gave up on an answer
    closed (its call ended there, whatever the server wrote after)."""
    out = {}
    for t, sport, dport, _, flags, _ in read_pcap(path):
        if dport == server_port and flags & 0x05 and sport not in out:
            out[sport] = t
    return out


def _messages(data, times, is_request):
    """Splits an HTTP/1.1 byte stream into messages: (head, body, t_first,
    t_last, body_offset_in_data, end_offset). Content-Length and chunked
    framing; a response without either runs to the end."""
    out, i = [], 0
    while i < len(data):
        h = data.find(b"\r\n\r\n", i)
        if h < 0:
            break
        head = data[i:h].decode("latin-1")
        lines = head.split("\r\n")
        hdr = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip()
               for l in lines[1:] if ":" in l}
        b = h + 4
        if not is_request and lines[0].split(" ")[1:2] == ["100"]:
            i = b       # an interim response: not the response
            continue
        if "content-length" in hdr:
            end = b + int(hdr["content-length"])
        elif hdr.get("transfer-encoding", "").lower() == "chunked":
            end = b
            while True:
                nl = data.find(b"\r\n", end)
                if nl < 0:
                    end = len(data)
                    break
                size = int(data[end:nl].split(b";")[0], 16)
                end = nl + 2 + size + 2
                if size == 0:
                    break
        else:
            end = b if is_request else len(data)
        end = min(end, len(data))
        out.append((lines[0], hdr, data[b:end], times[i], times[end - 1], b, end))
        i = end
    return out


def exchanges(path, server_port, is_event=None):
    """Every request/response pair on the wire to server_port, in order per
    connection: dicts with the request line, headers, body, the first request byte's
    time, the response status, the time of the first SSE event carrying
    generated content (None for none), the number of such events, the
    time of the response's last byte, the server's FIN on the connection
    (t_fin, None for none), t_end, when the client saw the response end:
    its last byte, or for a body delimited by the close (neither
    Content-Length nor chunked) the FIN, and the stream's reasoning marks
    (reasoning_of). Times are CLOCK_REALTIME ns.
    is_event(event bytes): which events count (default is_content_event;
    is_token_event counts every token, its text empty or not)."""
    result = []
    for cport, (req, resp) in sorted(streams(path, server_port).items()):
        qdata, qtimes = req.assemble()
        rdata, rtimes = resp.assemble()
        reqs = _messages(qdata, qtimes, True)
        resps = _messages(rdata, rtimes, False)
        for (qline, qhdr, qbody, q_first, q_last, _, _), r in zip(reqs, resps):
            rline, rhdr, body, r_first, r_last, b_off, _ = r
            events = _sse_events(rdata, rtimes, b_off, body, rhdr)
            counts = is_event or is_content_event
            first_content = next((t for e, t in events if counts(e)), None)
            n_content = sum(bool(counts(e)) for e, _ in events)
            by_close = "content-length" not in rhdr and \
                rhdr.get("transfer-encoding", "").lower() != "chunked" and rline.split(" ")[1] not in ("204", "304")
            result.append({"request_line": qline, "request_headers": qhdr, "request_body": qbody,
                           "t_first_byte": q_first,
                           "t_request_read": q_last, "status": int(rline.split(" ")[1]),
                           "response_headers": rhdr, "t_response_first_byte": r_first,
                           "t_first_content": first_content, "content_events": n_content,
                           "t_last_byte": r_last, "t_fin": resp.fin,
                           "t_end": resp.fin if by_close and resp.fin else r_last, "client_port": cport,
                           "reasoning": reasoning_of(events)})
    return result


def exchanges_by_id(path, server_port):
    """exchanges(), keyed by the request's x-request-id."""
    return {x["request_headers"].get("x-request-id"): x for x in exchanges(path, server_port)}


def _sse_events(rdata, rtimes, b_off, body, rhdr):
    """The SSE events of a response body: (event bytes, the wire time of the
    byte that completes it, its blank line), as the agent times an event by
    the write that completes it.  [] when the body is not an event stream."""
    if "text/event-stream" not in rhdr.get("content-type", ""):
        return []
    chunked = rhdr.get("transfer-encoding", "").lower() == "chunked"
    # map every payload byte back to its offset in rdata
    payload, offsets = bytearray(), []
    i = 0
    if chunked:
        while i < len(body):
            nl = body.find(b"\r\n", i)
            if nl < 0:
                break
            size = int(body[i:nl].split(b";")[0], 16)
            if size == 0:
                break
            payload += body[nl + 2:nl + 2 + size]
            offsets += range(b_off + nl + 2, b_off + nl + 2 + size)
            i = nl + 2 + size + 2
    else:
        payload += body
        offsets += range(b_off, b_off + len(body))
    text = bytes(payload).replace(b"\r\n", b"\n") if b"\r\n" in payload else bytes(payload)
    if text is not payload and len(text) != len(payload):
        raise AssertionError("CRLF-separated SSE is not handled by this reader")
    out, start = [], 0
    while True:
        e = text.find(b"\n\n", start)
        if e < 0:
            break
        out.append((text[start:e], rtimes[offsets[e + 1]]))
        start = e + 2
    return out


def _event_json(event):
    """An event's data as JSON (None for none, [DONE] or not JSON) and its
    event: name ("" none)."""
    import json
    lines = event.split(b"\n")
    name = next((l[6:].strip().decode() for l in lines if l.startswith(b"event:")), "")
    data = b"".join(l[5:].strip() for l in lines if l.startswith(b"data:"))
    if not data or data == b"[DONE]":
        return None, name
    try:
        return json.loads(data), name
    except ValueError:
        return None, name


def is_content_event(event):
    """The same rule as the agent's (docs/agent.md): an event whose data
    carries generated text (answer or reasoning), not a role-only chunk,
    comment or [DONE]; of the Responses API every response.*.delta event."""
    j, name = _event_json(event)
    if not isinstance(j, dict):
        return False
    rtype = name if name.startswith("response.") else j.get("type") or ""
    if rtype.startswith("response."):
        return rtype.endswith(".delta")
    for c in j.get("choices") or []:
        if c.get("text"):
            return True
        d = c.get("delta") or {}
        if d.get("content") or d.get("reasoning_content") or d.get("reasoning"):
            return True
        if any((tc.get("function") or {}).get("arguments") for tc in d.get("tool_calls") or []):
            return True
    return False


def is_token_event(event):
    """An event that carries a generated token, whatever its text: a
    completions or chat chunk with choices (kpi-infer sends one per token;
    a byte-level model's token can decode to no text yet)."""
    import json
    data = b"".join(l[5:].strip() for l in event.split(b"\n") if l.startswith(b"data:"))
    if not data or data == b"[DONE]":
        return False
    try:
        return bool(json.loads(data).get("choices"))
    except ValueError:
        return False
def _event_parts(event):
    """What one event carries: (reasoning text, answer text, tool call) where
    answer text is content / text before any <think> handling; a tool call is
    a tool_calls delta (its name or its arguments) or a Responses API
    function-call item or arguments delta."""
    j, name = _event_json(event)
    if not isinstance(j, dict):
        return "", "", False
    rtype = name if name.startswith("response.") else j.get("type") or ""
    if rtype.startswith("response."):
        if rtype in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            return j.get("delta") or "", "", False
        if rtype == "response.output_text.delta":
            return "", j.get("delta") or "", False
        if rtype == "response.function_call_arguments.delta":
            return "", j.get("delta") or "", True
        item = j.get("item") or {}
        return "", "", rtype == "response.output_item.added" and item.get("type") == "function_call"
    reasoning, answer, tool = "", "", False
    for c in j.get("choices") or []:
        d = c.get("delta") or {}
        reasoning += d.get("reasoning_content") or d.get("reasoning") or ""
        answer += (c.get("text") or "") + (d.get("content") or "")
        for tc in d.get("tool_calls") or []:
            tool = True
            answer += (tc.get("function") or {}).get("arguments") or ""
    return reasoning, answer, tool


def reasoning_of(events):
    """The reasoning marks of a stream, from its events [(bytes, t)], by the
    rule docs/agent.md gives (computed here from whole events and whole
    strings, independently of the agent's bounded scan): reasoning is what
    reasoning fields carry, and inline content from <think> (or, when the
    stream never opens one, from its start) to </think>; an event with any
    answer byte is an answer event, one with reasoning bytes only a reasoning
    event.  {t_first_content, t_first_reasoning, t_first_answer, t_first_tool,
    reasoning_events, answer_events}, times None when absent."""
    parts = [(_event_parts(e), t) for e, t in events if is_content_event(e) or _event_parts(e)[2]]
    inline = "".join(a for (_, a, _), _ in parts)
    opened, closes = inline.find("<think>"), inline.find("</think>")
    # the inline reasoning, as offsets into the stream's content: [lo, hi)
    if closes >= 0:
        lo, hi = (opened if 0 <= opened < closes else 0), closes + len("</think>")
    elif opened >= 0:
        lo, hi = opened, len(inline)
    else:
        lo = hi = 0
    out = {"t_first_content": None, "t_first_reasoning": None, "t_first_answer": None,
           "t_first_tool": None, "reasoning_events": 0, "answer_events": 0}
    pos = 0
    for (reasoning, answer, tool), t in parts:
        a0, pos = pos, pos + len(answer)
        in_think = max(0, min(pos, hi) - max(a0, lo))     # answer bytes inside [lo, hi)
        r = bool(reasoning) or in_think > 0
        a = len(answer) - in_think > 0
        if tool and out["t_first_tool"] is None:
            out["t_first_tool"] = t
        if not (r or a):
            continue
        if out["t_first_content"] is None:
            out["t_first_content"] = t
        if a:
            out["answer_events"] += 1
            if out["t_first_answer"] is None:
                out["t_first_answer"] = t
        else:
            out["reasoning_events"] += 1
        if r and out["t_first_reasoning"] is None:
            out["t_first_reasoning"] = t
    return out


def tls_records(data, times):
    """A TLS byte stream's records: (content type, time of the first byte's
    segment, time of the last byte's); a record cut short by the capture ends
    the list."""
    out, i = [], 0
    while i + 5 <= len(data):
        n = 5 + struct.unpack(">H", data[i + 3:i + 5])[0]
        if i + n > len(data):
            break
        out.append((data[i], times[i], times[i + n - 1]))
        i += n
    return out


def tls12_exchanges(path, server_port):
    """{client_port: [exchange, ...]} of TLS 1.2 connections to server_port,
    timed from the records alone (TLS 1.2 wraps no handshake message in an
    application-data record, so those are the HTTP exchange's): a request is
    a run of the client's application-data records, its response the server's
    that follow until the client's next request.  Each exchange: t_first_byte
    (the request's first record), t_response_first_byte, t_last_byte (the end
    of the response's last record), CLOCK_REALTIME ns, and records: the
    response's records, (first byte, last byte) each."""
    out = {}
    for cport, (req, resp) in streams(path, server_port).items():
        ev = [(t0, t1, "q") for ct, t0, t1 in tls_records(*req.assemble()) if ct == 23]
        ev += [(t0, t1, "r") for ct, t0, t1 in tls_records(*resp.assemble()) if ct == 23]
        ev.sort()
        xs = []
        for t0, t1, who in ev:
            if who == "q" and (not xs or xs[-1]["t_last_byte"] is not None):
                xs.append({"t_first_byte": t0, "t_response_first_byte": None, "t_last_byte": None,
                           "records": []})
            elif who == "r" and xs:
                if xs[-1]["t_response_first_byte"] is None:
                    xs[-1]["t_response_first_byte"] = t0
                xs[-1]["t_last_byte"] = t1
                xs[-1]["records"].append((t0, t1))
        out[cport] = xs
    return out

