"""docs/security.md stays true to the code (issue 29): every `file:line` it
names still holds the code it quotes, every BPF program and read of memory in
bpf/ has its row, every text column of the trace store is named
(tests/check_security_doc.py); and the checker refuses a row that went stale,
a read without a row and a column left out, on a copy of the tree."""
import os, shutil, subprocess, sys

import kpitest

# tests/run.py runs these beside other tests, but those marked alone: none
# of them times anything or counts what the whole host did.
CONCURRENT = True

CHECK = os.path.join(kpitest.ROOT, "tests", "check_security_doc.py")


def _check(root, *args):
    return subprocess.run([sys.executable, CHECK, *args, root], capture_output=True, text=True)


def test_security_doc_names_every_read_and_field():
    r = _check(kpitest.ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_security_doc_check_refuses_what_went_stale():
    d = kpitest.tmpdir("kpi-secdoc-")
    for sub in ("bpf", "schema", "agent", "docs"):
        shutil.copytree(os.path.join(kpitest.ROOT, sub), os.path.join(d, sub))
    src = os.path.join(d, "bpf", "kpi.bpf.c")
    text = open(src).read()
    # a line above everything: every row of kpi.bpf.c is one line off, which --fix mends
    with open(src, "w") as f:
        f.write("/* moved */\n#define KPI_MOVED 1\n" + text)
    r = _check(d)
    assert r.returncode == 1 and "run tests/check_security_doc.py --fix" in r.stdout, r.stdout
    r = _check(d, "--fix")
    assert _check(d).returncode == 0, _check(d).stdout
    # a new read of user memory with no row
    with open(src, "a") as f:
        f.write("\nstatic void leak(void *p) { char b[8]; bpf_probe_read_user(b, 8, p); }\n")
    r = _check(d)
    assert r.returncode == 1 and "does not list" in r.stdout and "kpi.bpf.c" in r.stdout, r.stdout
    with open(src, "w") as f:
        f.write(text)
    # a text column the page does not name
    with open(os.path.join(d, "schema", "999_secret.sql"), "w") as f:
        f.write("ALTER TABLE requests ADD COLUMN user_agent TEXT;\n")
    r = _check(d)
    assert r.returncode == 1 and "requests.user_agent" in r.stdout, r.stdout
