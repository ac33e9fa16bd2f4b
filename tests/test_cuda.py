"""CUDA backend and libkpi_cupti.so: what can be checked without a GPU (the
kernels are built for sm_80, sm_90 and PTX; --backend cuda fails clearly with
no GPU), and on a GPU the kernels against a naive one, the CUDA forward pass
against the CPU reference, and GPU kernel records attributed to steps."""
import glob, json, os, sqlite3, struct, subprocess, time

import kpitest

BUILD = kpitest.BUILD
KERNELS_O = os.path.join(BUILD, "obj", "daemon", "cuda", "kernels.o")
KPI_INFER = os.path.join(BUILD, "kpi-infer")
ATTN_CHECK = os.path.join(BUILD, "cuda-attn-check")
CUPTI_LIB = os.path.join(BUILD, "libkpi_cupti.so")
FATBIN_MAGIC = 0xBA55ED50
KPI_GPU_REC_F_NO_STEP_SOURCE = 1 << 1  # abi/kpi_cupti_abi.h


def require_cuda_build():
    if not os.path.exists(KERNELS_O):
        raise kpitest.Skip("CUDA parts not built here (no nvcc under CUDA_HOME; see the Makefile)")


def gpu_reason():
    """None when a GPU is usable, else why not."""
    if not glob.glob("/dev/nvidia[0-9]*"):
        return "no GPU: no /dev/nvidia* device on this machine"
    if os.access(ATTN_CHECK, os.X_OK):
        p = kpitest.run([ATTN_CHECK, "--rounds", "1"], timeout=120)
        if p.returncode == 77:
            return p.stdout.strip().removeprefix("SKIP ")
    return None


def require_gpu():
    require_cuda_build()
    why = gpu_reason()
    if why:
        raise kpitest.Skip(why)


def fatbin_entries(obj):
    """(kind, sm) of every image in an object's .nv_fatbin: kind 1 PTX, 2 ELF (SASS)."""
    out = obj + ".fatbin"
    kpitest.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", obj, out], check=True)
    data = open(out, "rb").read()
    os.unlink(out)
    entries, off = [], 0
    while off + 16 <= len(data):
        magic, _ver, hsize, fsize = struct.unpack_from("<IHHQ", data, off)
        assert magic == FATBIN_MAGIC, f"bad fatbin magic {magic:#x} at {off} in {obj}"
        p, end = off + hsize, off + hsize + fsize
        while p < end:
            kind, _ev, ehs, psz = struct.unpack_from("<HHIQ", data, p)
            sm = struct.unpack_from("<I", data, p + 28)[0]
            entries.append((kind, sm))
            p += ehs + psz
        off = end
    return entries


# ---- here (no GPU needed) ---------------------------------------------------

def test_kernels_built_for_sm80_sm90_and_ptx():
    require_cuda_build()
    got = set(fatbin_entries(KERNELS_O))
    for want, what in (((2, 80), "sm_80 SASS"), ((2, 90), "sm_90 SASS"), ((1, 90), "compute_90 PTX")):
        assert want in got, f"{what} missing from {KERNELS_O}: {sorted(got)}"


def test_kpi_infer_links_cuda_backend_without_cuda_libs():
    require_cuda_build()
    if not os.access(KPI_INFER, os.X_OK):
        raise kpitest.Skip("kpi-infer not built")
    nm = kpitest.run(["nm", KPI_INFER], check=True).stdout
    assert " cuda_backend_ops" in nm, "kpi-infer was linked without the CUDA backend"
    ldd = kpitest.run(["ldd", KPI_INFER], check=True).stdout
    # cudart is static and cuBLAS dlopen'd: a CPU run maps no CUDA library
    for lib in ("libcublas", "libcudart.so", "libcuda.so"):
        assert lib not in ldd, f"kpi-infer depends on {lib} at load time:\n{ldd}"


def test_backend_cuda_without_gpu_fails_clearly():
    require_cuda_build()
    if not os.access(KPI_INFER, os.X_OK):
        raise kpitest.Skip("kpi-infer not built")
    if not gpu_reason():
        raise kpitest.Skip("a GPU is present: the no-GPU message cannot be seen here")
    p = kpitest.run([KPI_INFER, "--backend", "cuda", "--port", str(kpitest.free_port())], timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode != 0, f"kpi-infer --backend cuda started without a GPU:\n{out}"
    assert "no GPU" in out and "--backend cpu" in out, f"unclear message:\n{out}"


# ---- on a GPU -----------------------------------------------------------------

def test_paged_attention_matches_naive():
    require_gpu()
    p = kpitest.run([ATTN_CHECK, "--rounds", "96"], timeout=600)
    fails = [l for l in p.stdout.splitlines() if l.startswith("FAIL")]
    assert p.returncode == 0 and not fails, "\n".join(fails[:20]) or p.stdout[-2000:] + p.stderr
test_paged_attention_matches_naive.timeout = 600


def _serve(model, backend, env=None):
    port = kpitest.free_port()
    d = kpitest.Proc([KPI_INFER, "--model", model, "--backend", backend, "--port", str(port),
                      "--threads", "2"], env=env)
    d.wait_line("listening on http://", timeout=120)
    return d, port


def _greedy(port, prompt, n):
    st, _, body = kpitest.http_request(port, "POST", "/v1/completions", {
        "model": "x", "prompt": prompt, "max_tokens": n, "temperature": 0})
    assert st == 200, body
    return json.loads(body)["choices"][0]["text"]


def test_cuda_greedy_tokens_equal_cpu():
    """Greedy decoding for 64 steps gives the same tokens on both backends
    (tiny and small presets); the logits agree to fp16-GEMM precision."""
    require_gpu()
    tmp = os.path.join(BUILD, "tests", "cuda-models")
    os.makedirs(tmp, exist_ok=True)
    prompts = ["The quick brown fox", "kpiscope measures every request", "a"]
    for preset in ("tiny", "small"):
        model = os.path.join(tmp, f"{preset}.gguf")
        if not os.path.exists(model):
            kpitest.run([KPI_INFER, "--make-model", model, "--preset", preset, "--seed", "3"], check=True)
        outs = {}
        for backend in ("cpu", "cuda"):
            d, port = _serve(model, backend)
            outs[backend] = [_greedy(port, p, 64) for p in prompts]
            d.p.terminate()
            d.p.wait(30)
        assert outs["cpu"] == outs["cuda"], f"{preset}: greedy outputs differ:\n{outs}"
test_cuda_greedy_tokens_equal_cpu.timeout = 900


def test_cupti_kernels_attributed_to_steps():
    """kpi-infer --backend cuda with libkpi_cupti.so and kpi-agent: gpu_kernels
    rows exist, each inside its step's time range, and the per-request GPU time
    sums to the total kernel time within 1%."""
    require_gpu()
    kpitest.require_root("attaching to the kpi_cupti probes")
    agent = os.path.join(BUILD, "kpi-agent")
    # make all builds both wherever it built the CUDA kernels (require_gpu checked those)
    assert os.access(agent, os.X_OK), f"{agent} is missing: run make all"
    assert os.access(CUPTI_LIB, os.R_OK), f"{CUPTI_LIB} is missing: run make all"
    db = os.path.join(BUILD, "tests", "cupti-trace.db")
    if os.path.exists(db):
        os.unlink(db)
    port = kpitest.free_port()
    d = kpitest.Proc([KPI_INFER, "--backend", "cuda", "--port", str(port)],
                     env={"CUDA_INJECTION64_PATH": CUPTI_LIB, "KPI_CUPTI_VERBOSE": "1"})
    d.wait_line("listening on http://", timeout=120)
    a = kpitest.Proc([agent, "--db", db, "--pid", str(d.pid)])
    time.sleep(2)
    for i in range(16):
        _greedy(port, f"request {i}", 32)
    time.sleep(2)
    a.p.terminate()
    a.p.wait(30)
    con = sqlite3.connect(db)
    tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
    assert "gpu_kernels" in tables, f"the agent's store has no gpu_kernels table: {sorted(tables)}"
    n = con.execute("select count(*) from gpu_kernels").fetchone()[0]
    assert n > 0, "no gpu_kernels rows"
    outside = con.execute(
        "select count(*) from gpu_kernels k join steps s on s.pid = k.pid and s.step_id = k.step_id "
        "where k.start_ns < s.t_start_ns or k.end_ns > s.t_end_ns").fetchone()[0]
    assert outside == 0, f"{outside} of {n} kernels lie outside their step"
    total = con.execute("select sum(end_ns - start_ns) from gpu_kernels where step_id > 0").fetchone()[0]
    per_req = con.execute("select sum(prefill_gpu_ns + decode_gpu_ns) from requests").fetchone()[0]
    assert abs(per_req - total) <= 0.01 * total, f"attributed {per_req} ns vs kernels {total} ns"
test_cupti_kernels_attributed_to_steps.timeout = 600


def test_cupti_records_inside_their_steps_bpftrace():
    """kpi-infer --backend cuda with libkpi_cupti.so, watched by docs/probes.bt
    and docs/cupti.bt: kernel records arrive, carry step ids, and each lies
    inside its step's [step__begin, step__end] on CLOCK_MONOTONIC."""
    require_gpu()
    kpitest.require_root("attaching bpftrace to USDT probes")
    import shutil
    if not shutil.which("bpftrace"):
        raise kpitest.Skip("bpftrace is not installed (make deps installs it)")
    port = kpitest.free_port()
    d = kpitest.Proc([KPI_INFER, "--backend", "cuda", "--port", str(port)],
                     env={"CUDA_INJECTION64_PATH": CUPTI_LIB, "KPI_CUPTI_VERBOSE": "1"})
    d.wait_line("listening on http://", timeout=120)
    cwd = kpitest.ROOT
    bts = [subprocess.Popen(["bpftrace", "-B", "line", "-p", str(d.pid), f"docs/{s}.bt"], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
           for s in ("probes", "cupti")]
    kpitest.on_cleanup(lambda: [b.kill() for b in bts])
    time.sleep(3)
    for i in range(8):
        _greedy(port, f"request {i}", 24)
    time.sleep(1)
    outs = []
    for b in bts:
        b.send_signal(2)
        outs.append(b.communicate(timeout=30)[0])
    begin, end, recs = {}, {}, []
    for line in outs[0].splitlines():
        f = line.split()
        if len(f) >= 3 and f[1] in ("step__begin", "step__end"):
            (begin if f[1] == "step__begin" else end)[int(f[2].split("=")[1])] = int(f[0])
    for line in outs[1].splitlines():
        if line.strip().startswith("rec kind=1 "):
            kv = dict(x.split("=", 1) for x in line.split()[1:])
            recs.append((int(kv["step"]), int(kv["start"]), int(kv["end"]), int(kv["flags"])))
    assert "state 1 listener attached" in outs[1], outs[1][-3000:]
    assert recs, "no kernel records:\n" + outs[1][-3000:]
    # the engine defines and exports the step slot (abi/kpi_step.h): a record
    # flagged "no step source" means the library could not find it
    unsourced = [r for r in recs if r[3] & KPI_GPU_REC_F_NO_STEP_SOURCE]
    assert not unsourced, (f"{len(unsourced)} of {len(recs)} records say kpi-infer publishes no step "
                           f"(kpi_cupti_step_slot not exported?), e.g. {unsourced[:3]}")
    stepped = [r for r in recs if r[0] in begin and r[0] in end]
    assert stepped, f"no record matched a traced step ({len(recs)} records)"
    slack = 20000  # ns: calibration error is well under 1 µs; launches and syncs cost more
    bad = [r for r in stepped if r[1] < begin[r[0]] - slack or r[2] > end[r[0]] + slack]
    assert not bad, f"{len(bad)} of {len(stepped)} kernels outside their step, e.g. {bad[:3]}"
test_cupti_records_inside_their_steps_bpftrace.timeout = 300
