"""kpi-infer's HTTP server over real sockets against a real daemon serving the
tiny built-in model: completions and chat (plain and SSE), keep-alive,
64 concurrent streams, every error path with its status and JSON body,
admission control (429), cancellation on disconnect, SIGTERM drain, and the
USDT notes in the binary."""
import json, os, re, signal, socket, subprocess, threading, time

import kpitest
import promtext
import servertest as st
from servertest import Reader, error_of, post_bytes, sse_events, stream, wait_for

# tests/run.py runs these beside other tests, but those marked alone: none
# of them times anything or counts what the whole host did.
CONCURRENT = True

_shared = None


def daemon():
    """One daemon for the tests that do not need special flags."""
    global _shared
    if _shared is None or not _shared.alive():
        _shared = st.Daemon("--max-body", 65536, "--request-timeout", 2, "--threads", 1,
                            shared=True)
    return _shared


def complete(d, **body):
    body.setdefault("prompt", "Once upon a time")
    st_, h, data = d.request("POST", "/v1/completions", body)
    assert st_ == 200, (st_, data)
    return h, json.loads(data)


# ---- command line ----------------------------------------------------------

def test_help_lists_every_flag():
    st.require_binary()
    p = kpitest.run([st.KPI_INFER, "--help"], check=True)
    for flag in ["--model", "--host", "--port", "--max-seqs", "--max-batched-tokens",
                 "--max-queue", "--kv-blocks", "--block-size", "--backend", "--batching",
                 "--threads", "--max-body", "--request-timeout", "--idle-timeout",
                 "--max-conns", "--reasoning-tokens", "--make-model", "--preset", "--seed",
                 "--help"]:
        assert flag in p.stdout, f"--help does not document {flag}"
    p = kpitest.run([st.KPI_INFER, "--port", "nope"])
    assert p.returncode == 2 and "--port" in p.stderr, p.stderr
    p = kpitest.run([st.KPI_INFER, "--backend", "tpu"])
    assert p.returncode == 2 and "--backend" in p.stderr, p.stderr
    p = kpitest.run([st.KPI_INFER, "--model", "/nonexistent.gguf"])
    assert p.returncode == 1 and "/nonexistent.gguf" in p.stderr, p.stderr


def test_usdt_notes_in_binary():
    st.require_binary()
    notes = kpitest.run(["readelf", "-n", st.KPI_INFER], check=True).stdout
    probes_d = open(os.path.join(kpitest.ROOT, "abi", "kpi_probes.d")).read()
    names = re.findall(r"probe\s+(\w+)\s*\(", probes_d)
    assert len(names) >= 11, names
    for n in names:
        assert re.search(rf"Provider: kpi\s+Name: {n}\b", notes), \
            f"USDT probe kpi:{n} missing from readelf -n {st.KPI_INFER}"


# ---- completions and chat ---------------------------------------------------

def test_completion():
    d = daemon()
    h, r = complete(d, max_tokens=8, temperature=0, ignore_eos=True)
    assert r["object"] == "text_completion" and r["model"] == d.model, r
    c = r["choices"][0]
    assert c["index"] == 0 and isinstance(c["text"], str) and c["finish_reason"] == "length", r
    u = r["usage"]
    assert u["completion_tokens"] == 8 and u["prompt_tokens"] > 0, u
    assert u["total_tokens"] == u["prompt_tokens"] + 8, u
    assert h["x-request-id"].startswith("req-"), h
    assert r["id"] == "cmpl-" + h["x-request-id"], r
    # the same prompt as token ids
    h, r2 = complete(d, prompt=[1, 2, 3, 4], max_tokens=3, ignore_eos=True)
    assert r2["usage"]["prompt_tokens"] == 4 and r2["usage"]["completion_tokens"] == 3, r2


def test_completion_stream_matches_plain():
    d = daemon()
    body = dict(prompt="The quick brown fox", max_tokens=12, temperature=0, ignore_eos=True)
    _, plain = complete(d, **body)
    status, h, chunks, events = stream(d.port, "/v1/completions",
                                       dict(body, stream=True,
                                            stream_options={"include_usage": True}))
    assert status == 200 and h["content-type"] == "text/event-stream", (status, h)
    assert h["x-request-id"], h
    assert events[-1] == "[DONE]", events[-3:]
    usage = events[-2]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 12, usage
    tokens = events[:-2]
    # one event per generated token, the last one carrying the finish reason
    assert len(tokens) == 12, f"{len(tokens)} events for 12 tokens"
    assert all(len(sse_events(c)) >= 1 for c in chunks)
    assert all(e["choices"][0]["finish_reason"] is None for e in tokens[:-1])
    assert tokens[-1]["choices"][0]["finish_reason"] == "length"
    text = "".join(e["choices"][0]["text"] for e in tokens)
    assert text == plain["choices"][0]["text"], (text, plain)


def test_chat():
    d = daemon()
    msgs = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Say hello."}]
    st_, h, r = d.json("POST", "/v1/chat/completions",
                       dict(messages=msgs, max_tokens=6, temperature=0, ignore_eos=True))
    assert st_ == 200, r
    assert r["object"] == "chat.completion" and r["id"] == "chatcmpl-" + h["x-request-id"], r
    m = r["choices"][0]["message"]
    assert m["role"] == "assistant" and isinstance(m["content"], str), r
    assert r["usage"]["completion_tokens"] == 6, r
    status, h, _, events = stream(d.port, "/v1/chat/completions",
                                  dict(messages=msgs, max_tokens=6, temperature=0,
                                       ignore_eos=True, stream=True))
    assert status == 200 and events[-1] == "[DONE]", events
    chunks = events[:-1]
    assert all(e["object"] == "chat.completion.chunk" for e in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in chunks)
    assert text == m["content"], (text, m)


def test_reasoning_tokens():
    """--reasoning-tokens 3: chat carries the first 3 tokens' text as
    reasoning_content (delta.reasoning_content, one event per token, the role on
    the first), the rest as content; a text completion inlines it as
    <think>...</think>; usage counts the reasoning tokens; the split text is
    the plain response's, and fewer tokens than N leave no answer."""
    d = st.Daemon("--reasoning-tokens", 3, "--threads", 1)
    msgs = [{"role": "user", "content": "Think first."}]
    body = dict(messages=msgs, max_tokens=8, temperature=0, ignore_eos=True)
    s, _, r = d.json("POST", "/v1/chat/completions", body)
    assert s == 200, r
    m = r["choices"][0]["message"]
    assert set(m) == {"role", "content", "reasoning_content"}, m
    assert r["usage"]["completion_tokens_details"] == {"reasoning_tokens": 3}, r["usage"]
    status, _, _, events = stream(d.port, "/v1/chat/completions", dict(body, stream=True))
    assert status == 200 and events[-1] == "[DONE]", events
    deltas = [e["choices"][0]["delta"] for e in events[:-1]]
    assert len(deltas) == 8 and deltas[0]["role"] == "assistant", deltas
    # one event per token: the first three reasoning, the next ones answer (an
    # answer token whose bytes the UTF-8 repair still holds sends "content": "")
    assert all("reasoning_content" in x and "content" not in x for x in deltas[:3]), deltas
    assert all("content" in x and "reasoning_content" not in x for x in deltas[3:]), deltas
    assert "".join(x.get("reasoning_content", "") for x in deltas) == m["reasoning_content"], \
        (deltas, m)
    assert "".join(x.get("content", "") for x in deltas) == m["content"], (deltas, m)
    # a text completion: the same split inline
    tbody = dict(prompt="Once upon a time", max_tokens=8, temperature=0, ignore_eos=True)
    _, plain = complete(d, **tbody)
    text = plain["choices"][0]["text"]
    assert text.startswith("<think>") and text.count("</think>") == 1, text
    assert plain["usage"]["completion_tokens_details"]["reasoning_tokens"] == 3, plain
    _, _, _, events = stream(d.port, "/v1/completions", dict(tbody, stream=True))
    parts = [e["choices"][0]["text"] for e in events[:-1]]
    assert "".join(parts) == text, (parts, text)
    assert parts[0].startswith("<think>") or parts[0] == "", parts
    # max_tokens under N: all of it is reasoning
    s, _, r = d.json("POST", "/v1/chat/completions", dict(body, max_tokens=2))
    assert r["choices"][0]["message"]["content"] == "", r
    assert r["usage"]["completion_tokens_details"] == {"reasoning_tokens": 2}, r["usage"]
    # without the flag nothing changes: no reasoning field, no details in usage
    s, _, r = daemon().json("POST", "/v1/chat/completions", body)
    assert "reasoning_content" not in r["choices"][0]["message"], r
    assert "completion_tokens_details" not in r["usage"], r
    p = kpitest.run([st.KPI_INFER, "--reasoning-tokens", "-1"])
    assert p.returncode == 2 and "--reasoning-tokens" in p.stderr, p.stderr


def test_stop_string():
    d = daemon()
    body = dict(prompt="abc", max_tokens=24, temperature=0, ignore_eos=True)
    full = complete(d, **body)[1]["choices"][0]["text"]
    stop = full[8:10]
    if len(stop) < 2:
        raise kpitest.Skip("the model's greedy text is too short to cut")
    want = full[:full.index(stop)]
    r = complete(d, stop=[stop], **body)[1]
    assert r["choices"][0]["text"] == want, (r, want, stop)
    assert r["choices"][0]["finish_reason"] == "stop", r
    _, _, _, events = stream(d.port, "/v1/completions", dict(body, stop=stop, stream=True))
    text = "".join(e["choices"][0]["text"] for e in events[:-1])
    assert text == want and events[-2]["choices"][0]["finish_reason"] == "stop", events


def test_generated_text_is_valid_utf8_json():
    """Random sampling over a byte vocabulary yields invalid UTF-8 sequences;
    every chunk must still be strict JSON with valid UTF-8."""
    d = daemon()
    for seed in range(3):
        status, _, chunks, events = stream(d.port, "/v1/completions",
                                           dict(prompt="x", max_tokens=48, temperature=1.5,
                                                seed=seed, ignore_eos=True, stream=True))
        assert status == 200 and events[-1] == "[DONE]"
        for c in chunks:
            c.decode("utf-8")  # strict
        _, r = complete(d, prompt="x", max_tokens=48, temperature=1.5, seed=seed,
                        ignore_eos=True)
        r["choices"][0]["text"].encode("utf-8")


def test_request_id_header():
    d = daemon()
    h, _ = complete(d, max_tokens=1, ignore_eos=True)
    a = h["x-request-id"]
    h, _ = complete(d, max_tokens=1, ignore_eos=True)
    assert h["x-request-id"] != a, "generated ids must be unique"
    st_, h, _ = d.request("GET", "/health", headers={"X-Request-Id": "trace-1:a.b_c<>\"x"})
    assert st_ == 200 and h["x-request-id"] == "trace-1:a.b_cx", h
    st_, h, _ = d.request("GET", "/v1/models", headers={"X-Request-Id": "y" * 300})
    assert h["x-request-id"] == "y" * 63, h  # KPI_REQID_LEN - 1
    st_, h, _ = d.request("GET", "/nope", headers={"X-Request-Id": "err-id"})
    assert st_ == 404 and h["x-request-id"] == "err-id", h


def test_models_and_health():
    d = daemon()
    st_, _, r = d.json("GET", "/v1/models")
    assert st_ == 200 and r["object"] == "list" and r["data"][0]["object"] == "model", r
    st_, _, r = d.json("GET", "/health")
    assert st_ == 200 and r == {"status": "ok"}, r


def test_keepalive_reuse():
    d = daemon()
    s = d.connect()
    rd = Reader(s)
    port = s.getsockname()[1]
    for i in range(3):
        s.sendall(post_bytes("/v1/completions", json.dumps(
            dict(prompt="hi", max_tokens=2, ignore_eos=True, stream=bool(i % 2))).encode()))
        status, h, body = rd.response()
        assert status == 200, body
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert rd.response()[0] == 200
    # pipelined: two requests in one write, answered in order
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + post_bytes(
        "/v1/completions", json.dumps(dict(prompt="hi", max_tokens=1)).encode()))
    assert rd.response()[0] == 200
    status, _, body = rd.response()
    assert status == 200 and json.loads(body)["object"] == "text_completion"
    assert s.getsockname()[1] == port
    m = d.metrics()
    s.close()
    assert m["kpi_infer_connections_total"] >= 1


def test_64_concurrent_streams():
    d = daemon()
    results = [None] * 64
    errors = []

    def one(i):
        try:
            results[i] = stream(d.port, "/v1/completions",
                                dict(prompt=f"stream {i}", max_tokens=8, ignore_eos=True,
                                     stream=True, stream_options={"include_usage": True}))
        except Exception as e:  # reported below with its index
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:5]
    ids = set()
    for status, h, _, events in results:
        assert status == 200 and events[-1] == "[DONE]", (status, events[-2:])
        assert events[-2]["usage"]["completion_tokens"] == 8
        assert len(events) == 8 + 2, len(events)  # 8 tokens, usage, [DONE]
        ids.add(h["x-request-id"])
    assert len(ids) == 64
    def all_free():
        m = d.metrics()
        return m["kpi_infer_kv_blocks_free"] == m["kpi_infer_kv_blocks_total"]
    wait_for(all_free, what="all KV blocks free after 64 streams")


test_64_concurrent_streams.timeout = 240


# ---- bad input ---------------------------------------------------------------

def raw(d, data, close_expected):
    """Sends raw bytes; returns (status, headers, error object)."""
    s = d.connect(timeout=10)
    s.sendall(data)
    rd = Reader(s)
    status, h, body = rd.response()
    assert h.get("content-type") == "application/json", h
    assert h.get("x-request-id"), h
    e = error_of(body)
    assert e["code"] == status, (e, status)
    if close_expected:
        assert rd.closed(), "connection must close after a framing error"
    s.close()
    return status, h, e


def test_malformed_http_400_then_close():
    d = daemon()
    status, h, e = raw(d, b"GARBAGE\r\n\r\n", True)
    assert status == 400 and h.get("connection") == "close", (status, h)
    assert raw(d, b"GET / HTTP/1.1\r\n folded\r\n\r\n", True)[0] == 400
    assert raw(d, b"GET / HTTP/3.0\r\n\r\n", True)[0] == 505
    big = b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n"
    assert raw(d, big, True)[0] == 431
    body = b'{"prompt":"x"}'
    chunked = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"zz\r\n" + body + b"\r\n0\r\n\r\n")
    assert raw(d, chunked, True)[0] == 400
    assert d.json("GET", "/health")[0] == 200


def test_chunked_body_accepted():
    d = daemon()
    body = json.dumps(dict(prompt="chunks", max_tokens=2, ignore_eos=True)).encode()
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
           + b"%x\r\n" % 5 + body[:5] + b"\r\n" + b"%x\r\n" % (len(body) - 5) + body[5:]
           + b"\r\n0\r\n\r\n")
    s = d.connect()
    s.sendall(req)
    status, _, data = Reader(s).response()
    s.close()
    assert status == 200 and json.loads(data)["usage"]["completion_tokens"] == 2, data


def test_json_and_field_errors():
    d = daemon()
    cases = [
        (b"{not json", "JSON"),
        (b"[1,2]", "object"),
        (b'{"prompt": 5}', "'prompt'"),
        (b'{"prompt": "x", "max_tokens": "ten"}', "'max_tokens'"),
        (b'{"prompt": "x", "temperature": 9}', "'temperature'"),
        (b'{"prompt": "x", "stream": "yes"}', "'stream'"),
        (b'{"prompt": "x", "stop": [1]}', "'stop[0]'"),
        (b'{"prompt": "\xff\xfe"}', "JSON"),
        (b"[" * 5000 + b"]" * 5000, "JSON"),
    ]
    for body, field in cases:
        s = d.connect()
        s.sendall(post_bytes("/v1/completions", body))
        rd = Reader(s)
        status, h, data = rd.response()
        e = error_of(data)
        assert status == 400 and field in e["message"], (body[:40], status, e)
        # the connection survives a body error
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert rd.response()[0] == 200
        s.close()
    st_, _, data = d.request("POST", "/v1/chat/completions", {"messages": [{"role": "x"}]})
    assert st_ == 400 and "'messages[0].role'" in error_of(data)["message"], data


def test_prompt_limits_400():
    d = daemon()
    st_, _, data = d.request("POST", "/v1/completions",
                             dict(prompt="a", max_tokens=d.ctx * 4))
    e = error_of(data)
    assert st_ == 400 and "context length" in e["message"] and "KV pool" in e["message"], e
    assert str(d.ctx) in e["message"], e
    st_, _, data = d.request("POST", "/v1/completions",
                             dict(prompt=[1] * (d.ctx + 1), max_tokens=1))
    assert st_ == 400 and "context length" in error_of(data)["message"]
    st_, _, data = d.request("POST", "/v1/completions", dict(prompt=[10 ** 9], max_tokens=1))
    assert st_ == 400 and "out of range" in error_of(data)["message"], data


def test_404_405_413():
    d = daemon()
    st_, h, data = d.request("GET", "/v2/nothing")
    assert st_ == 404 and error_of(data)["code"] == 404
    st_, h, data = d.request("GET", "/v1/completions")
    assert st_ == 405 and h.get("allow") == "POST" and error_of(data)["code"] == 405
    st_, h, data = d.request("DELETE", "/metrics")
    assert st_ == 405 and h.get("allow") == "GET"
    # over --max-body 65536: refused from the Content-Length, then closed
    s = d.connect()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
    rd = Reader(s)
    status, h, data = rd.response()
    assert status == 413 and error_of(data)["code"] == 413 and rd.closed()
    s.close()


@kpitest.alone
def test_slow_headers_dropped():
    d = daemon()  # --request-timeout 2
    s = d.connect(timeout=10)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
    t0 = time.monotonic()
    rd = Reader(s)
    status, h, data = rd.response()
    assert status == 408 and error_of(data)["code"] == 408
    assert 1.5 < time.monotonic() - t0 < 6
    assert rd.closed()
    s.close()
    # an idle keep-alive connection (no bytes) is not a slow client
    assert d.json("GET", "/health")[0] == 200


# ---- overload, cancellation, shutdown ---------------------------------------

def long_body(d, **kw):
    return dict(prompt="x", max_tokens=d.ctx - 8, ignore_eos=True, stream=True, **kw)


@kpitest.alone
def test_429_when_queue_full():
    d = st.Daemon("--max-seqs", 1, "--max-queue", 1, "--threads", 1)
    # A occupies the only running slot until its client hangs up
    a = d.connect()
    a.sendall(post_bytes("/v1/completions", json.dumps(long_body(d)).encode()))
    ra = Reader(a)
    assert ra.head()[0] == 200
    next(ra.chunks())
    # seven more in one burst: one waits (the queue holds 1), six are refused
    socks = [d.connect() for _ in range(7)]
    req = post_bytes("/v1/completions", json.dumps(dict(prompt="y", max_tokens=2,
                                                        ignore_eos=True)).encode())
    for s in socks:
        s.sendall(req)
    # the six refusals arrive at once; the admitted one waits for A
    import select
    pending, refused = list(socks), []
    deadline = time.monotonic() + 30
    while len(refused) < 6 and time.monotonic() < deadline:
        ready, _, _ = select.select(pending, [], [], 1)
        for s in ready:
            status, h, data = Reader(s).response()
            assert status == 429, (status, data)
            refused.append((h, error_of(data)))
            pending.remove(s)
    assert len(refused) == 6 and len(pending) == 1, (len(refused), len(pending))
    for h, e in refused:
        assert h.get("retry-after") == "1" and e["code"] == 429 and "--max-queue" in e["message"]
    m = d.metrics()
    assert m['kpi_infer_http_responses_total{code="429"}'] == 6
    a.close()  # cancels A; the waiting request runs
    status, _, data = Reader(pending[0]).response()
    assert status == 200, data
    for s in socks:
        s.close()


def test_disconnect_frees_blocks():
    d = daemon()
    total = d.metrics()["kpi_infer_kv_blocks_total"]
    aborted0 = d.metrics().get('vllm:request_success_total{model_name="%s",finished_reason="abort"}'
                               % d.model, 0)
    s = d.connect()
    s.sendall(post_bytes("/v1/completions", json.dumps(long_body(d)).encode()))
    rd = Reader(s)
    assert rd.head()[0] == 200
    chunks = rd.chunks()
    for _ in range(3):
        next(chunks)
    assert d.metrics()["kpi_infer_kv_blocks_free"] < total, "a running stream holds blocks"
    s.close()
    wait_for(lambda: d.metrics()["kpi_infer_kv_blocks_free"] == total, 10,
             "the hung-up stream's KV blocks to be freed")
    m = d.metrics()
    assert m["vllm:num_requests_running"] == 0
    key = 'vllm:request_success_total{model_name="%s",finished_reason="abort"}' % d.model
    assert m[key] == aborted0 + 1, m[key]


@kpitest.alone
def test_sigterm_drains():
    d = st.Daemon("--threads", 1)
    n = 4
    results = [None] * n
    started = threading.Barrier(n + 1)

    def one(i):
        s = d.connect()
        s.sendall(post_bytes("/v1/completions", json.dumps(
            dict(prompt=f"drain {i}", max_tokens=min(64, d.ctx - 8), ignore_eos=True,
                 stream=True)).encode()))
        rd = Reader(s)
        status, _ = rd.head()
        chunks = rd.chunks()
        got = [next(chunks)]
        started.wait(30)
        got.extend(chunks)
        events = [e for c in got for e in sse_events(c)]
        results[i] = (status, events)
        s.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    started.wait(30)
    d.p.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(60)
    rc = d.p.wait(30)
    assert rc == 0, f"exit {rc}:\n{d.output()}"
    for status, events in results:
        assert status == 200 and events[-1] == "[DONE]", events[-2:]
        assert events[-2]["choices"][0]["finish_reason"] == "length"
    try:
        socket.create_connection(("127.0.0.1", d.port), timeout=2).close()
        raise AssertionError("still accepting after SIGTERM")
    except ConnectionRefusedError:
        pass


test_sigterm_drains.timeout = 120


def test_metrics_names():
    d = daemon()
    complete(d, max_tokens=3, ignore_eos=True)
    text = d.request("GET", "/metrics")[2].decode()
    for name in ["vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total",
                 "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
                 "vllm:e2e_request_latency_seconds_bucket", "vllm:request_queue_time_seconds_bucket",
                 "vllm:request_prefill_time_seconds_bucket", "vllm:request_decode_time_seconds_bucket",
                 "vllm:request_success_total", "kpi_infer_http_responses_total",
                 "kpi_infer_kv_blocks_free"]:
        assert name in text, f"/metrics lacks {name}"
    m = promtext.by_key(text)
    ttft = m[f'vllm:time_to_first_token_seconds_count{{model_name="{d.model}"}}']
    assert ttft >= 1
    assert m['kpi_infer_http_responses_total{code="200"}'] >= 1


# ---- USDT probes firing (root) -------------------------------------------------

@kpitest.alone
def test_probes_fire_with_bpftrace():
    """docs/probes.bt sees every kpi:* probe fire: admitted, rejected,
    scheduled, step begin/end, first token, preempted (a KV pool too small
    for two sequences), finished, cancelled (a hung-up stream), response
    start/end."""
    kpitest.require_root("attaching bpftrace to USDT probes")
    import shutil
    if not shutil.which("bpftrace"):
        raise kpitest.Skip("bpftrace is not installed (make deps installs it)")
    d = st.Daemon("--max-seqs", 2, "--kv-blocks", 8, "--block-size", 16, "--threads", 1)
    script = open(os.path.join(kpitest.ROOT, "docs", "probes.bt")).read()
    script = script.replace("./build/kpi-infer", os.path.abspath(st.KPI_INFER))
    path = os.path.join(st.tmpdir(), "probes.bt")
    with open(path, "w") as f:
        f.write(script)
    bt = kpitest.Proc(["bpftrace", "-p", str(d.p.pid), path])
    bt.wait_line("Attaching", 60)
    time.sleep(1)  # attach completes after the banner
    assert d.request("GET", "/nope")[0] == 404
    # the endpoint rides on request__admitted: 2 (chat) here, 1 (text_completion) below
    chat = d.request("POST", "/v1/chat/completions",
                     dict(messages=[dict(role="user", content="x")], max_tokens=2,
                          ignore_eos=True), headers={"x-request-id": "probe-chat"})
    assert chat[0] == 200, chat
    body = dict(prompt="x", max_tokens=100, ignore_eos=True)
    threads = [threading.Thread(target=d.request, args=("POST", "/v1/completions", body))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    s = d.connect()
    s.sendall(post_bytes("/v1/completions", json.dumps(
        dict(prompt="x", max_tokens=100, ignore_eos=True, stream=True)).encode()))
    rd = Reader(s)
    rd.head()
    next(rd.chunks())
    s.close()
    wait_for(lambda: d.metrics()["kpi_infer_kv_blocks_free"] == 8, what="blocks freed")
    # bpftrace prints as events arrive; its exit (detaching) can be slow on a
    # loaded machine, so read lines instead of waiting for it to end
    for probe in ["request__admitted", "request__rejected", "request__scheduled",
                  "step__begin", "step__end", "request__first_token", "request__preempted",
                  "request__finished", "request__cancelled", "response__start",
                  "response__end"]:
        bt.wait_line(f" {probe} ", 30)
    bt.wait_line("status=404 reason=9", 5)  # status and KPI_REJECT_NOT_FOUND
    # enum kpi_operation (abi/kpi_reasons.h): the chat request 2, the others 1
    assert bt.wait_line("request_id=probe-chat ", 5).endswith(" operation=2"), bt.lines
    admitted = [l for l in bt.lines if " request__admitted " in l and "probe-chat" not in l]
    assert admitted and all(l.endswith(" operation=1") for l in admitted), admitted


test_probes_fire_with_bpftrace.timeout = 180
