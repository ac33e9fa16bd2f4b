"""build/engine-bench, the tool behind the engine benchmark: the FLOPs and
bytes it charges a decode step follow the model's shapes, the FMA peak mode
reports a rate at the kernels' vector width, bad command lines are refused."""
import json, os, subprocess

import kpitest

BENCH = os.path.join(kpitest.BUILD, "engine-bench")
# tiny preset (docs/engine.md): dim 256, 4 layers, 4 heads, 2 KV heads,
# head_dim 64, FFN 768, 259 tokens (3 specials + 256 bytes)
DIM, LAYERS, HEADS, KV_HEADS, HD, FFN, VOCAB = 256, 4, 4, 2, 64, 768, 259


def bench(*args):
    if not os.access(BENCH, os.X_OK):
        raise kpitest.Skip("build/engine-bench is not built (run make)")
    p = subprocess.run([BENCH, *map(str, args)], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def test_decode_step_flops_follow_the_shapes():
    d = kpitest.tmpdir("engine-bench-test-")
    model = os.path.join(d, "tiny.gguf")
    rc, out, err = bench("make", "--out", model, "--preset", "tiny")
    assert rc == 0, err
    seqs, prompt, gen = 3, 8, 4
    rc, out, err = bench("decode", "--model", model, "--seqs", seqs, "--prompt", prompt, "--gen", gen,
                         "--threads", 1)
    assert rc == 0, err
    j = json.loads(out.strip().splitlines()[-1])
    per_layer = DIM * HEADS * HD * 2 + DIM * KV_HEADS * HD * 2 + DIM * FFN * 3
    params = LAYERS * per_layer + VOCAB * DIM
    avg_ctx = prompt + 1 + gen / 2
    want = seqs * (2 * params + 4 * LAYERS * HEADS * HD * avg_ctx)
    assert j["flops_per_step"] == want, (j["flops_per_step"], want)
    # seconds is printed to 0.1 ms: allow for its rounding
    rate = j["flops_per_step"] * j["steps"] / j["seconds"] / 1e9
    assert abs(j["gflops"] - rate) <= rate * 0.0001 / j["seconds"] + 0.01, (j["gflops"], rate)
    # every weight is read once a step: F16 matmuls, F32 norms, the embedding row
    assert j["weight_bytes"] >= 2 * params, (j["weight_bytes"], params)


def test_fma_peak_at_the_kernels_width():
    rc, out, err = bench("fma", "--threads", 1, "--reps", 2)
    assert rc == 0, err
    j = json.loads(out)
    assert j["mode"] == "fma" and j["threads"] == 1 and j["width"] in (1, 8, 16), j
    assert 0 < j["gflops_mean"] <= j["gflops_best"], j


def test_bad_command_lines():
    rc, out, err = bench("decode")
    assert rc == 2 and "--model" in err, (rc, err)
    rc, out, err = bench("burst", "--model", "x", "--batching", "sometimes")
    assert rc == 2 and "'sometimes'" in err, (rc, err)
    rc, out, err = bench("nonsense")
    assert rc == 2 and "unknown mode 'nonsense'" in err, (rc, err)
