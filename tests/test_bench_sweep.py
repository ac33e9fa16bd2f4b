"""kpi-bench --sweep, --replay and --burstiness against a real kpi-infer: the
sweep's answer, with its default point length, holds for 30 s and 1.5 times
it does not; an overloaded run's points are marked not sustained and never
meet the SLO; its page draws every point and renders in headless Chromium,
Ctrl-C keeps the points so far, a replay reproduces its recording; and the
flags that do not fit are refused."""
import math, os, re, shutil, signal, struct, subprocess, tempfile, zlib

import kpitest
import benchtest
from benchtest import kpi_bench, read_csv, read_json

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
LINE_SERIES = (("ttft_p50", "ttft_p50_ms"), ("ttft_p99", "ttft_p99_ms"), ("tpot_p50", "tpot_p50_ms"),
               ("tpot_p99", "tpot_p99_ms"), ("throughput", "throughput_rps"), ("goodput", "goodput_rps"))
# the server and workload: kpi-infer batching 8 sequences (on one
# engine thread: the other core is kpi-bench's), 64-token prompts, 32 tokens out
SERVER = ("--max-seqs", "8", "--threads", "1")
WORK = ("--prompt-len", 64, "--max-tokens", 32, "--ignore-eos")
SLO = ("--slo", "ttft=250,tpot=40")
HOLD_S = 30     # how long the sweep's answer must hold


def tmpdir():
    return kpitest.tmpdir("kpi-bench-sweep-")


# A sweep measures the server's capacity: on a machine shared with other
# jobs (a 2-core one where other builds run: a load average of 10 to 20),
# the server and kpi-bench run ahead of them, SCHED_FIFO when root, so that
# the capacity found is the server's, not what the others left of it (a
# nice -10 task still shares a core with ten busy nice-0 ones in proportion
# to its weight, about 9 of theirs).
RT = ["chrt", "-f", "10"] if os.geteuid() == 0 and shutil.which("chrt") else []


def rt_server(*extra):
    port = kpitest.free_port()
    p = kpitest.Proc([*RT, benchtest.INFER, "--model", benchtest.preset_model(), "--port", str(port), *extra])
    p.wait_line("listening on http://", timeout=60)
    return p, f"http://127.0.0.1:{port}"


def rt_bench(*args, timeout=600):
    return kpitest.run([*RT, benchtest.BENCH, "--quiet", *map(str, args)], timeout=timeout)


def capacity_of(url):
    """The server's throughput with more requests in flight than it batches."""
    path = os.path.join(tmpdir(), "cap.json")
    p = rt_bench("--url", url, "--concurrency", 32, "--duration", 5, *WORK, "--json", path)
    assert p.returncode == 0, p.stdout + p.stderr
    return read_json(path)["throughput"]["requests_per_s"]


def bad(args, *needles):
    p = kpitest.run([benchtest.BENCH, "--url", "http://127.0.0.1:9", *args])
    assert p.returncode == 2, f"{args}: exit {p.returncode}, want 2\n{p.stdout}{p.stderr}"
    for n in needles:
        assert n in p.stderr, f"{args}: message lacks {n!r}:\n{p.stderr}"


def test_sweep_flags_are_checked():
    benchtest.require_built(need_server=False)
    bad(["--sweep", "latency"], "--sweep 'latency'", "rate or concurrency")
    bad(["--sweep", "rate"], "--sweep needs --slo")
    bad(["--sweep", "rate", "--slo", "ttft=9", "--rate", "4"], "--sweep chooses each run's load", "--rate")
    bad(["--sweep", "rate", "--slo", "ttft=9", "--csv", "x.csv"], "--csv writes one run's requests")
    bad(["--html", "x.html"], "--html only applies to a sweep")
    bad(["--slo-share", "0.9"], "--slo-share only applies to a sweep")
    bad(["--sweep", "rate", "--slo", "ttft=9", "--slo-share", "1.5"], "--slo-share '1.5'")
    bad(["--sweep", "rate", "--slo", "ttft=9", "--sweep-steps", "4,2"], "loads must rise")
    bad(["--sweep", "concurrency", "--slo", "ttft=9", "--sweep-steps", "1,2.5"], "not a whole number")
    bad(["--sweep", "rate", "--slo", "ttft=9", "--sweep-start", "8", "--sweep-max", "4"], "below --sweep-start")
    bad(["--min-requests", "5"], "--min-requests only applies to a sweep")
    bad(["--confirm-duration", "30"], "--confirm-duration only applies to a sweep")
    bad(["--sweep", "rate", "--slo", "ttft=9", "--confirm-duration", "0"], "--confirm-duration '0'", "seconds")
    bad(["--sweep", "rate", "--slo", "ttft=9", "--requests", "50", "--min-requests", "5"],
        "--requests 50 already fixes each point's count")
    bad(["--sweep", "rate", "--slo", "ttft=9", "--min-requests", "0"], "--min-requests '0'")
    bad(["--burstiness", "0.5"], "--burstiness shapes open-loop arrivals")
    bad(["--rate", "4", "--burstiness", "0"], "--burstiness '0'")
    bad(["--replay-speed", "2"], "--replay-speed needs --replay")
    bad(["--replay", "/nonexistent.csv"], "--replay '/nonexistent.csv': cannot open")
    bad(["--replay", "/dev/null", "--rate", "3"], "--replay and --rate both choose how requests arrive")
    d = tmpdir()
    nohdr = os.path.join(d, "h.csv")
    with open(nohdr, "w") as f:
        f.write("when,size\n1,2\n")
    bad(["--replay", nohdr], "names no offset", "offset_ms,prompt_len,output_len")


# ---- the page ---------------------------------------------------------------------

def svgs(html):
    return re.findall(r"<svg\b.*?</svg>", html, re.S)


def marks(svg, series):
    return len(re.findall(rf'class="pt" data-series="{series}"', svg))


def check_page(html, js, with_phases=False):
    """One SVG per chart, each series with one mark per point of the JSON,
    and nothing the page would fetch or run."""
    charts = svgs(html)
    assert len(charts) == (4 if with_phases else 3), len(charts)
    n = len(js["points"])
    for svg in charts[:3]:
        assert "offered load" in svg and "<polyline" in svg, svg[:300]
    for i, (series, key) in enumerate(LINE_SERIES):
        want = sum(1 for p in js["points"] if p[key] is not None)
        assert want == n, (key, js["points"])
        assert marks(charts[i // 2], series) == n, (series, marks(charts[i // 2], series), n)
    if with_phases:
        for ph in ("net_in", "queue", "prefill", "decode", "net_out"):
            assert marks(charts[3], ph) == n, (ph, n)
    assert "<script" not in html.lower()
    assert not re.search(r'(src|href)\s*=', html, re.I), "the page must not link anything"
    assert "@import" not in html and "url(" not in html


def png_pixels(path):
    """(width, height, set of distinct pixels) of an 8-bit RGB/RGBA PNG,
    decoded with zlib alone."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w = 8, b"", None
    while pos < len(data):
        n, typ = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if typ == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), (depth, ctype)
            bpp = 4 if ctype == 6 else 3
        elif typ == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    prev = bytearray(stride)
    colours = set()
    for y in range(h):
        ft = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if ft == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif ft == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif ft == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif ft == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        if y % 2 == 0:
            colours.update(bytes(line[i:i + 3]) for i in range(0, stride, bpp * 2))
        prev = line
    return w, h, colours


def screenshot(html_path):
    """Renders the page in headless Chromium; returns (png path, its log)."""
    if not CHROMIUM:
        raise kpitest.Skip("chromium is not installed (make deps installs it)")
    d = tempfile.mkdtemp(prefix="kpi-chromium-", dir=tmpdir())
    png = os.path.join(d, "page.png")
    p = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                        "--no-first-run", "--disable-background-networking", "--disable-component-update",
                        "--disable-sync", f"--user-data-dir={d}/profile", "--enable-logging=stderr", "--v=0",
                        "--hide-scrollbars", f"--screenshot={png}", "--window-size=800,1400",
                        "file://" + os.path.abspath(html_path)],
                       capture_output=True, text=True, timeout=120)
    assert os.path.exists(png), f"no screenshot (exit {p.returncode}):\n{p.stderr[-3000:]}"
    return png, p.stdout + p.stderr


def check_screenshot(html_path):
    png, log = screenshot(html_path)
    for bad_word in ("Uncaught", "CONSOLE", "Failed to load resource", "net::ERR"):
        assert bad_word not in log, f"the page logged {bad_word!r}:\n{log[-3000:]}"
    w, h, colours = png_pixels(png)
    assert (w, h) == (800, 1400), (w, h)
    # white, black text, greys of grids and axes, and the series' colours
    assert len(colours) >= 12, f"the screenshot looks blank: {len(colours)} colours"
    for rgb in ((0x1f, 0x77, 0xb4), (0xd6, 0x27, 0x28), (0x2c, 0xa0, 0x2c)):
        assert bytes(rgb) in colours, f"series colour #{bytes(rgb).hex()} not drawn"
    return len(colours)


# ---- the rate sweep ----------------------------------------------------------------

def met_share(js):
    return js["slo_met"] / js["requests"]["completed"]


def run_for(url, rate, secs):
    """One open-loop run at rate for secs; its share of requests within the SLO."""
    path = os.path.join(tmpdir(), f"run-{rate:g}.json")
    p = rt_bench("--url", url, "--rate", f"{rate:g}", "--duration", secs, *WORK, *SLO, "--json", path)
    assert p.returncode == 0, p.stdout + p.stderr
    return met_share(read_json(path))


def check_point_keys(pts):
    for key in ("offered_rate", "concurrency", "throughput_rps", "goodput_rps", "output_tok_s", "achieved_rps",
                "ttft_p50_ms", "ttft_p99_ms", "tpot_p99_ms", "requests", "sending_s", "sustained"):
        assert all(pt[key] is not None for pt in pts), (key, pts)
    for pt in pts:
        # a load not sustained says why, and never meets the SLO
        assert pt["sustained"] == (pt["not_sustained"] is None), pt
        assert pt["sustained"] or not pt["meets_slo"], pt


def test_rate_sweep_max_rate_holds_for_30s():
    """The issue's sweep with kpi-bench's default point length: its maximum,
    confirmed by the sweep itself over 30 s (at least 99% of that run's
    requests within the SLO, the load sustained), and 1.5 times it not
    within the SLO for 95% even of its first 10 s."""
    benchtest.require_built()
    srv, url = rt_server(*SERVER)
    capacity = capacity_of(url)
    # a ladder of a few doublings up to the capacity (two below it: the
    # capacity's quarter would add a point the SLO always meets)
    start = 2 ** math.floor(math.log2(max(1, capacity / 2)))
    d = tmpdir()
    jpath, hpath = os.path.join(d, "sweep.json"), os.path.join(d, "sweep.html")
    # confirmed as long as the claim below: a 10 s confirmation missed the
    # queues a 30 s run at the same load met with a busy core beside it
    p = rt_bench("--url", url, "--sweep", "rate", "--sweep-start", start, *WORK, *SLO,
                 "--confirm-duration", HOLD_S, "--json", jpath, "--html", hpath, timeout=900)
    print(p.stdout)
    assert p.returncode == 0, p.stdout + p.stderr
    js = read_json(jpath)
    pts = js["points"]
    assert js["sweep"] == "rate" and not js["interrupted"]
    assert js["settings"]["duration_per_point_s"] == 10 and js["settings"]["min_requests_per_point"] == 100, js["settings"]
    assert js["settings"]["confirm_duration_s"] == HOLD_S, js["settings"]
    check_point_keys(pts)
    # each point sent for its 10 s and at least its 100 requests
    assert all(pt["requests"] >= 100 and pt["sending_s"] >= 9.5 for pt in pts), pts
    loads = [pt["offered_rate"] for pt in pts]
    assert loads == sorted(loads) and len(set(loads)) == len(loads), loads
    best = js["max_slo_rate"]
    assert best is not None and js["max_slo_confirmed"] and not js["slo_held_at_highest_load"], p.stdout
    assert js["at_max_slo"]["offered_rate"] == best and js["at_max_slo"]["meets_slo"]
    assert js["at_max_slo"]["sustained"], js["at_max_slo"]
    # everything below the answer met the SLO; the lowest load above it that
    # missed, as a point or in its confirmation, is within the bisection's 10%
    conf = js["confirmations"]
    assert all(pt["meets_slo"] for pt in pts if pt["offered_rate"] <= best), pts
    missed = [x["offered_rate"] for x in pts + conf if not x["meets_slo"] and x["offered_rate"] > best]
    assert missed and min(missed) / best - 1 <= 0.1 + 1e-9, (best, missed, loads)
    # confirmed at that load, as long as the claim (and so the longest point)
    assert conf and conf[-1]["offered_rate"] == best and conf[-1]["meets_slo"], conf
    assert conf[-1]["sending_s"] >= HOLD_S - 0.5 and not conf[-1]["stopped_missed"], (conf, pts)
    # a confirmation that missed ran its 30 s, or stopped once more of its
    # requests had missed than 1% of all its seeded schedule could send (a
    # Poisson count: within 6 sigma of rate x 30 s)
    for c in conf[:-1]:
        lam = c["offered_rate"] * HOLD_S
        assert c["sending_s"] >= HOLD_S - 0.5 or (
            c["stopped_missed"] and abs(c["most_sent"] - lam) <= 6 * math.sqrt(lam)
            and c["requests"] - c["slo_met"] == c["missed"] > 0.01 * c["most_sent"]), c
    assert all(c["offered_rate"] > best and not c["meets_slo"] for c in conf[:-1]), conf
    share = 100 * conf[-1]["slo_share"]
    assert re.search(rf"max load meeting the SLO: {best:g} req/s .*; confirmed: {share:.1f}% of "
                     rf"{conf[-1]['requests']} requests within the SLO over [0-9.]+ s, sustained", p.stdout), p.stdout
    assert conf[-1]["requests"] >= js["at_max_slo"]["requests"], (conf, js["at_max_slo"])
    assert js["knee"] is not None, "no knee found:\n" + p.stdout
    assert len(js["knee_repeats"]) == 2 and js["knee_noise"] is not None, js["knee_repeats"]

    # the confirmation is the 30 s run at the answer (a second one, run
    # by the test before this change, measured the same load the same way)
    # 1.5 times it misses within its first 10 s, so it cannot hold for 30
    # (over the capacity the queue only grows: 5.8% within the SLO over 30 s)
    over = run_for(url, 1.5 * best, 10)
    print(f"capacity {capacity:.1f} req/s (32 in flight); max SLO rate {best:g} req/s, confirmed "
          f"{share:.1f}% over {conf[-1]['sending_s']:.1f} s; at 1.5x ({1.5 * best:g} req/s) for 10 s: "
          f"{100 * over:.1f}%")
    assert over < 0.95, f"10 s at 1.5x the max ({1.5 * best:g} req/s): {100 * over:.1f}% within the SLO (want < 95%)"
    with open(hpath) as f:
        html = f.read()
    check_page(html, js)
    assert "Confirmation at" in html, html[:2000]
    print(f"screenshot: {check_screenshot(hpath)} colours")


# 130 s when the first confirmation holds; each miss adds up to a 30 s
# confirmation and a 10 s point, and kpi-bench allows 8 (460 s at most)
test_rate_sweep_max_rate_holds_for_30s.timeout = 600


def test_overloaded_sweep_points_are_not_sustained():
    """Points far over the capacity, short (300 requests, as the old default's
    100 were) and under a bound every request meets: each is marked not
    sustained in the table, JSON and page, and none meets the SLO."""
    benchtest.require_built()
    srv, url = rt_server(*SERVER)
    capacity = capacity_of(url)
    steps = [round(2 * capacity), round(2.5 * capacity)]
    d = tmpdir()
    jpath, hpath = os.path.join(d, "o.json"), os.path.join(d, "o.html")
    p = rt_bench("--url", url, "--sweep", "rate", "--sweep-steps", ",".join(map(str, steps)), "--requests", 300,
                 *WORK, "--slo", "ttft=60000", "--slo-share", "0.95", "--knee-repeats", 0,
                 "--json", jpath, "--html", hpath)
    print(p.stdout)
    assert p.returncode == 0, p.stdout + p.stderr
    js = read_json(jpath)
    pts = js["points"]
    check_point_keys(pts)
    assert [pt["offered_rate"] for pt in pts] == steps, pts
    for pt in pts:
        # the SLO alone would have counted it: its requests met the bound
        assert pt["slo_share"] >= 0.95, pt
        assert not pt["sustained"] and not pt["meets_slo"], pt
        assert pt["achieved_rps"] < 0.95 * pt["sent_rps"] or "TTFT p50 rose" in pt["not_sustained"], pt
    assert js["max_slo_rate"] is None and js["confirmations"] == [], js
    rows = [l for l in p.stdout.splitlines() if re.match(r"\s+\d+\s", l)]
    assert len(rows) == 2 and all(re.search(r"\bNO\s+MISSED\s+not sustained: ", l) for l in rows), rows
    assert "max load meeting the SLO: none" in p.stdout, p.stdout
    with open(hpath) as f:
        html = f.read()
    check_page(html, js)
    assert html.count('<tr class="miss" data-sustained="no">') == 2, html
    assert len(re.findall(r'class="pt" data-series="\w+" data-load="[0-9.]+" data-sustained="no"', html)) == 6 * 2


# ---- Ctrl-C --------------------------------------------------------------------------

def test_sweep_ctrl_c_keeps_the_points_so_far():
    benchtest.require_built()
    srv, url = benchtest.start_server()
    d = tmpdir()
    jpath, hpath = os.path.join(d, "i.json"), os.path.join(d, "i.html")
    b = kpitest.Proc([benchtest.BENCH, "--url", url, "--sweep", "concurrency", "--sweep-steps", "1,2,3,4",
                      "--duration", "1", "--prompt-len", "8", "--max-tokens", "4", "--ignore-eos",
                      "--slo", "e2e=60000", "--json", jpath, "--html", hpath])
    b.wait_line("sweep point 3: 3 concurrency", timeout=120)
    rc = b.stop(signal.SIGINT, timeout=60)
    out = "\n".join(b.lines)
    assert rc == 130, f"exit {rc}, want 130\n{out}"
    assert "interrupted: the 2 points below finished" in out, out
    js = read_json(jpath)
    assert js["interrupted"] is True and [p["concurrency"] for p in js["points"]] == [1, 2], js["points"]
    assert all(p["requests"] > 0 and p["duration_s"] >= 0.9 for p in js["points"]), js["points"]
    with open(hpath) as f:
        html = f.read()
    assert "Interrupted" in html
    check_page(html, js)


# ---- server-side phases from a kpi-agent trace -----------------------------------------

def test_concurrency_sweep_with_trace_phases():
    benchtest.require_built()
    kpitest.require_root("kpi-agent")
    import agenttest
    agenttest.require_built(agenttest.AGENT)
    srv, url = benchtest.start_server("--max-seqs", "2", "--threads", "1")
    d = tmpdir()
    db = os.path.join(d, "trace.db")
    agent = agenttest.start_agent(db, "--flush-ms", "50", pid=srv.pid)
    jpath, hpath = os.path.join(d, "c.json"), os.path.join(d, "c.html")
    p = kpi_bench("--url", url, "--sweep", "concurrency", "--sweep-max", 4, "--requests", 16,
                  "--warmup", 2, "--prompt-len", 24, "--max-tokens", 16, "--ignore-eos",
                  "--slo", "ttft=2000", "--knee-repeats", 0, "--trace-db", db,
                  "--json", jpath, "--html", hpath, timeout=300)
    assert agent.stop() == 0, agent.lines
    assert p.returncode == 0, p.stdout + p.stderr
    js = read_json(jpath)
    print(p.stdout)
    assert [pt["concurrency"] for pt in js["points"]] == [1, 2, 4], js["points"]
    assert js["max_slo_concurrency"] == 4 and js["slo_held_at_highest_load"], js
    for pt in js["points"]:
        ph = pt["server_phases_ms"]
        # every request of the point, and only those: not the warm-up, not the next point's
        assert ph and ph["requests"] == pt["ok"] == 16, (pt, ph)
        assert ph["decode"] > 0 and ph["prefill"] > 0, ph
        assert sum(ph[k] for k in ("net_in", "queue", "prefill", "decode", "net_out")) <= pt["e2e_p99_ms"] * 1.5
    # two requests run at once: at 4 in flight, two wait
    q = [pt["server_phases_ms"]["queue"] for pt in js["points"]]
    assert q[2] > q[0], q
    with open(hpath) as f:
        html = f.read()
    check_page(html, js, with_phases=True)
    check_screenshot(hpath)


# ---- replay and gamma arrivals -----------------------------------------------------------

def pct99(v):
    v = sorted(v)
    return v[int(0.99 * (len(v) - 1))]


def lateness(rows):
    """How far kpi-bench sent each request behind its own schedule, ms."""
    return [float(r["t_sent_ms"]) - float(r["t_due_ms"]) for r in rows]


def timed_bench(*args):
    """kpi-bench ahead of the other jobs of a shared machine (SCHED_FIFO when
    root): an arrival due while it waits for a CPU starts late, by several
    milliseconds on a busy 2-core machine."""
    rt = ["chrt", "-f", "10"] if os.geteuid() == 0 and shutil.which("chrt") else []
    return kpitest.run([*rt, benchtest.BENCH, "--quiet", *map(str, args)], timeout=180)


def replay_checked(url, rec, a, d, speed):
    """Replays rec at speed once and checks the plan: every request due at
    its recorded offset (scaled) to the CSV's microsecond, with its recorded
    lengths; none sent before it was due; and the offset error, measured on
    the wire side (t_sent), nothing but the run's own send lateness.  How
    late a run sends is the machine's scheduling, not the plan: that figure
    is printed here and benchmarked by tests/bench/bench_replay.py beside
    the same client's lateness on a Poisson schedule (its noise floor), never
    bounded by a test.  Returns (p99, max) of the offset error, ms in the
    recording's time."""
    rep = os.path.join(d, f"rep-x{speed}.csv")
    p = timed_bench("--url", url, "--replay", rec, "--replay-speed", speed, "--ignore-eos",
                    "--seed", 99, "--csv", rep)
    assert p.returncode == 0, p.stdout + p.stderr
    b = read_csv(rep)
    assert len(b) == len(a)
    for x, y in zip(a, b):
        assert (x["prompt_len"], x["max_tokens"]) == (y["prompt_len"], y["max_tokens"]), (x, y)
        assert y["completion_tokens"] == y["max_tokens"] and y["error"] == "", y
        # the plan: every request due at its recorded offset, scaled
        assert abs(float(y["t_due_ms"]) * speed - float(x["t_sent_ms"])) <= 0.002 * speed, (x, y)
    late = lateness(b)
    # never early (the CSV keeps microseconds)
    assert min(late) >= -0.001, min(late)
    errs = [abs(float(x["t_sent_ms"]) - float(y["t_sent_ms"]) * speed) for x, y in zip(a, b)]
    # what is off is the sending, not the plan
    assert pct99([abs(e - l * speed) for e, l in zip(errs, late)]) <= 0.01 * speed, (errs, late)
    p99, worst = pct99(errs), max(errs)
    print(f"replay at speed {speed}: offset error p99 {p99:.3f} ms, max {worst:.3f} ms over "
          f"{len(a)} requests (send lateness p99 {pct99(late):.3f} ms)")
    return p99, worst


def test_replay_reproduces_offsets_and_lengths():
    benchtest.require_built()
    # one engine thread: the other core stays free for kpi-bench's clock
    srv, url = benchtest.start_server("--max-queue", "512", "--threads", "1")
    d = tmpdir()
    rec = os.path.join(d, "rec.csv")
    p = timed_bench("--url", url, "--rate", 100, "--requests", 200, "--prompt-len", "uniform:4:40",
                  "--max-tokens", "uniform:1:12", "--ignore-eos", "--seed", 5, "--csv", rec)
    assert p.returncode == 0, p.stdout + p.stderr
    a = read_csv(rec)
    assert len(a) == 200
    # the recording's own send lateness: the machine's noise floor for the
    # replays' error, printed beside them
    floor = lateness(a)
    print(f"recording: sent late p99 {pct99(floor):.3f} ms, max {max(floor):.3f} ms")
    jpath = os.path.join(d, "rep.json")
    p = timed_bench("--url", url, "--replay", rec, "--ignore-eos", "--requests", 5, "--json", jpath)
    assert p.returncode == 0, p.stdout + p.stderr
    js = read_json(jpath)
    assert js["mode"] == "replay" and js["send_late_ms"]["n"] == 5, js

    for speed in (1, 2):
        replay_checked(url, rec, a, d, speed)

    # a trace's requests table exported by sqlite3: absolute ns, token counts;
    # rejected rows (no output_tokens) are skipped, and said so
    trace_csv = os.path.join(d, "trace.csv")
    base = 7_000_000_000_000
    with open(trace_csv, "w") as f:
        f.write("request_id,t_arrive_ns,prompt_tokens,output_tokens,http_status\n")
        f.write(f"r2,{base + 30_000_000},9,3,200\nr1,{base},5,2,200\nr3,{base + 10_000_000},7,,429\n")
    rep3 = os.path.join(d, "rep3.csv")
    p = timed_bench("--url", url, "--replay", trace_csv, "--ignore-eos", "--csv", rep3)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 rows without an offset or lengths skipped" in p.stderr, p.stderr
    rows = read_csv(rep3)
    assert [(r["prompt_len"], r["max_tokens"], r["completion_tokens"]) for r in rows] == \
        [("5", "2", "2"), ("9", "3", "3")], rows
    assert abs(float(rows[1]["t_sent_ms"]) - float(rows[0]["t_sent_ms"]) - 30) < 2, rows


def test_gamma_arrivals_run():
    benchtest.require_built()
    srv, url = benchtest.start_server("--max-queue", "512")
    d = tmpdir()
    cpath, jpath = os.path.join(d, "g.csv"), os.path.join(d, "g.json")
    p = kpi_bench("--url", url, "--rate", 100, "--burstiness", 0.25, "--requests", 30, "--max-tokens", 2,
                  "--ignore-eos", "--csv", cpath, "--json", jpath)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "gamma 100 req/s, burstiness 0.25" in p.stdout, p.stdout
    js = read_json(jpath)
    assert js["burstiness"] == 0.25 and js["requests"]["ok"] == 30, js
    # burstier than Poisson: gaps with a CV well above 1 (2 asked)
    t = sorted(float(r["t_sent_ms"]) for r in read_csv(cpath))
    gaps = [b - a for a, b in zip(t, t[1:])]
    mean = sum(gaps) / len(gaps)
    cv = (sum((g - mean) ** 2 for g in gaps) / (len(gaps) - 1)) ** 0.5 / mean
    assert cv > 1.2, cv
