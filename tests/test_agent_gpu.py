"""kpi-agent's GPU side without a GPU: the kpi:step__seqs probe of a real CPU
kpi-infer run carries each step's sequences and token counts; the agent finds
libkpi_cupti.so in a target's maps and attaches to it and to step__seqs; a
version-1 trace is migrated to the latest version in place. The GPU end-to-end checks
(records stored, split per request) are in tests/test_cuda.py."""
import os, re, shutil, sqlite3, threading, time

import kpitest
import servertest as st
import tracetest

AGENT = os.path.join(kpitest.BIN, "kpi-agent")
CUPTI_LIB = os.path.join(kpitest.BUILD, "libkpi_cupti.so")


def _complete(port, prompt, n, out):
    s, _, body = kpitest.http_request(port, "POST", "/v1/completions", {
        "prompt": prompt, "max_tokens": n, "ignore_eos": True, "temperature": 0})
    out.append((s, body))


def _load(port, prompts, n):
    out = []
    ts = [threading.Thread(target=_complete, args=(port, p, n, out)) for p in prompts]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert len(out) == len(prompts) and all(s == 200 for s, _ in out), out


def test_step_seqs_probe_content_bpftrace():
    """docs/probes.bt on a CPU run with concurrent requests: every step has
    one step__seqs right after its step__begin; its prefill entries add up to
    the step's prefill_tokens and its decode entries to decode_seqs; per
    request, the prefill chunks add up to the prompt and there is one decode
    entry per output token after the first."""
    kpitest.require_root("attaching bpftrace to USDT probes")
    if not shutil.which("bpftrace"):
        raise kpitest.Skip("bpftrace is not installed (make deps installs it)")
    # a small token budget splits prompts into several prefill chunks
    d = st.Daemon("--max-seqs", 8, "--max-batched-tokens", 16)
    bt = kpitest.Proc(["bpftrace", "-B", "line", "-p", str(d.p.pid), "docs/probes.bt"],
                      cwd=kpitest.ROOT)
    bt.wait_line("Attaching", 60)
    time.sleep(1.5)
    prompts = ["the quick brown fox jumps over the lazy dog " * k for k in (1, 2, 3, 1, 4, 2)]
    n_out = 5
    _load(d.port, prompts, n_out)
    # bpftrace prints as probes fire; its exit can be slow, so read, not wait
    deadline = time.monotonic() + 30
    while sum(" response__end " in l for l in bt.drain()) < len(prompts):
        assert time.monotonic() < deadline, "\n".join(bt.lines[-30:])
        time.sleep(0.2)
    text = "\n".join(bt.drain())
    admitted, begins, seqs, order = {}, {}, {}, []
    for line in text.splitlines():
        f = line.split()
        if len(f) < 3:
            continue
        kv = dict(x.split("=", 1) for x in f[2:] if "=" in x)
        if f[1] == "request__admitted":
            admitted[int(kv["id"])] = int(kv["prompt_tokens"])
        elif f[1] == "step__begin":
            begins[int(kv["step"])] = (int(kv["prefill_tokens"]), int(kv["decode_seqs"]))
            order.append(("b", int(kv["step"])))
        elif f[1] == "step__seqs":
            step, n = int(kv["step"]), int(kv["n"])
            ents = [tuple(int(v) for v in e.split(":")) for e in f[4:]]
            assert len(ents) == min(n, 16), line
            seqs[step] = ents
            order.append(("s", step))
    assert begins, "no step__begin seen:\n" + text[-2000:]
    assert set(seqs) == set(begins), f"steps without a list: {sorted(set(begins) ^ set(seqs))}"
    for i, (kind, step) in enumerate(order):
        if kind == "b":
            assert order[i + 1] == ("s", step), f"step {step}: step__seqs does not follow step__begin"
    prompt_done, decodes = {}, {}
    for step, ents in seqs.items():
        prefill, dec = begins[step]
        assert len(ents) <= 8, (step, ents)
        assert sum(t for _, t, p in ents if p) == prefill, (step, ents, prefill)
        assert sum(1 for _, _, p in ents if not p) == dec, (step, ents, dec)
        for rid, t, p in ents:
            assert t >= 1, (step, ents)
            if p:
                prompt_done[rid] = prompt_done.get(rid, 0) + t
            else:
                assert t == 1, (step, ents)
                decodes[rid] = decodes.get(rid, 0) + 1
    assert len(admitted) == len(prompts), admitted
    assert any(len(ents) > 1 for ents in seqs.values()), "no step batched two sequences"
    for rid, prompt_tokens in admitted.items():
        assert prompt_done.get(rid) == prompt_tokens, (rid, prompt_done.get(rid), prompt_tokens)
        assert decodes.get(rid) == n_out - 1, (rid, decodes.get(rid))
test_step_seqs_probe_content_bpftrace.timeout = 180


def test_agent_attaches_to_libkpi_cupti_cpu_run():
    """A CPU kpi-infer with libkpi_cupti.so mapped (LD_PRELOAD: the driver never
    calls it, so no record is made): the agent finds the library in the
    target's maps, attaches to its probes and to kpi:step__seqs, receives one
    sequence list per step, and stores no GPU time where there was none."""
    kpitest.require_root("attaching to USDT probes")
    for p in (AGENT, CUPTI_LIB):
        if not os.access(p, os.R_OK):
            raise kpitest.Skip(f"{os.path.relpath(p, kpitest.ROOT)} is not built (run make; the "
                               "library needs CUDA's nvcc and CUPTI)")
    port = kpitest.free_port()
    d = kpitest.Proc([st.KPI_INFER, "--model", st.tiny_model(), "--port", str(port)],
                     env={"LD_PRELOAD": CUPTI_LIB})
    d.wait_line("listening on http://", 60)
    db = os.path.join(st.tmpdir(), f"gpu-attach-{port}.db")
    a = kpitest.Proc([AGENT, "--db", db, "--pid", str(d.pid)])
    a.wait_line(f"collecting GPU activity of pid {d.pid} ({os.path.realpath(CUPTI_LIB)})", 60)
    time.sleep(0.5)
    _load(port, ["a b c d e f g h", "one two three", "x " * 30], 4)
    time.sleep(1)
    a.p.send_signal(2)
    summary = a.wait_line("GPU: ", 30)
    assert a.p.wait(30) == 0
    m = re.search(r"GPU: (\d+) records stored, (\d+) step lists \((\d+) sequences\)", summary)
    assert m, summary
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA user_version").fetchone()[0] >= 2
    steps, reqs = con.execute("SELECT count(*) FROM steps").fetchone()[0], \
        con.execute("SELECT count(*) FROM requests WHERE http_status = 200").fetchone()[0]
    assert reqs == 3, reqs
    assert steps > 0 and int(m.group(2)) == steps, (summary, steps)
    assert int(m.group(3)) >= steps, summary
    assert int(m.group(1)) == 0 and con.execute("SELECT count(*) FROM gpu_kernels").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM requests WHERE prefill_gpu_ns IS NOT NULL OR "
                       "decode_gpu_ns IS NOT NULL").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM steps WHERE gpu_busy_ns IS NOT NULL").fetchone()[0] == 0
test_agent_attaches_to_libkpi_cupti_cpu_run.timeout = 180


def test_agent_migrates_v1_trace():
    """kpi-agent --db on a trace written by a version-1 agent migrates it to
    the latest version in place: rows kept, GPU table and columns (version 2)
    and the run-queue attribution (version 3) added; a row older than
    --retain's default is removed and counted."""
    kpitest.require_root("running kpi-agent")
    if not os.access(AGENT, os.X_OK):
        raise kpitest.Skip("kpi-agent is not built (run make)")
    db = os.path.join(st.tmpdir(), "v1.db")
    if os.path.exists(db):
        os.unlink(db)
    con = sqlite3.connect(db)
    con.executescript(open(os.path.join(kpitest.ROOT, "schema", "001_init.sql")).read())
    # a row of an hour ago: inside --retain's default 14 days, so it stays
    con.execute("INSERT INTO requests(request_id, pid, seq_id, run_id, wall_ns, t_arrive_ns, e2e_ns) "
                "VALUES ('old-1', 42, 1, 1, ?, 5, 1234)", (time.time_ns() - 3600 * 10**9,))
    # and one of 1970: past --retain, removed and counted
    con.execute("INSERT INTO requests(request_id, pid, seq_id, run_id, wall_ns, t_arrive_ns, e2e_ns) "
                "VALUES ('ancient-2', 42, 2, 1, 5, 5, 99)")
    con.commit()
    assert con.execute("PRAGMA user_version").fetchone()[0] == 1
    con.close()
    # --exe of a program nobody runs: the agent waits for it, then stops
    p = kpitest.run([AGENT, "--db", db, "--exe", "/bin/true", "--duration", "1"], timeout=60)
    assert p.returncode == 0, p.stderr
    con = sqlite3.connect(db)
    latest = tracetest.schema_version()
    assert latest >= 3 and con.execute("PRAGMA user_version").fetchone()[0] == latest
    assert con.execute("SELECT e2e_ns, prefill_gpu_ns, decode_gpu_ns FROM requests "
                       "WHERE request_id = 'old-1'").fetchone() == (1234, None, None)
    assert con.execute("SELECT count(*) FROM requests WHERE request_id = 'ancient-2'").fetchone()[0] == 0
    assert con.execute("SELECT value FROM meta WHERE key = 'loss_retention_rows_total'").fetchone()[0] == 1
    cols = {r[1] for r in con.execute("PRAGMA table_info(gpu_kernels)")}
    for c in ("pid", "step_id", "name", "start_ns", "end_ns", "device", "stream", "grid_x", "block_x"):
        assert c in cols, (c, cols)
    assert "gpu_busy_ns" in {r[1] for r in con.execute("PRAGMA table_info(steps)")}
    assert "runq_self_ns" in {r[1] for r in con.execute("PRAGMA table_info(samples)")}
    assert {"other_pid", "other_comm", "runq_ns"} <= {r[1] for r in con.execute("PRAGMA table_info(runq_by)")}


def _slot_address(pid, exe):
    """Run-time address of kpi_cupti_step_slot in pid (PIE: base + symbol)."""
    dyn = kpitest.run(["nm", "-D", "--defined-only", exe], check=True).stdout
    m = re.search(r"^([0-9a-f]+) [DB] kpi_cupti_step_slot$", dyn, re.M)
    assert m, "kpi_cupti_step_slot is not in kpi-infer's dynamic symbols (link with " \
              "-Wl,--export-dynamic-symbol=kpi_cupti_step_slot)"
    real = os.path.realpath(exe)
    for line in open(f"/proc/{pid}/maps"):
        f = line.split()
        if len(f) >= 6 and os.path.realpath(f[5]) == real and int(f[2], 16) == 0:
            return int(f[0].split("-")[0], 16) + int(m.group(1), 16)
    raise AssertionError(f"{exe} is not mapped in pid {pid}")


def test_kpi_infer_publishes_its_step():
    """kpi-infer exports kpi_cupti_step_slot (abi/kpi_step.h) with its magic
    and version, for libkpi_cupti.so's dlsym; while the forward pass runs
    (a uprobe on matmul_rows_fetch, which every matmul of the CPU backend
    goes through) the slot holds the step of the enclosing
    step__begin, and 0 between steps."""
    import struct
    kpitest.require_root("reading kpi-infer's memory and attaching bpftrace")
    if not shutil.which("bpftrace"):
        raise kpitest.Skip("bpftrace is not installed (make deps installs it)")
    d = st.Daemon()
    addr = _slot_address(d.p.pid, st.KPI_INFER)
    with open(f"/proc/{d.p.pid}/mem", "rb") as mem:
        mem.seek(addr)
        magic, version, step = struct.unpack("<IIQ", mem.read(16))
    assert (magic, version, step) == (0x6b706973, 1, 0), (hex(magic), version, step)
    script = ('usdt:./build/kpi-infer:kpi:step__begin { printf("begin %lu\\n", arg0); }\n'
              'uprobe:./build/kpi-infer:matmul_rows_fetch { $s = *(uint64 *)ADDR; '
              'if (@seen[$s] == 0) { @seen[$s] = 1; printf("slot %lu\\n", $s); } }\n'
              ).replace("ADDR", str(addr + 8))
    bt = kpitest.Proc(["bpftrace", "-B", "line", "-p", str(d.p.pid), "-e", script], cwd=kpitest.ROOT)
    bt.wait_line("Attaching", 60)
    time.sleep(1.5)
    _load(d.port, ["hello world", "the quick brown fox"], 4)
    deadline = time.monotonic() + 20
    while True:
        lines = bt.drain()
        begun = {int(l.split()[1]) for l in lines if l.startswith("begin ")}
        slots = {int(l.split()[1]) for l in lines if l.startswith("slot ")}
        if begun and begun <= slots or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert begun, "no step__begin seen:\n" + "\n".join(lines[-20:])
    assert slots == begun, f"slot values in the forward pass {sorted(slots)} vs steps {sorted(begun)}"
