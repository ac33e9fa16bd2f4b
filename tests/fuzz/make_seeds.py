#!/usr/bin/env python3
"""Writes the committed seed corpora of the fuzz targets into
tests/fuzz/corpus/<target>/. Run it again after changing the inputs a target
expects; libFuzzer grows its own working copy under build/fuzz/work/."""
import json, os, struct

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def http_seeds():
    body = b'{"prompt":"hi","max_tokens":4}'
    put("http", "post_cl", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nX-Request-Id: abc-123\r\n\r\n" % len(body) + body)
    put("http", "get_keepalive", "GET /metrics?x=1 HTTP/1.0\r\nConnection: keep-alive, Upgrade\r\n\r\n")
    put("http", "chunked", b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
        b"Expect: 100-continue\r\n\r\n5;ext=1\r\n{\"pro\r\n1A\r\nmpt\":\"hi\",\"max_tokens\":4}\r\n0\r\nTrailer: x\r\n\r\n")
    put("http", "bare_lf", "\r\n\nGET /health HTTP/1.1\nX-Request-Id: a b\xff\n\n")
    put("http", "te_and_cl", "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n")
    put("http", "bad_version", "GET / HTTP/2.0\r\n\r\n")
    put("http", "folding", "GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n")
    put("http", "chunk_bad_size", b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n")


def json_seeds():
    seeds = {
        "completion": {"prompt": "Once upon", "max_tokens": 8, "temperature": 0.5, "top_p": 0.9,
                       "seed": 7, "stop": ["\n", "end"], "stream": True,
                       "stream_options": {"include_usage": True}, "ignore_eos": False, "n": 1,
                       "model": "tiny"},
        "ids": {"prompt": [1, 72, 105, 2147483647], "max_tokens": 1},
        "one_string": {"prompt": ["x"], "stop": "y"},
        "chat": {"messages": [{"role": "system", "content": "be brief"},
                              {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                              {"role": "assistant", "content": None},
                              {"role": "developer", "content": "x"}],
                 "max_completion_tokens": 3},
        "wrong_types": {"prompt": 5, "max_tokens": "8", "temperature": -1, "top_p": 0,
                        "stop": [1], "stream": "yes"},
    }
    for k, v in seeds.items():
        put("json", k, json.dumps(v))
    put("json", "deep", "[" * 200 + "]" * 200)
    put("json", "dup_keys", '{"prompt":"a","prompt":"b"}')
    put("json", "escapes", '{"prompt":"\\ud800\\u0000\\n","max_tokens":1e308}')
    put("json", "big_numbers", '{"prompt":[-1, 99999999999999999999],"seed":-5,"max_tokens":0}')


def kv_wire_seeds():
    # a header that passes every check for 5 tokens (struct kpi_kv_header), then
    # frames without a valid checksum: the reader's paths up to the end frame
    n_tok, layers, heads, hd = 5, 3, 2, 8
    payload = layers * n_tok * 2 * heads * hd * 2
    hdr = struct.pack("<IHHQ64sIIIIIIQIIQ", 0x564B504B, 2, 128, 0x1234567890ABCDEF, b"tiny",
                      layers, heads, hd, 1, 16, n_tok, payload, 259, 0, 0)
    per, c = payload // layers, 2  # two positions from the cache, three computed
    body = b"".join(struct.pack("<IIIIQ", 0x594C504B, l, 0, c, per * c // n_tok) + bytes(per * c // n_tok)
                    for l in range(layers))
    body += b"".join(struct.pack("<IIIIQ", 0x594C504B, l, c, n_tok - c, per * (n_tok - c) // n_tok) +
                     bytes(per * (n_tok - c) // n_tok) for l in range(layers))
    end = struct.pack("<IIiIQQ", 0x444E504B, 0, 42, n_tok, 7, 0)
    put("kv_wire", "five_tokens", bytes([4, 13]) + hdr + body + end)
    put("kv_wire", "header_only", bytes([4, 96]) + hdr)
    put("kv_wire", "bad_version", bytes([4, 1]) + hdr[:4] + b"\x01\x00" + hdr[6:])


def chat_seeds():
    def msg(role, text):
        b = text.encode()
        return bytes([role, len(b)]) + b
    put("chat", "two", msg(0, "You are terse.") + msg(1, "Hello there") + b"tail")
    put("chat", "utf8", msg(1, "caf\u00e9 \u2581 \U0001F600") + b"\xff\xc3")
    put("chat", "stop", msg(2, "</s>") + msg(1, "a </s> b"))
    put("chat", "empty", b"")


# ---- the agent's HTTP/SSE stream tracker: steps of fuzz_agent_http_track.c --
IN, OUT = 0, 1
CAP_ALL, CAP_HALF, CAP_NONE, CAP_GAP = 0, 12, 13, 14


def track_feed(d, data, adv=1, cap=CAP_ALL):
    """One read (IN) or write (OUT), in steps of at most 256 bytes."""
    data = data.encode() if isinstance(data, str) else data
    out = b""
    for i in range(0, len(data), 256):
        piece = data[i:i + 256]
        out += bytes([(cap << 4) | (adv << 1) | d, len(piece) - 1]) + piece
    return out


def track_close(by_client=False):
    return bytes([(7 << 1) | (0x10 if by_client else 0)])


def chunk(s):
    return "%x\r\n%s\r\n" % (len(s.encode()), s)


def track_seeds():
    body = '{"messages":[{"role":"user","content":"hi"}],"model":"m","stream":true,"max_tokens":8}'
    req = ("POST /v1/chat/completions HTTP/1.1\r\nX-Request-Id: r1\r\nContent-Length: %d\r\n\r\n%s"
           % (len(body), body))
    head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    pre = 'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,'
    events = [pre + '"delta":{"role":"assistant","content":""}}]}\n\n',
              pre + '"delta":{"content":"Hi"},"finish_reason":null}]}\n\n',
              pre + '"delta":{"content":"!"},"finish_reason":"stop"}]}\n\n',
              'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n',
              "data: [DONE]\n\n"]
    stream = track_feed(IN, req) + track_feed(OUT, head)
    stream += b"".join(track_feed(OUT, chunk(e)) for e in events) + track_feed(OUT, "0\r\n\r\n")
    put("agent_http_track", "chat_stream", stream)
    put("agent_http_track", "chat_stream_packed", track_feed(IN, req) + track_feed(
        OUT, head + chunk("".join(events[:3])) + chunk("".join(events[3:])) + "0\r\n\r\n", adv=2))
    put("agent_http_track", "pipelined", track_feed(
        IN, "GET /a HTTP/1.1\r\n\r\nHEAD /b HTTP/1.1\r\n\r\nPOST /c HTTP/1.1\r\nTransfer-Encoding: chunked"
        "\r\n\r\n2\r\n{}\r\n0\r\n\r\n") + track_feed(
        OUT, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n"
        "HTTP/1.1 429 Too Many\r\nx-request-id: q\r\nContent-Length: 0\r\n\r\n"))
    put("agent_http_track", "gap_chunk_size", track_feed(IN, req) + track_feed(OUT, head) +
        track_feed(OUT, chunk(events[1]) + chunk(events[2]), cap=CAP_HALF) +
        track_feed(IN, req, adv=3) + track_feed(OUT, head) + track_feed(OUT, chunk(events[1]) + "0\r\n\r\n"))
    put("agent_http_track", "responses_api", track_feed(IN, req) + track_feed(OUT, head) + b"".join(
        track_feed(OUT, chunk("event: %s\ndata: {\"type\":\"%s\",\"delta\":\"x\"}\n\n" % (t, t)))
        for t in ("response.created", "response.output_text.delta", "response.completed")))
    put("agent_http_track", "continue_close", track_feed(
        IN, "POST /v1/completions HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 12\r\n\r\n") +
        track_feed(OUT, "HTTP/1.1 100 Continue\r\n\r\n") + track_feed(IN, '{"stream":0}') +
        track_feed(OUT, "HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n: ping\r\n\r\n"
                   'data: {"choices":[{"text":"a"}]}\r\n\r\n') + track_close())
    put("agent_http_track", "sendfile_gap", track_feed(IN, "GET /f HTTP/1.1\r\n\r\n") + track_feed(
        OUT, "HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n") + track_feed(OUT, "x" * 200, cap=CAP_NONE) +
        track_feed(OUT, "x" * 100, cap=CAP_GAP) + bytes([6 << 1]) + track_feed(IN, "GET /g HTTP/1.1\r\n\r\n"))
    put("agent_http_track", "midstream_disconnect", bytes([0xff]) + track_feed(OUT, events[1]) +
        track_feed(IN, req) + track_feed(OUT, head + chunk(events[1])) + track_close(by_client=True))


# ---- the agent's HTTP/2 and gRPC tracker: steps of fuzz_agent_http2.c ------
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def h2_frame(typ, flags, sid, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([typ, flags]) + sid.to_bytes(4, "big") + payload


def hp_lit(name, value, index=False):
    """An HPACK literal with a new name (incremental indexing or not), no Huffman."""
    name, value = (x.encode() if isinstance(x, str) else x for x in (name, value))
    return bytes([0x40 if index else 0x00, len(name)]) + name + hp_len(value) + value


def hp_len(v):
    n = len(v)
    return bytes([n]) if n < 127 else bytes([127]) + _varint(n - 127)


def _varint(n):
    out = b""
    while n >= 128:
        out += bytes([n % 128 + 128])
        n //= 128
    return out + bytes([n])


def h2_repeat(count16, step):
    """One step fed count16 * 16 times (fuzz_agent_http2.c's 0xfc)."""
    return bytes([0xfc, count16]) + step


def h2_seeds():
    req = bytes([0x83, 0x86, 0x04, 20]) + b"/v1/chat/completions" + hp_lit("x-request-id", "r1", True)
    body = b'{"model":"m","stream":true,"max_tokens":3}'
    sse_head = bytes([0x88]) + hp_lit("content-type", "text/event-stream", True)
    ev = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
    hello = track_feed(IN, PREFACE + h2_frame(4, 0, 0, b"\x00\x01\x00\x00\x10\x00"))
    sse = hello + track_feed(IN, h2_frame(1, 4, 1, req) + h2_frame(0, 1, 1, body)) + \
        track_feed(OUT, h2_frame(4, 0, 0) + h2_frame(1, 4, 1, sse_head)) + \
        b"".join(track_feed(OUT, h2_frame(0, 0, 1, ev), adv=3) for _ in range(3)) + \
        track_feed(OUT, h2_frame(0, 1, 1, b"data: [DONE]\n\n"))
    put("agent_http2", "sse", sse)
    # the second request's head uses the table the first one filled
    put("agent_http2", "two_streams_table", sse + track_feed(IN, h2_frame(1, 5, 3, bytes([0x83, 0x86, 0x04, 2]) + b"/b" + bytes([0xbe]))) +
        track_feed(OUT, h2_frame(1, 4, 3, bytes([0x88, 0xbe])) + h2_frame(0, 9, 3, b"\x02" + ev + b"xx")))
    grpc_req = bytes([0x83, 0x86, 0x04, 8]) + b"/k.G/Str" + hp_lit("content-type", "application/grpc")
    grpc_head = bytes([0x88]) + hp_lit("content-type", "application/grpc")
    msg = lambda n: b"\x00" + n.to_bytes(4, "big") + b"m" * n
    trailers = hp_lit("grpc-status", "0")
    grpc = hello + track_feed(IN, h2_frame(1, 4, 1, grpc_req) + h2_frame(0, 1, 1, msg(2))) + \
        track_feed(OUT, h2_frame(1, 4, 1, grpc_head)) + track_feed(OUT, h2_frame(0, 0, 1, msg(3) + msg(4)[:4])) + \
        track_feed(OUT, h2_frame(0, 0, 1, msg(4)[4:])) + track_feed(OUT, h2_frame(1, 5, 1, trailers))
    put("agent_http2", "grpc", grpc)
    put("agent_http2", "grpc_lying_prefix", hello + track_feed(IN, h2_frame(1, 5, 1, grpc_req)) +
        track_feed(OUT, h2_frame(1, 4, 1, grpc_head) + h2_frame(0, 0, 1, b"\x00\x7f\xff\xff\xff" + b"x" * 40)) +
        track_feed(OUT, h2_frame(0, 1, 1, b"\x07\x00\x00\x00\x01y")))
    put("agent_http2", "continuation_split_padded", hello + track_feed(
        IN, h2_frame(1, 0x28, 1, b"\x03" + b"\x00\x00\x00\x00\x10" + req[:5] + b"pad") +
        h2_frame(9, 0, 1, req[5:9]) + h2_frame(9, 4, 1, req[9:])) + track_feed(OUT, h2_frame(3, 0, 1, b"\x00\x00\x00\x08")))
    # a flood of CONTINUATION frames that never end the block
    put("agent_http2", "continuation_flood", hello + track_feed(IN, h2_frame(1, 0, 1, req[:4])) +
        h2_repeat(200, track_feed(IN, h2_frame(9, 0, 1, hp_lit("a", "b" * 60)))))
    # an HPACK bomb: one 4000-byte entry, referenced over and over
    put("agent_http2", "hpack_bomb", hello + track_feed(IN, h2_frame(1, 0, 1, req + hp_lit("big", "v" * 200, True))) +
        h2_repeat(64, track_feed(IN, h2_frame(9, 0, 1, bytes([0xbe]) * 200))) + track_feed(IN, h2_frame(9, 4, 1, b"")))
    # a storm of streams opened and reset
    put("agent_http2", "rst_storm", hello + b"".join(
        track_feed(IN, h2_frame(1, 4, 2 * k + 1, req) + h2_frame(3, 0, 2 * k + 1, b"\x00\x00\x00\x08"))
        for k in range(40)) + track_feed(IN, h2_frame(1, 4, 101, req)))
    put("agent_http2", "bad_lengths", hello + track_feed(IN, h2_frame(8, 0, 0, b"\x00" * 3) + h2_frame(1, 4, 1, req)) +
        track_feed(OUT, b"\xff\xff\xff\x00\x00\x00\x00\x00\x01") + track_feed(OUT, h2_frame(1, 4, 1, sse_head)) +
        track_feed(OUT, h2_frame(0, 0x08, 1, b"\xfe"), cap=CAP_HALF) + track_feed(OUT, h2_frame(0, 1, 1, ev), cap=CAP_GAP))
    put("agent_http2", "midstream", bytes([0xff]) + track_feed(IN, h2_frame(1, 5, 7, bytes([0xbe, 0xbf]))) +
        track_feed(OUT, h2_frame(1, 4, 7, bytes([0xbe]))) + track_feed(OUT, h2_frame(0, 1, 7, ev)) + track_close(True))


# ---- GGUF: a micro llama (dim 8, one layer, byte vocabulary) ---------------
U32, I32, F32, STR, ARR = 4, 5, 6, 8, 9


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, t, val):
    out = gstr(key) + struct.pack("<I", t)
    if t == U32:
        out += struct.pack("<I", val)
    elif t == I32:
        out += struct.pack("<i", val)
    elif t == F32:
        out += struct.pack("<f", val)
    elif t == STR:
        out += gstr(val)
    elif t == ARR:
        et, items = val
        out += struct.pack("<IQ", et, len(items))
        for it in items:
            out += gstr(it) if et == STR else struct.pack("<f" if et == F32 else "<i", it)
    return out


def micro_gguf(dim=8, layers=1, heads=2, kv_heads=1, ffn=16, ftype=0, tied=True):
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["\u2581a", "ab"]
    types = [2, 3, 3] + [6] * 256 + [1, 1]
    scores = [0.0] * (len(tokens) - 2) + [-1.0, -2.0]
    meta = [
        kv("general.architecture", STR, "llama"), kv("general.name", STR, "micro"),
        kv("general.alignment", U32, 32),
        kv("llama.context_length", U32, 64), kv("llama.embedding_length", U32, dim),
        kv("llama.block_count", U32, layers), kv("llama.feed_forward_length", U32, ffn),
        kv("llama.attention.head_count", U32, heads),
        kv("llama.attention.head_count_kv", U32, kv_heads),
        kv("llama.rope.dimension_count", U32, dim // heads),
        kv("llama.attention.layer_norm_rms_epsilon", F32, 1e-5),
        kv("tokenizer.ggml.model", STR, "llama"),
        kv("tokenizer.ggml.tokens", ARR, (STR, tokens)),
        kv("tokenizer.ggml.scores", ARR, (F32, scores)),
        kv("tokenizer.ggml.token_type", ARR, (I32, types)),
        kv("tokenizer.ggml.bos_token_id", U32, 1), kv("tokenizer.ggml.eos_token_id", U32, 2),
    ]
    hd = dim // heads
    nv = len(tokens)
    shapes = [("token_embd.weight", (dim, nv)), ("output_norm.weight", (dim,))]
    if not tied:
        shapes.append(("output.weight", (dim, nv)))
    for l in range(layers):
        p = f"blk.{l}."
        shapes += [(p + "attn_norm.weight", (dim,)), (p + "attn_q.weight", (dim, heads * hd)),
                   (p + "attn_k.weight", (dim, kv_heads * hd)),
                   (p + "attn_v.weight", (dim, kv_heads * hd)),
                   (p + "attn_output.weight", (heads * hd, dim)), (p + "ffn_norm.weight", (dim,)),
                   (p + "ffn_gate.weight", (dim, ffn)), (p + "ffn_up.weight", (dim, ffn)),
                   (p + "ffn_down.weight", (ffn, dim))]
    infos, off, data = b"", 0, b""
    for name, ne in shapes:
        n = 1
        for d in ne:
            n *= d
        t = ftype if len(ne) > 1 else 0  # norms stay F32, as llama.cpp writes them
        nbytes = n * (4 if t == 0 else 2)
        infos += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", t, off)
        blob = bytes((i * 7) & 0x3f for i in range(nbytes))
        pad = (-nbytes) % 32
        data += blob + b"\0" * pad
        off += nbytes + pad
    head = b"GGUF" + struct.pack("<IQQ", 3, len(shapes), len(meta)) + b"".join(meta) + infos
    head += b"\0" * ((-len(head)) % 32)
    return head + data


def gguf_seeds():
    good = micro_gguf()
    put("gguf", "micro_f32_tied", good)
    put("gguf", "micro_f16_untied", micro_gguf(ftype=1, tied=False, layers=2, heads=4, kv_heads=2))
    put("gguf", "truncated", good[: len(good) // 2])
    put("gguf", "header_only", good[:24])
    put("gguf", "bad_magic", b"GGUG" + good[4:64])
    put("gguf", "v2", good[:4] + struct.pack("<I", 2) + good[8:])


if __name__ == "__main__":
    http_seeds()
    json_seeds()
    chat_seeds()
    kv_wire_seeds()
    gguf_seeds()
    track_seeds()
    h2_seeds()
    for t in sorted(os.listdir(os.path.join(HERE, "corpus"))):
        d = os.path.join(HERE, "corpus", t)
        print(f"{t}: {len(os.listdir(d))} seeds, {sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))} bytes")
