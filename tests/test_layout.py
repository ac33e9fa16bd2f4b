"""make check-layout: the tree as committed keeps the arrows between folders,
and a copy of it with one crossing include is refused, file and line named."""
import os, shutil, subprocess, sys

import kpitest

CHECK = os.path.join(kpitest.ROOT, "tests", "check_layout.py")
FOLDERS = ("abi", "agent", "bpf", "cupti", "daemon", "schema", "tools")


def run_check(root):
    return subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True, timeout=60)


def copy_tree():
    d = kpitest.tmpdir()
    for f in FOLDERS:
        shutil.copytree(os.path.join(kpitest.ROOT, f), os.path.join(d, f))
    return d


def add_include(root, rel, include):
    """Puts `#include "include"` after the first line of rel; returns its line number."""
    path = os.path.join(root, rel)
    lines = open(path).read().split("\n")
    lines.insert(1, f'#include "{include}"')
    open(path, "w").write("\n".join(lines))
    return 2


def test_tree_keeps_the_arrows():
    p = run_check(kpitest.ROOT)
    assert p.returncode == 0, p.stdout + p.stderr


def test_crossing_includes_are_named_with_file_and_line():
    cases = [
        ("daemon/server/http.h", "bpf/kpi_event.h"),       # daemon -> bpf
        ("bpf/kpi_gpu_event.h", "cupti/convert.h"),        # bpf -> cupti
        ("agent/track/assemble.c", "daemon/engine.h"),           # agent -> daemon
        ("abi/kpi_reasons.h", "bpf/kpi_event.h"),          # abi -> anything
        ("tools/kpitop/main.c", "agent/record.h"),         # tools -> agent
        ("tools/kpi-report/main.c", "tools/kpitop/kpitop.h"),  # one tool -> another
        ("cupti/injection.c", "kpi.skel.h"),               # generated header of bpf/
    ]
    for rel, inc in cases:
        root = copy_tree()
        line = add_include(root, rel, inc)
        p = run_check(root)
        assert p.returncode == 1, f"{rel} -> {inc} was accepted:\n{p.stdout}{p.stderr}"
        assert p.stdout.startswith(f"{rel}:{line}: includes \"{inc}\""), p.stdout
        assert len(p.stdout.splitlines()) == 1, p.stdout


def test_allowed_includes_pass_in_a_copy():
    root = copy_tree()
    for rel, inc in [("agent/track/assemble.c", "abi/kpi_step_seq.h"), ("agent/main.c", "schema/trace_path.h"),
                     ("tools/kpitop/main.c", "tools/common/trace.h"), ("agent/track/assemble.c", "schema/pct.h"), ("daemon/engine/kv.c", "abi/kpi_step.h")]:
        add_include(root, rel, inc)
    p = run_check(root)
    assert p.returncode == 0, p.stdout + p.stderr
