"""kpi-bench against a real kpi-infer: sane numbers, CSV ids that are the
server's x-request-ids, SLO goodput on constructed cases, errors by status,
Ctrl-C; and clear errors for every kind of bad command line."""
import os, re, signal, subprocess, time

import kpitest
import benchtest
from benchtest import kpi_bench, read_csv, read_json

MAIN_C = os.path.join(kpitest.ROOT, "tools", "kpi-bench", "main.c")


def tmpdir():
    return kpitest.tmpdir("kpi-bench-test-")


def pct(values, p):
    """Linear interpolation between closest ranks, computed independently."""
    v = sorted(values)
    ix = (len(v) - 1) * p / 100.0
    lo = int(ix)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (ix - lo)


def num(row, key):
    return float(row[key]) if row[key] != "" else None


# ---- command line (no server needed) ------------------------------------------

def test_help_documents_every_flag():
    benchtest.require_built(need_server=False)
    p = kpitest.run([benchtest.BENCH, "--help"])
    assert p.returncode == 0, p.stderr
    with open(MAIN_C) as f:
        src = f.read()
    table = src[src.index("long_opts[]"):]
    table = table[:table.index("{ 0 }")]
    flags = re.findall(r'\{ "([a-z-]+)",', table)
    assert len(flags) >= 20, flags
    for fl in flags:
        assert f"--{fl}" in p.stdout, f"--help does not document --{fl}"


def bad(args, *needles):
    p = kpitest.run([benchtest.BENCH, *args])
    assert p.returncode == 2, f"{args}: exit {p.returncode}, want 2\n{p.stdout}{p.stderr}"
    assert p.stdout == "", f"{args}: usage errors go to stderr, got stdout {p.stdout!r}"
    for n in needles:
        assert n in p.stderr, f"{args}: message lacks {n!r}:\n{p.stderr}"
    return p.stderr


def test_bad_flags_name_the_flag():
    benchtest.require_built(need_server=False)
    u = ["--url", "http://127.0.0.1:9"]
    bad(u + ["--frobnicate"], "unknown flag '--frobnicate'", "--help")
    bad(["--requests", "3"], "--url is required")
    bad(u + ["--requests"], "--requests needs a value")
    bad(u + ["--requests", "0"], "--requests '0'", "positive integer")
    bad(u + ["--requests", "12x"], "--requests '12x'")
    bad(u + ["--concurrency", "-4"], "--concurrency '-4'", "positive integer")
    bad(u + ["--rate", "0"], "--rate '0'", "requests per second")
    bad(u + ["--duration", "soon"], "--duration 'soon'", "seconds")
    bad(u + ["--endpoint", "embeddings"], "--endpoint 'embeddings'", "completions or chat")
    bad(u + ["--rate", "5", "--concurrency", "4"], "--rate and --concurrency", "give one of")
    bad(u + ["--burst"], "--burst needs --requests")
    bad(u + ["--burst", "--requests", "4", "--duration", "3"], "--duration does not apply to --burst")
    bad(u + ["--slo", "ttft"], "--slo 'ttft'", "NAME=MS")
    bad(u + ["--slo", "latency=5"], "unknown metric 'latency'", "ttft, tpot or e2e")
    bad(u + ["--slo", "ttft=-1"], "ttft needs a positive number")
    bad(u + ["--seed", "-1"], "--seed '-1'")
    bad(u + ["--token-ids=9:3"], "--token-ids='9:3'", "A:B")
    bad(u + ["stray"], "unexpected argument 'stray'")
    bad(["--url", "https://example.com"], "https is not supported")
    bad(["--url", "localhost:8000"], "--url 'localhost:8000'", "http://HOST")
    bad(["--url", "http://127.0.0.1:99999"], "port 99999")


def test_bad_dist_names_the_flag_and_the_forms():
    benchtest.require_built(need_server=False)
    u = ["--url", "http://127.0.0.1:9"]
    forms = "N, uniform:A:B, exp:MEAN[:MAX] or file:PATH"
    bad(u + ["--prompt-len", "lots"], "--prompt-len 'lots'", forms)
    bad(u + ["--max-tokens", "0"], "--max-tokens '0'", forms)
    bad(u + ["--max-tokens", "normal:5:2"], "--max-tokens 'normal:5:2': unknown distribution 'normal'", forms)
    bad(u + ["--prompt-len", "uniform:9:3"], "--prompt-len 'uniform:9:3'", "A (9) is greater than B (3)")
    bad(u + ["--prompt-len", "uniform:4"], "--prompt-len 'uniform:4'", "uniform:A:B")
    bad(u + ["--prompt-len", "exp:abc"], "--prompt-len 'exp:abc'", "MEAN must be a number")
    bad(u + ["--max-tokens", "exp:64:10"], "--max-tokens 'exp:64:10'", "MAX (10) is below MEAN")
    bad(u + ["--max-tokens", "exp:64:ten"], "MAX must be a positive integer")
    bad(u + ["--prompt-len", "file:"], "--prompt-len 'file:': needs a path")
    bad(u + ["--prompt-len", "file:/nonexistent/lens.txt"], "--prompt-len 'file:/nonexistent/lens.txt': cannot open '/nonexistent/lens.txt'")
    d = tmpdir()
    path = os.path.join(d, "lens.txt")
    with open(path, "w") as f:
        f.write("# prompt lengths\n12\n\n40\nforty\n")
    bad(u + ["--prompt-len", "file:" + path], f"{path}:5: 'forty' is not a positive integer")
    empty = os.path.join(d, "empty.txt")
    open(empty, "w").close()
    bad(u + ["--max-tokens", "file:" + empty], "holds no lengths")


def test_unreachable_server_says_so():
    benchtest.require_built(need_server=False)
    port = kpitest.free_port()
    p = kpi_bench("--url", f"http://127.0.0.1:{port}", "--requests", "3")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "connect x3" in p.stdout, p.stdout
    assert f"127.0.0.1:{port}: Connection refused" in p.stdout, p.stdout
    assert "no request succeeded" in p.stderr, p.stderr


# ---- against a real kpi-infer ---------------------------------------------------

def check_stats(js, key, n):
    s = js[key]
    assert s["n"] == n, (key, s, n)
    if n:
        assert 0 <= s["p50"] <= s["p90"] <= s["p95"] <= s["p99"] <= s["max"], (key, s)


def test_numbers_are_sane_and_ids_are_the_servers():
    benchtest.require_built()
    srv, url = benchtest.start_server()
    proxy = benchtest.IdProxy(int(url.rsplit(":", 1)[1]))
    d = tmpdir()
    csv_path, json_path = os.path.join(d, "r.csv"), os.path.join(d, "r.json")
    p = kpi_bench("--url", proxy.url, "--requests", 16, "--concurrency", 4,
                  "--prompt-len", "uniform:8:48", "--max-tokens", "uniform:2:12",
                  "--ignore-eos", "--seed", 7, "--csv", csv_path, "--json", json_path)
    assert p.returncode == 0, p.stdout + p.stderr
    rows, js = read_csv(csv_path), read_json(json_path)
    assert len(rows) == 16 and js["requests"]["ok"] == 16 and js["requests"]["failed"] == 0, js
    assert [int(r["index"]) for r in rows] == list(range(16))
    tokens = 0
    for r in rows:
        assert r["status"] == "200" and r["error"] == "", r
        mt = int(r["max_tokens"])
        assert 2 <= mt <= 12 and 8 <= int(r["prompt_len"]) <= 48, r
        # --ignore-eos: the server generates exactly max_tokens, and says so in usage
        assert int(r["completion_tokens"]) == mt, r
        # one token per SSE chunk (byte-level vocabulary, one event per token)
        assert int(r["chunks"]) == mt, r
        # the prompt is prompt_len ASCII bytes = as many byte tokens (+ BOS)
        assert int(r["prompt_len"]) <= int(r["prompt_tokens"]) <= int(r["prompt_len"]) + 2, r
        ttft, e2e, tpot = num(r, "ttft_ms"), num(r, "e2e_ms"), num(r, "tpot_ms")
        assert 0 < ttft <= e2e, r
        assert abs(tpot - (e2e - ttft) / (mt - 1)) < 0.01, r
        assert num(r, "itl_max_ms") <= e2e - ttft + 0.01, r
        assert num(r, "t_sent_ms") >= 0, r
        tokens += mt
    # the CSV's ids are exactly the x-request-id headers the server sent
    ids = [r["request_id"] for r in rows]
    assert all(ids) and len(set(ids)) == 16, ids
    assert sorted(ids) == sorted(proxy.ids), (ids, proxy.ids)
    assert js["tokens"]["completion"] == tokens
    check_stats(js, "ttft_ms", 16)
    check_stats(js, "e2e_ms", 16)
    check_stats(js, "tpot_ms", 16)
    check_stats(js, "itl_ms", tokens - 16)   # one gap between each pair of tokens
    assert js["ttft_ms"]["max"] <= js["e2e_ms"]["max"]
    # the summary's percentiles are those of the per-request rows (CSV keeps 3 decimals)
    for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
        vals = [num(r, key) for r in rows]
        for q in (50, 90, 95, 99):
            assert abs(js[key][f"p{q}"] - pct(vals, q)) < 0.002, (key, q, js[key], vals)
        assert abs(js[key]["mean"] - sum(vals) / len(vals)) < 0.002, (key, js[key])
        assert abs(js[key]["max"] - max(vals)) < 0.002, (key, js[key])
    assert abs(js["itl_ms"]["max"] - max(num(r, "itl_max_ms") for r in rows)) < 0.002
    assert js["throughput"]["requests_per_s"] > 0 and js["throughput"]["output_tokens_per_s"] > 0
    assert abs(js["throughput"]["output_tokens_per_s"] / js["throughput"]["requests_per_s"]
               - tokens / 16) < 0.01
    assert js["slo"] is None and js["goodput_rps"] is None and js["errors"] == {}
    # the text report carries the same run
    for word in ("ttft", "tpot", "itl", "e2e", "p50", "p99", "throughput:", "16 ok, 0 failed"):
        assert word in p.stdout, p.stdout


def test_same_seed_same_workload():
    benchtest.require_built()
    srv, url = benchtest.start_server()
    d = tmpdir()
    lens = os.path.join(d, "lens.txt")
    with open(lens, "w") as f:
        f.write("5\n9\n13\n")
    cols = []
    for i, seed in enumerate((11, 11, 12)):
        path = os.path.join(d, f"{i}.csv")
        p = kpi_bench("--url", url, "--requests", 10, "--rate", 200, "--seed", seed,
                      "--prompt-len", "exp:20:60", "--max-tokens", "file:" + lens,
                      "--ignore-eos", "--csv", path)
        assert p.returncode == 0, p.stdout + p.stderr
        rows = read_csv(path)
        assert len(rows) == 10 and all(r["error"] == "" for r in rows), rows
        assert all(r["max_tokens"] in ("5", "9", "13") for r in rows), rows
        assert all(1 <= int(r["prompt_len"]) <= 60 for r in rows), rows
        assert all(r["completion_tokens"] == r["max_tokens"] for r in rows), rows
        cols.append([(r["prompt_len"], r["max_tokens"]) for r in rows])
    assert cols[0] == cols[1], "the same --seed must give the same workload"
    assert cols[0] != cols[2], "a different --seed must give a different workload"


def test_duration_and_warmup():
    benchtest.require_built()
    srv, url = benchtest.start_server()
    d = tmpdir()
    path, jpath = os.path.join(d, "d.csv"), os.path.join(d, "d.json")
    p = kpi_bench("--url", url, "--duration", "1.5", "--concurrency", 2, "--warmup", 3,
                  "--max-tokens", 4, "--ignore-eos", "--csv", path, "--json", jpath)
    assert p.returncode == 0, p.stdout + p.stderr
    rows, js = read_csv(path), read_json(jpath)
    assert rows and js["requests"]["completed"] == len(rows), js
    # warm-up requests are not in the results; measured ones count from 0
    assert [int(r["index"]) for r in rows] == list(range(len(rows)))
    # no request starts after --duration (start = sent - connect, each rounded
    # to the microsecond in the CSV); the ones in flight are waited for
    assert all(0 <= float(r["t_sent_ms"]) - float(r["connect_ms"]) < 1500.002 for r in rows), \
        max(float(r["t_sent_ms"]) - float(r["connect_ms"]) for r in rows)
    assert all(r["error"] == "" for r in rows), rows


@kpitest.beside            # its CPU from rusage: no neighbour moves it
def test_quiet_run_does_not_spin():
    """A --quiet run (every sweep point is one) waits for its events: its CPU
    stays that of its requests past the 10 s at which the progress line would
    have been due. It spun on epoll with a zero timeout from then on, taking
    a core from the server it measured: TTFT p50 3 -> 17 ms at 10 s."""
    benchtest.require_built()
    srv, url = benchtest.start_server()
    b = subprocess.Popen([benchtest.BENCH, "--quiet", "--url", url, "--rate", "2", "--duration", "13",
                          "--prompt-len", "8", "--max-tokens", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    kpitest.on_cleanup(lambda: b.poll() is None and b.kill())
    _, status, ru = os.wait4(b.pid, 0)
    b.returncode = os.waitstatus_to_exitcode(status)
    cpu = ru.ru_utime + ru.ru_stime
    print(f"kpi-bench --quiet, 13 s at 2 req/s: {cpu:.3f} s of CPU")
    assert b.returncode == 0, b.stderr.read().decode()
    assert cpu < 1.0, f"{cpu:.2f} s of CPU in 13 s for 26 requests: the event loop spins"


def test_chat_token_ids_and_no_stream():
    benchtest.require_built()
    srv, url = benchtest.start_server()
    d = tmpdir()
    path = os.path.join(d, "c.csv")
    p = kpi_bench("--url", url, "--endpoint", "chat", "--requests", 4, "--concurrency", 2,
                  "--prompt-len", 16, "--max-tokens", 6, "--ignore-eos", "--csv", path)
    assert p.returncode == 0, p.stdout + p.stderr
    for r in read_csv(path):
        assert r["error"] == "" and r["completion_tokens"] == "6", r
        assert int(r["prompt_tokens"]) > 16, r   # the chat template adds its own tokens
        assert 0 < num(r, "ttft_ms") <= num(r, "e2e_ms"), r

    p = kpi_bench("--url", url, "--token-ids=70:120", "--requests", 4, "--prompt-len", 24,
                  "--max-tokens", 5, "--ignore-eos", "--csv", path)
    assert p.returncode == 0, p.stdout + p.stderr
    for r in read_csv(path):
        assert r["error"] == "" and r["completion_tokens"] == "5", r
        assert 24 <= int(r["prompt_tokens"]) <= 26, r   # ids go in as they are (+ BOS)

    jpath = os.path.join(d, "n.json")
    p = kpi_bench("--url", url, "--no-stream", "--requests", 4, "--burst", "--max-tokens", 7,
                  "--ignore-eos", "--csv", path, "--json", jpath)
    assert p.returncode == 0, p.stdout + p.stderr
    for r in read_csv(path):
        assert r["error"] == "" and r["completion_tokens"] == "7" and r["request_id"], r
        assert r["ttft_ms"] == r["e2e_ms"] and r["tpot_ms"] == "", r   # whole answer at once
    js = read_json(jpath)
    assert js["tpot_ms"]["n"] == 0 and js["itl_ms"]["n"] == 0 and js["e2e_ms"]["n"] == 4, js


def test_slo_goodput_constructed_cases():
    benchtest.require_built()
    srv, url = benchtest.start_server()
    d = tmpdir()
    # an SLO no request can meet: 1 ns to the first token
    jpath, cpath = os.path.join(d, "miss.json"), os.path.join(d, "miss.csv")
    p = kpi_bench("--url", url, "--requests", 6, "--concurrency", 3, "--max-tokens", 4,
                  "--ignore-eos", "--slo", "ttft=0.000001", "--json", jpath, "--csv", cpath)
    assert p.returncode == 0, p.stdout + p.stderr
    js = read_json(jpath)
    assert js["requests"]["ok"] == 6 and js["slo_met"] == 0 and js["goodput_rps"] == 0, js
    assert js["slo"] == {"ttft_ms": 0.000001, "tpot_ms": None, "e2e_ms": None}, js["slo"]
    assert all(r["slo_met"] == "0" for r in read_csv(cpath))
    assert "goodput: 0.00 req/s (0 of 6 requests met ttft<=1e-06ms)" in p.stdout, p.stdout

    # an SLO every request meets: ten minutes for everything
    jpath = os.path.join(d, "meet.json")
    p = kpi_bench("--url", url, "--requests", 6, "--concurrency", 3, "--max-tokens", 4,
                  "--ignore-eos", "--slo", "ttft=600000,tpot=600000,e2e=600000", "--json", jpath)
    assert p.returncode == 0, p.stdout + p.stderr
    js = read_json(jpath)
    assert js["slo_met"] == 6, js
    assert abs(js["goodput_rps"] - js["throughput"]["requests_per_s"]) < 1e-9, js

    # a bound between the two: goodput counts exactly the rows under it
    e2e = sorted(float(r["e2e_ms"]) for r in read_csv(cpath))
    mid = (e2e[2] + e2e[3]) / 2
    if e2e[2] < mid < e2e[3]:
        jpath, cpath2 = os.path.join(d, "mid.json"), os.path.join(d, "mid.csv")
        # same seed and workload, fresh timings: count against this run's own rows
        p = kpi_bench("--url", url, "--requests", 6, "--concurrency", 3, "--max-tokens", 4,
                      "--ignore-eos", "--slo", f"e2e={mid}", "--json", jpath, "--csv", cpath2)
        assert p.returncode == 0, p.stdout + p.stderr
        rows, js = read_csv(cpath2), read_json(jpath)
        want = sum(1 for r in rows if float(r["e2e_ms"]) <= mid)
        assert js["slo_met"] == want == sum(r["slo_met"] == "1" for r in rows), (js, rows)
        assert abs(js["goodput_rps"] - want / js["duration_s"]) < 1e-9, js


def test_errors_by_status():
    benchtest.require_built()
    # one running sequence, one waiting: a burst of 12 must meet 429s
    srv, url = benchtest.start_server("--max-seqs", "1", "--max-queue", "1")
    d = tmpdir()
    jpath, cpath = os.path.join(d, "e.json"), os.path.join(d, "e.csv")
    p = kpi_bench("--url", url, "--burst", "--requests", 12, "--max-tokens", 32,
                  "--ignore-eos", "--json", jpath, "--csv", cpath)
    assert p.returncode == 0, p.stdout + p.stderr
    rows, js = read_csv(cpath), read_json(jpath)
    rejected = [r for r in rows if r["status"] == "429"]
    assert rejected, f"no 429 from a burst of 12 with --max-queue 1:\n{p.stdout}"
    assert js["errors"]["429"]["count"] == len(rejected), js["errors"]
    assert "error" in js["errors"]["429"]["first"], js["errors"]   # the server's JSON body
    assert all(r["error"] == "http" and r["request_id"] and r["ttft_ms"] == "" for r in rejected)
    assert js["requests"]["ok"] + len(rejected) == 12, js["requests"]
    assert f"429 x{len(rejected)}" in p.stdout, p.stdout
    assert js["ttft_ms"]["n"] == js["requests"]["ok"], js   # failures never enter the percentiles


def test_burst_of_300_from_one_thread():
    benchtest.require_built()
    srv, url = benchtest.start_server("--max-queue", "512")
    d = tmpdir()
    cpath = os.path.join(d, "b.csv")
    b = kpitest.Proc([benchtest.BENCH, "--url", url, "--burst", "--requests", "300",
                      "--prompt-len", "16", "--max-tokens", "3", "--ignore-eos", "--quiet",
                      "--csv", cpath])
    threads = set()
    while b.p.poll() is None:
        try:
            with open(f"/proc/{b.pid}/status") as f:
                threads.update(int(l.split()[1]) for l in f if l.startswith("Threads:"))
        except OSError:
            break
        time.sleep(0.05)
    assert b.stop(timeout=120) == 0, "\n".join(b.lines)
    assert threads <= {1}, f"kpi-bench ran {threads} threads; it is one epoll loop"
    rows = read_csv(cpath)
    assert len(rows) == 300 and all(r["error"] == "" for r in rows), "\n".join(b.lines)
    assert len({r["request_id"] for r in rows}) == 300
    assert all(r["completion_tokens"] == "3" for r in rows)


def test_ctrl_c_prints_what_was_measured():
    benchtest.require_built()
    srv, url = benchtest.start_server()
    d = tmpdir()
    jpath = os.path.join(d, "i.json")
    b = kpitest.Proc([benchtest.BENCH, "--url", url, "--requests", "100000", "--concurrency", "2",
                      "--max-tokens", "4", "--ignore-eos", "--json", jpath])
    deadline = time.monotonic() + 60
    time.sleep(2)
    rc = b.stop(signal.SIGINT, timeout=30)
    out = "\n".join(b.lines)
    assert rc == 130, f"exit {rc}, want 130\n{out}"
    assert "interrupted: the numbers below cover the" in out, out
    js = read_json(jpath)
    assert js["interrupted"] is True and js["requests"]["completed"] < 100000, js
    m = re.search(r"requests: (\d+) ok", out)
    assert m and int(m.group(1)) == js["requests"]["ok"], out
    assert time.monotonic() < deadline
