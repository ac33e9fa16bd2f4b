#!/usr/bin/env python3
"""check_security_doc.py - keeps docs/security.md true to the code: every row
that names a place as `path:line` with the code there in backticks must find
that code on that line; every BPF program and every read of user or kernel
memory in bpf/ must have such a row; every text column of the trace store must
be named in it.  Usage: check_security_doc.py [--fix] [ROOT]; --fix moves the
line numbers of rows whose code moved (the code itself is the anchor), and
says what it cannot fix.  Exit 1 with one line per problem."""
import glob, os, re, sqlite3, sys

DOC = os.path.join("docs", "security.md")
# a row: | `file:line` | `code` | ...
ROW = re.compile(r"^\|\s*`(?P<file>[\w./-]+):(?P<line>\d+)`\s*\|\s*`(?P<code>[^`]+)`")
# the places in bpf/ a row must exist for: a program, and any read of memory
# (user or kernel) or of a task's saved registers
PROGRAM = re.compile(r'\bSEC\("(?!\.maps|license|\.rodata|\.bss|\.data)')
READ = re.compile(r"\b(bpf_probe_read\w*|BPF_CORE_READ\w*|bpf_core_read\w*|bpf_copy_from_user\w*|"
                  r"bpf_get_current_comm|bpf_task_pt_regs|PT_REGS_\w+)\s*\(")


def code_lines(path):
    """The file's lines; comment lines as "" (a name in a comment is no read)."""
    out, in_block = [], False
    with open(path) as f:
        for line in f.read().split("\n"):
            s = line.strip()
            if in_block:
                out.append("")
                in_block = "*/" not in s
                continue
            if s.startswith("/*"):
                out.append("")
                in_block = "*/" not in s
                continue
            out.append("" if s.startswith("//") or s.startswith("*") else line)
    return out


def places(root):
    """[(file, line)] of every program (the line that names it, after its
    SEC()) and every memory read in bpf/."""
    out = []
    for path in sorted(glob.glob(os.path.join(root, "bpf", "*.bpf.c")) + glob.glob(os.path.join(root, "bpf", "*.bpf.h"))):
        rel = os.path.relpath(path, root)
        lines = code_lines(path)
        for n, line in enumerate(lines, 1):
            if PROGRAM.search(line):
                out.append((rel, n + 1))
            elif READ.search(line):
                out.append((rel, n))
    return out


def text_columns(root):
    """{table.column} of every TEXT (or untyped) column of the trace store."""
    c = sqlite3.connect(":memory:")
    for f in sorted(glob.glob(os.path.join(root, "schema", "[0-9]*.sql"))):
        c.executescript(open(f).read())
    out = set()
    for (t,) in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
        for r in c.execute(f"PRAGMA table_info({t})"):
            if r[2].upper() in ("TEXT", ""):
                out.add(f"{t}.{r[1]}")
    return out


def check(root, fix=False):
    doc_path = os.path.join(root, DOC)
    with open(doc_path) as f:
        doc = f.read().split("\n")
    problems, files, taken = [], {}, {}
    refs = []
    for i, line in enumerate(doc):
        m = ROW.match(line)
        if m:
            refs.append((i, m.group("file"), int(m.group("line")), m.group("code")))
    for i, fname, n, code in refs:
        path = os.path.join(root, fname)
        if fname not in files:
            files[fname] = code_lines(path) if os.path.exists(path) else None
        lines = files[fname]
        if lines is None:
            problems.append(f"{DOC}:{i + 1}: {fname} does not exist")
            continue
        if 0 < n <= len(lines) and code in lines[n - 1]:
            taken.setdefault(fname, set()).add(n)
            continue
        # moved: the first occurrence of the code not already named by a row
        found = [k + 1 for k, l in enumerate(lines) if code in l]
        free = [k for k in found if k not in taken.get(fname, set())
                and not any(r[1] == fname and r[2] == k and r[3] == code for r in refs)]
        if fix and free:
            doc[i] = doc[i].replace(f"`{fname}:{n}`", f"`{fname}:{free[0]}`", 1)
            taken.setdefault(fname, set()).add(free[0])
            continue
        where = f"now at line {', '.join(map(str, free))}: run tests/check_security_doc.py --fix" if free \
            else "found nowhere in the file: the row is out of date"
        problems.append(f"{DOC}:{i + 1}: `{fname}:{n}` names `{code}`, {where}")
    named = {(r[1], r[2]) for r in refs} | {(f, n) for f, ns in taken.items() for n in ns}
    for fname, n in places(root):
        if (fname, n) not in named:
            problems.append(f"{fname}:{n}: a BPF program or memory read that {DOC} does not list: "
                            f"add a row `{fname}:{n}` | `code` | what it reads")
    text = "\n".join(doc)
    for col in sorted(text_columns(root)):
        if f"`{col}`" not in text:
            problems.append(f"{DOC}: the stored text column {col} is not named (as `{col}`)")
    if fix:
        with open(doc_path, "w") as f:
            f.write(text)
    return problems


def main():
    args = [a for a in sys.argv[1:] if a != "--fix"]
    root = args[0] if args else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    problems = check(root, fix="--fix" in sys.argv)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
