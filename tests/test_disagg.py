"""Disaggregated prefill and decode (docs/disaggregation.md), real processes on
real sockets: router -> decode worker <- prefill worker gives the tokens a
colocated kpi-infer gives (greedy and seeded, tiny and small presets, prefix-
cache hits on the prefill side counted exactly); a malformed or mismatched KV
stream fails its request alone with a clear error; the router's policies do
what they say; kpi-bench drives the router; and (as root) every new probe
fires with the arguments docs/probes.md gives."""
import concurrent.futures as cf, json, os, random, re, time

import kpitest
import servertest as st
import disaggtest as dt
import benchtest

# tests/run.py runs these beside other tests, but those marked alone: none
# of them times anything or counts what the whole host did.
CONCURRENT = True


def _prompts(rng, n_base=25, max_len=1500):
    """n_base random prompts of 1..max_len tokens (both ends included, the rest
    log-uniform: every scale, at a quarter of the uniform draw's compute),
    then one derived from each: a shared prefix of whole blocks (or the whole
    prompt) and a fresh tail. Returns (bases, derived, shared lengths)."""
    lens = [1, max_len] + [int(round(max_len ** rng.random())) for _ in range(n_base - 2)]
    bases = [dt.random_prompt(rng, n) for n in lens]
    derived, shared = [], []
    for i, b in enumerate(bases):
        if i % 5 == 0:
            derived.append(list(b))  # the same prompt again
            shared.append(len(b))
            continue
        s = min(len(b), rng.choice([16, 48, 160, 512, 1024]))
        tail = int(round((max_len - s) ** rng.random())) if s < max_len else 0
        tail = max(tail, 1 if s == len(b) else 0)
        derived.append(b[:s] + dt.random_prompt(rng, tail))
        shared.append(s)
    return bases, derived, shared


def _expected_hits(bases, derived, shared, bs=16):
    """Prompt tokens the prefill side finds cached: a derived prompt reuses its
    base's full blocks up to the shared prefix, never its own last token's."""
    return sum(bs * min(s // bs, len(b) // bs, (len(d) - 1) // bs)
               for b, d, s in zip(bases, derived, shared))


def _run_all(port, prompts, max_tokens, workers=4):
    with cf.ThreadPoolExecutor(workers) as ex:
        return list(ex.map(lambda p: dt.token_ids(port, p, max_tokens), prompts))


def _equal_to_colocated(preset, kv_blocks):
    model = st.preset_model(preset) if preset != "tiny" else "tiny"
    rng = random.Random(31)
    bases, derived, shared = _prompts(rng)
    colo = st.Daemon(model=model)
    want = _run_all(colo.port, bases + derived, 8)
    colo.stop()
    # two prefill workers, chosen by the first 16 tokens of the prompt, so a
    # derived prompt lands where its base is cached
    ps = [dt.worker("prefill", "--kv-blocks", kv_blocks, model=model) for _ in range(2)]
    d = dt.worker("decode", model=model)
    r = dt.router([d], ps, "--policy", "prefix", "--prefix-bytes", 64)
    got = _run_all(r.port, bases, 8)
    got += _run_all(r.port, derived, 8)
    for i, (a, b) in enumerate(zip(want, got)):
        n = len((bases + derived)[i])
        assert a == b, f"prompt {i} ({n} tokens): colocated {a}, disaggregated {b}"
    hits = sum(p.metrics()["vllm:prefix_cache_hits_total"] for p in ps)
    assert hits == _expected_hits(bases, derived, shared), (hits, _expected_hits(bases, derived, shared))
    assert hits > 0
    sends = [p.metrics()["kpi_infer_kv_sends_total"] for p in ps]
    assert sum(sends) == 50 and min(sends) > 0, sends
    m = d.metrics()
    assert m["kpi_infer_kv_transfers_total"] == 50, m["kpi_infer_kv_transfers_total"]
    # received straight into the engine's blocks when the engine answered before the
    # stream's first byte (else into a buffer, then copied): the tokens above check both
    assert 0 < m["kpi_infer_kv_transfers_in_place_total"] <= 50, m
    nl, kvd = (4, 128) if preset == "tiny" else (12, 768)
    assert m["kpi_infer_kv_transfer_bytes_total"] == sum(
        nl * len(p) * 2 * kvd * 2 for p in bases + derived)


def test_greedy_tokens_equal_colocated_tiny():
    _equal_to_colocated("tiny", 8192)


def test_greedy_tokens_equal_colocated_small():
    _equal_to_colocated("small", 3000)


test_greedy_tokens_equal_colocated_small.timeout = 900


def test_seeded_sampling_equal_colocated():
    """The sampler's state travels with the first token: seeded sampling at
    temperature 0.9 gives the colocated tokens too."""
    rng = random.Random(5)
    prompts = [dt.random_prompt(rng, rng.randint(1, 300)) for _ in range(8)]
    colo = st.Daemon()
    p, d = dt.worker("prefill"), dt.worker("decode")
    r = dt.router([d], [p])
    for i, pr in enumerate(prompts):
        kw = dict(temperature=0.9, seed=1000 + i)
        a = dt.complete(colo.port, pr, 24, **kw)[2]["choices"][0]["token_ids"]
        b = dt.complete(r.port, pr, 24, **kw)[2]["choices"][0]["token_ids"]
        assert a == b, (i, a, b)


def test_stream_through_router_is_the_decode_workers_stream():
    """Streamed: the router relays each token event in its own write, the
    same events a colocated daemon sends, under the client's request id."""
    colo = st.Daemon()
    p, d = dt.worker("prefill"), dt.worker("decode")
    r = dt.router([d], [p])
    body = dict(prompt="the router relays every byte", max_tokens=12, temperature=0,
                ignore_eos=True, stream=True)
    st_a, _, chunks_a, ev_a = st.stream(colo.port, "/v1/completions", body)
    st_b, h, chunks_b, ev_b = st.stream(r.port, "/v1/completions", body,
                                        {"X-Request-Id": "client-7"})
    assert st_a == st_b == 200
    assert h["x-request-id"] == "client-7", h
    text = lambda evs: [e["choices"][0]["text"] for e in evs if e != "[DONE]"]
    assert text(ev_a) == text(ev_b)
    assert len(chunks_b) == len(chunks_a) == 12, (len(chunks_a), len(chunks_b))


def test_roles_serve_their_routes_only():
    p, d = dt.worker("prefill"), dt.worker("decode")
    r = dt.router([d], [p])
    status, _, body = dt.complete(p.port, [5, 6, 7])
    assert status == 404 and "--role prefill" in body["error"]["message"], body
    status, _, data = kpitest.http_request(d.port, "POST", dt.KV_PATH, b'{"prompt":[5]}')
    assert status == 404 and b"--role prefill only" in data, data
    for w, role in ((p, "prefill"), (d, "decode")):
        ld = dt.load(w.port)
        assert ld["role"] == role and ld["waiting"] == 0 and ld["running"] == 0, ld
        assert re.fullmatch(r"[0-9a-f]{16}", ld["fingerprint"]), ld
    assert dt.load(p.port)["fingerprint"] == dt.load(d.port)["fingerprint"]
    assert dt.load(r.port)["role"] == "router"
    status, _, models = r.json("GET", "/v1/models")
    assert status == 200 and models["data"][0]["id"] == d.model, models
    m = r.metrics()
    assert m[f'kpi_router_worker_up{{role="decode",worker="{d.addr}"}}'] == 1
    assert m[f'kpi_router_worker_up{{role="prefill",worker="{p.addr}"}}'] == 1


def test_flag_errors_name_the_flag():
    for args, needle in ((["--role", "router"], "--role router needs --decode"),
                         (["--decode", "127.0.0.1:1"], "go with --role router"),
                         (["--role", "router", "--decode", "nohostport"], "--decode expects HOST:PORT"),
                         (["--role", "router", "--decode", "a:1", "--policy", "random"],
                          "--policy expects round-robin, least-loaded or prefix"),
                         (["--role", "decode", "--batching", "static"], "needs continuous batching"),
                         (["--role", "mixer"], "--role expects colocated, prefill, decode or router"),
                         (["--role", "router", "--decode", "a:1", "--model", "x.gguf"],
                          "loads no model")):
        p = kpitest.run([st.KPI_INFER, *args], timeout=30)
        assert p.returncode == 2 and needle in p.stderr, (args, p.returncode, p.stderr)


# ---- a KV stream that cannot be used fails its request alone ------------------------

def _good_stream(p, ids):
    fp = int(dt.load(p.port)["fingerprint"], 16)
    status, h, body = dt.kv_request(p.port, ids, fp)
    assert status == 200 and h["content-type"] == dt.KV_CTYPE, (status, body[:200])
    return dt.parse_stream(body)


def test_bad_kv_streams_fail_their_request_alone():
    p, d = dt.worker("prefill"), dt.worker("decode")
    ids = dt.random_prompt(random.Random(3), 40)
    hdr, layers, end = _good_stream(p, ids)
    assert hdr["n_tokens"] == 40 and hdr["version"] == 2 and hdr["header_bytes"] == 128
    assert hdr["payload_bytes"] == 4 * 40 * 2 * 128 * 2 == sum(len(f[3]) for f in layers)
    # nothing cached yet: the first half's frames are empty, the second carries all 40
    assert [(f[0], f[1], f[2]) for f in layers] == [(l, 0, 0) for l in range(4)] + \
        [(l, 0, 40) for l in range(4)], [f[:3] for f in layers]
    cached = dt.parse_stream(dt.kv_request(p.port, ids, int(dt.load(p.port)["fingerprint"], 16))[2])
    assert [(f[0], f[1], f[2]) for f in cached[1]] == [(l, 0, 32) for l in range(4)] + \
        [(l, 32, 8) for l in range(4)], "the cached prefix goes first"
    assert cached[2][2] == end[2]  # same first token
    good = dt.build_stream(hdr, layers, end)

    def forged(**over):
        h = dict(hdr, **over)
        return dt.build_stream(h, layers, end)

    flipped = layers[:-1] + [layers[-1][:3] + (bytes([layers[-1][3][0] ^ 1]) + layers[-1][3][1:],)]
    bad_token = end[:2] + (99999,) + end[3:]
    big = dict(hdr, n_tokens=4000, payload_bytes=4 * 4000 * 2 * 128 * 2)
    cases = [
        ("wrong model", dt.kv_answer(forged(fingerprint=hdr["fingerprint"] ^ 1)), None, "model",
         "serves another model"),
        ("wrong version", dt.kv_answer(forged(version=1)), None, "version", "version 1"),
        ("not a stream", dt.kv_answer(b"X" * len(good)), None, "magic", "not a KV stream"),
        ("truncated", dt.kv_answer(good), 128 + 8 * 24 + 5000, "truncated", "closed the connection"),
        ("oversized", dt.kv_answer(dt.build_stream(big, layers, end),
                                   length=len(good) + 4 * 3960 * 2 * 128 * 2), 200, "size",
         "announces"),
        ("oversized header", dt.kv_answer(dt.build_stream(big, layers, end)[:len(good)]), None,
         "tokens", "covers 4000 positions"),
        ("bit flipped", dt.kv_answer(dt.build_stream(hdr, flipped, end)), None, "checksum",
         "checksum"),
        ("first token", dt.kv_answer(dt.build_stream(hdr, layers, bad_token)), None, "token",
         "outside the vocabulary"),
        ("not kv", dt.kv_answer(good, ctype="text/plain"), None, "magic", "Content-Type"),
        ("refused", (b"HTTP/1.1 503 X\r\nContent-Type: application/json\r\nContent-Length: 44\r\n\r\n"
                     b'{"error":{"message":"draining","code":503}}\n'), None, "upstream", "503"),
    ]
    which = {}
    fake = dt.FakePrefill(lambda got, raw: which["answer"])
    errors_before = {}
    for name, answer, cut, cause, needle in cases:
        which["answer"] = (answer, cut)
        status, h, body = dt.complete(d.port, ids, 4, headers={"x-kpi-prefill": fake.addr})
        assert status in (502, 503) and needle in body["error"]["message"], (name, status, body)
        assert f"({cause})" in body["error"]["message"], (name, body)
        m = d.metrics()
        key = f'kpi_infer_kv_transfer_errors_total{{model_name="{d.model}",cause="{cause}"}}'
        assert m[key] == errors_before.get(key, 0) + 1, (name, key, m[key])
        errors_before[key] = m[key]
        # the decode worker goes on serving: the real prefill worker's KV, and its own
        assert dt.token_ids(d.port, ids, 4, headers={"x-kpi-prefill": p.addr}) == \
            dt.token_ids(d.port, ids, 4)
        assert d.alive()
    m = d.metrics()
    assert m["kpi_infer_kv_fetching"] == 0
    assert dt.load(d.port)["waiting"] == 0 and dt.load(d.port)["running"] == 0
    assert m["kpi_infer_kv_blocks_free"] == m["kpi_infer_kv_blocks_total"]


def test_prefill_worker_with_another_model_is_refused():
    """A prefill worker started on another GGUF refuses the decode worker's
    request (409, before any compute), and the client hears why."""
    other = dt.worker("prefill", model=st.preset_model("tiny", 2))
    d = dt.worker("decode")
    status, _, body = dt.complete(d.port, [5, 6, 7, 8], headers={"x-kpi-prefill": other.addr})
    msg = body["error"]["message"]
    assert status == 502 and "(model)" in msg and "409" in msg and "same GGUF" in msg, body
    assert other.metrics()["vllm:prompt_tokens_total"] == 0
    status, _, data = kpitest.http_request(other.port, "POST", dt.KV_PATH,
                                           b'{"prompt":[5,6]}', {"x-kpi-model": "0123"})
    assert status == 409, data


def test_client_gone_while_fetching_stops_the_transfer():
    """The client hangs up while its KV is on its way: the decode worker closes
    the prefill connection (that worker cancels its prefill) and keeps nothing."""
    fake = dt.FakePrefill(lambda got, raw: None)  # accepts, never answers
    d = dt.worker("decode")
    s = d.connect()
    s.sendall(st.post_bytes("/v1/completions", json.dumps(dict(prompt="x" * 30)).encode(),
                            {"x-kpi-prefill": fake.addr}))
    assert fake.got_request.wait(30)
    st.wait_for(lambda: d.metrics()["kpi_infer_kv_fetching"] == 1, what="fetching")
    s.close()
    st.wait_for(lambda: fake.peer_closed == [True], what="the prefill connection closed")
    m = d.metrics()
    assert m["kpi_infer_kv_fetching"] == 0
    assert m[f'kpi_infer_kv_transfer_errors_total{{model_name="{d.model}",cause="cancelled"}}'] == 1
    assert dt.load(d.port)["waiting"] == 0


# ---- the router's policies --------------------------------------------------------

def _counts(ws, key):
    return [w.metrics().get(key, 0) for w in ws]


def test_router_round_robin_alternates():
    ps = [dt.worker("prefill") for _ in range(2)]
    ds = [dt.worker("decode") for _ in range(2)]
    r = dt.router(ds, ps, "--policy", "round-robin")
    for i in range(1, 9):
        dt.token_ids(r.port, [7] * (i + 3), 2)
        want = [(i + 1) // 2, i // 2]
        assert sorted(_counts(ds, "kpi_infer_kv_transfers_total")) == sorted(want)
        assert sorted(_counts(ps, "kpi_infer_kv_sends_total")) == sorted(want)
    assert _counts(ds, "kpi_infer_kv_transfers_total") == [4, 4]


@kpitest.alone
def test_router_least_loaded_avoids_the_busy_worker():
    """One decode worker busy with long streams its /load reports: the router
    sends every new request to the other one."""
    ps = [dt.worker("prefill")]
    ds = [dt.worker("decode") for _ in range(2)]
    r = dt.router(ds, ps, "--policy", "least-loaded", "--load-interval", 20)
    busy = []
    for _ in range(3):
        s = ds[0].connect()
        s.sendall(st.post_bytes("/v1/completions", json.dumps(dict(
            prompt=[9] * 8, max_tokens=1900, ignore_eos=True, stream=True)).encode()))
        busy.append(s)
    key = f'kpi_router_worker_load{{role="decode",worker="{ds[0].addr}"}}'
    st.wait_for(lambda: r.metrics().get(key, 0) >= 3, what="the router seeing the load")
    for i in range(4):
        dt.token_ids(r.port, [11] * 20, 2)
    still = dt.load(ds[0].port)
    assert still["running"] + still["waiting"] >= 3, "the long streams ended early: " + str(still)
    assert _counts(ds, "kpi_infer_kv_transfers_total") == [0, 4]
    for s in busy:
        s.close()


def test_router_prefix_keeps_a_prefix_on_one_prefill_worker():
    ps = [dt.worker("prefill") for _ in range(2)]
    d = dt.worker("decode")
    r = dt.router([d], ps, "--policy", "prefix", "--prefix-bytes", 32)
    rng = random.Random(9)
    seen = []
    for k in range(16):
        prefix = dt.random_prompt(rng, 8)  # 32 bytes of int32 ids
        before = _counts(ps, "kpi_infer_kv_sends_total")
        for j in range(3):
            dt.token_ids(r.port, prefix + dt.random_prompt(rng, 5 + j), 2)
        after = _counts(ps, "kpi_infer_kv_sends_total")
        delta = [a - b for a, b in zip(after, before)]
        assert sorted(delta) == [0, 3], (k, delta)
        seen.append(delta.index(3))
    assert set(seen) == {0, 1}, seen


def test_router_without_prefill_workers_lets_decode_prefill():
    d = dt.worker("decode")
    r = dt.router([d])
    colo = st.Daemon()
    ids = dt.random_prompt(random.Random(4), 100)
    assert dt.token_ids(r.port, ids) == dt.token_ids(colo.port, ids)
    assert d.metrics()["kpi_infer_kv_transfers_total"] == 0


def test_router_unreachable_decode_worker_is_502_or_the_other_one():
    dead_port = kpitest.free_port()
    d = dt.worker("decode")

    class Dead:
        addr = f"127.0.0.1:{dead_port}"

    r = dt.router([Dead, d])  # round-robin: every other request first meets the dead one
    for _ in range(4):
        assert len(dt.token_ids(r.port, [5, 6, 7], 3)) == 3
    r2 = dt.router([Dead], models=False)
    status, _, body = dt.complete(r2.port, [5, 6, 7])
    assert status == 502 and f"decode worker {Dead.addr} failed" in body["error"]["message"], body


@kpitest.alone
def test_kpi_bench_drives_the_router():
    benchtest.require_built()
    p, d = dt.worker("prefill"), dt.worker("decode")
    r = dt.router([d], [p])
    out = os.path.join(kpitest.tmpdir(), "b")
    res = benchtest.kpi_bench("--url", f"http://127.0.0.1:{r.port}", "--requests", 20,
                              "--concurrency", 4, "--prompt-len", "uniform:10:300",
                              "--max-tokens", 8, "--ignore-eos", "--json", out + ".json",
                              "--csv", out + ".csv")
    assert res.returncode == 0, res.stderr
    rows = benchtest.read_csv(out + ".csv")
    assert len(rows) == 20 and all(r_["status"] == "200" for r_ in rows), rows[:2]
    assert d.metrics()["kpi_infer_kv_transfers_total"] == 20


# ---- the probes ----------------------------------------------------------------------

PROBES_BT = r"""
usdt:%(bin)s:kpi:route__decision { printf("DECISION %%d %%s %%d %%s %%s\n", arg0, str(arg2), arg3, str(arg4), str(arg5)); }
usdt:%(bin)s:kpi:kv__send_start { printf("SEND_START %%d %%s %%d %%d %%s\n", arg0, str(arg1), arg3, arg4, str(arg5)); }
usdt:%(bin)s:kpi:kv__send_end { printf("SEND_END %%d %%d %%d\n", arg0, arg2, arg3); }
usdt:%(bin)s:kpi:kv__recv_start { printf("RECV_START %%d %%s %%d %%d %%s\n", arg0, str(arg1), arg3, arg4, str(arg5)); }
usdt:%(bin)s:kpi:kv__recv_end { printf("RECV_END %%d %%d %%d %%d\n", arg0, arg2, arg3, arg4); }
usdt:%(bin)s:kpi:kv__slot_wait { printf("SLOT_WAIT %%d %%d %%d %%d %%d %%d\n", arg0, arg1, arg2, arg3, arg4, arg5); }
usdt:%(bin)s:kpi:request__prefix_hit { printf("PREFIX_HIT %%d %%d\n", arg0, arg1); }
usdt:%(bin)s:kpi:request__admitted { printf("ADMITTED %%d %%d %%s %%d\n", arg0, arg2, str(arg4), arg5); }
"""


@kpitest.alone
def test_new_probes_fire_with_their_arguments():
    kpitest.require_root("attaching bpftrace to kpi-infer's probes")
    import shutil
    if not shutil.which("bpftrace"):
        raise kpitest.Skip("bpftrace is not installed (make deps installs it)")
    p, d = dt.worker("prefill"), dt.worker("decode")
    r = dt.router([d], [p], "--policy", "prefix")
    script = os.path.join(kpitest.tmpdir(), "disagg.bt")
    with open(script, "w") as f:
        f.write(PROBES_BT % {"bin": os.path.realpath(st.KPI_INFER)})
    traces = {}
    for name, w in (("router", r), ("decode", d), ("prefill", p)):
        t = kpitest.Proc(["bpftrace", "-p", str(w.p.pid), script])
        t.wait_line("Attaching", timeout=60)
        traces[name] = t
    time.sleep(1.0)  # bpftrace prints Attaching before its uprobes are all in place
    ids = [8] * 40
    for k in range(2):  # the second hits the prefill worker's prefix cache
        dt.token_ids(r.port, ids, 3, headers={"X-Request-Id": f"probe-{k}"})
    # bpftrace prints as events arrive; read lines rather than wait for its exit
    for name, kinds in (("router", ["DECISION"] * 2), ("prefill", ["SEND_END"] * 2),
                        ("decode", ["RECV_END"] * 2 + ["SLOT_WAIT"] * 2)):
        for k in set(kinds):
            st.wait_for(lambda: sum(l.startswith(k + " ") for l in traces[name].drain()) >=
                        kinds.count(k), timeout=30, what=f"{k} from the {name}")
    lines = {n: [l.split() for l in t.drain() if l[:1].isupper()] for n, t in traces.items()}
    dec = [l for l in lines["router"] if l[0] == "DECISION"]
    assert [l[2] for l in dec] == ["probe-0", "probe-1"], lines["router"]
    assert all(l[3] == "3" and l[4] == d.addr and l[5] == p.addr for l in dec), dec
    payload = 4 * 40 * 2 * 128 * 2
    ss = [l for l in lines["prefill"] if l[0] == "SEND_START"]
    se = [l for l in lines["prefill"] if l[0] == "SEND_END"]
    assert [l[2] for l in ss] == ["probe-0", "probe-1"] and all(
        int(l[3]) == payload and l[4] == "3" and l[5].startswith("127.0.0.1:") for l in ss), ss
    assert [(int(l[2]), int(l[3])) for l in se] == [(payload, 0)] * 2, se
    hits = [l for l in lines["prefill"] if l[0] == "PREFIX_HIT"]
    assert len(hits) == 1 and hits[0][2] == "32", hits  # 2 of the 3 blocks (never the last token's)
    adm = [l for l in lines["prefill"] if l[0] == "ADMITTED"]
    assert [(l[3], l[4]) for l in adm] == [("probe-0", "3"), ("probe-1", "3")], adm
    rs = [l for l in lines["decode"] if l[0] == "RECV_START"]
    re_ = [l for l in lines["decode"] if l[0] == "RECV_END"]
    assert [l[2] for l in rs] == ["probe-0", "probe-1"] and all(
        int(l[3]) == payload and l[4] == "3" and l[5] == p.addr for l in rs), rs
    assert [(int(l[2]), int(l[3]), int(l[4])) for l in re_] == [(payload, 3, 0)] * 2, re_
    sw = [l for l in lines["decode"] if l[0] == "SLOT_WAIT"]
    assert len(sw) == 2 and all(l[3] == "3" and int(l[5]) == 0 and int(l[6]) == 64 for l in sw), sw


test_new_probes_fire_with_their_arguments.timeout = 180
