"""build/engine-bench, the tool behind the engine benchmark: the FLOPs and
bytes it charges a decode step follow the model's shapes, the FMA peak mode
reports a rate at the kernels' vector width, bad command lines are refused."""
import json, math, os, subprocess

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


def tiny_model():
    model = os.path.join(kpitest.tmpdir("engine-bench-test-"), "tiny.gguf")
    rc, out, err = bench("make", "--out", model, "--preset", "tiny")
    assert rc == 0, err
    return model


def test_decode_step_flops_follow_the_shapes():
    model = tiny_model()
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


def test_burst_counts_the_rows_each_scheduler_computes():
    model = tiny_model()
    requests, prompt, seqs = 12, 8, 4
    runs = {}
    for mode in ("continuous", "static"):
        rc, out, err = bench("burst", "--model", model, "--batching", mode, "--seqs", seqs,
                             "--requests", requests, "--prompt", prompt, "--mean", 6, "--max", 24,
                             "--threads", 1)
        assert rc == 0, err
        j = runs[mode] = json.loads(out.strip().splitlines()[-1])
        assert j["finished"] == requests and j["tokens"] == j["want_tokens"], j
        assert j["preemptions"] == 0 and j["prompt_tokens"] == requests * prompt, j
    # continuous computes each prompt token once and one decode row for every
    # token after a request's first (which the prompt's last row samples)
    c, s = runs["continuous"], runs["static"]
    assert c["rows"] == c["prompt_tokens"] + c["tokens"] - requests, c
    # static: each batch of `seqs` from the queue's head prefills, then runs one row
    # per member (padding for the finished ones) until its longest member ends
    lens = burst_lengths(requests, 6, 24)
    assert sum(lens) == s["tokens"] == c["tokens"], (lens, s, c)
    want = sum(len(b) * prompt + len(b) * (max(b) - 1)
               for b in (lens[i:i + seqs] for i in range(0, requests, seqs)))
    assert s["rows"] == want > c["rows"], (s["rows"], want, c["rows"])


def burst_lengths(n, mean, cap):
    """engine-bench burst's output lengths: capped exponential from its LCG."""
    rng, out = 12345, []
    for _ in range(n):
        rng = (rng * 6364136223846793005 + 1442695040888963407) % 2**64
        u = ((rng >> 11) + 0.5) * 2.0**-53
        out.append(min(max(math.ceil(-math.log(u) * mean), 1), cap))
    return out


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
