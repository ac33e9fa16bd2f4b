"""The six manual pages (docs/man) against the programs: every flag a
program's getopt table accepts is in its --help, and the flags its --help
lists are the flags its page describes, both ways; each page is well-formed
troff (man's own formatter, with warnings on); every program answers
--version with VERSION and the commit it was built from ("unknown" in a
tree without .git)."""
import os, re, shutil, subprocess

import kpitest

# --help, --version and man only: nothing timed, nothing traced.
CONCURRENT = True

MAN = os.path.join(kpitest.ROOT, "docs", "man")
# program, section, the source file whose getopt table it parses
TOOLS = [
    ("kpi-agent", 8, "agent/main.c"),
    ("kpi-infer", 1, "daemon/server/main.c"),
    ("kpitop", 1, "tools/kpitop/main.c"),
    ("kpi-report", 1, "tools/kpi-report/main.c"),
    ("kpi-bench", 1, "tools/kpi-bench/main.c"),
    ("kpi-ship", 1, "tools/kpi-ship/main.c"),
]
# an option's definition: a line of --help that starts (after at most 4
# blanks) with -x, or --name; prose that names a flag later in a line is not one
HELP_DEF = re.compile(r"^ {1,4}(?:-[a-zA-Z], )?--([a-z][a-z0-9-]*)", re.M)
# in troff: the line after .TP that starts with \fB\-\-name (or \fB\-x\fR, \fB\-\-name)
MAN_DEF = re.compile(r"^\.TP\n(?:\\fB\\-[a-zA-Z]\\fR, )?\\fB\\-\\-([a-z](?:[a-z0-9]|\\-)*)", re.M)
GETOPT = re.compile(r'\{\s*"([a-z][a-z0-9-]*)",\s*(?:no|required|optional)_argument')


def help_flags(tool):
    p = kpitest.run([os.path.join(kpitest.BIN, tool), "--help"], timeout=30)
    assert p.returncode == 0, f"{tool} --help exited {p.returncode}: {p.stderr}"
    return set(HELP_DEF.findall(p.stdout))


def man_flags(text):
    """The options a page defines, troff's escaped hyphens read back."""
    return {f.replace("\\-", "-") for f in MAN_DEF.findall(text)}


def page(tool, sec):
    path = os.path.join(MAN, f"{tool}.{sec}")
    assert os.path.exists(path), f"{tool} has no manual page {path}"
    return open(path).read()


def mismatches(tool, a, a_name, b, b_name):
    """Each flag one side has and the other lacks, said both ways."""
    return [f"{tool}: --{f} is in {x_name}, not in {y_name}"
            for x, x_name, y, y_name in ((a, a_name, b, b_name), (b, b_name, a, a_name))
            for f in sorted(x - y)]


def test_every_flag_in_help_is_in_the_page_and_back():
    problems = []
    for tool, sec, _ in TOOLS:
        h = help_flags(tool)
        m = man_flags(page(tool, sec))
        assert len(h) >= 2 and len(m) >= 2, f"{tool}: the parse found {h} in --help, {m} in the page"
        problems += mismatches(tool, h, "--help", m, f"docs/man/{tool}.{sec}")
    assert not problems, "\n".join(problems)


def test_every_flag_the_program_accepts_is_in_its_help():
    """The getopt table is the program's own word: a flag it accepts and
    --help hides would be missing from the page too."""
    problems = []
    for tool, _, src in TOOLS:
        accepted = set(GETOPT.findall(open(os.path.join(kpitest.ROOT, src)).read()))
        assert "help" in accepted and "version" in accepted, f"{src}: parsed {accepted}"
        problems += mismatches(tool, accepted, f"{src}'s getopt table", help_flags(tool), "--help")
    assert not problems, "\n".join(problems)


def test_the_check_sees_a_flag_missing_from_a_page():
    """The comparison itself: a page with one option taken out is caught."""
    text = page("kpitop", 1)
    cut = re.sub(r"^\.TP\n\\fB\\-\\-once\\fR\n.*?(?=^\.TP)", "", text, count=1, flags=re.M | re.S)
    assert cut != text
    assert "once" in help_flags("kpitop")
    assert "once" not in man_flags(cut)


def test_pages_format_without_warnings():
    if not shutil.which("man"):
        raise kpitest.Skip("man is missing (man-db, in TEST_PKGS: make deps)")
    for tool, sec, _ in TOOLS:
        path = os.path.join(MAN, f"{tool}.{sec}")
        p = subprocess.run(["man", "--warnings", "-l", path], capture_output=True, text=True,
                           timeout=60, env=dict(os.environ, MANWIDTH="80", MAN_KEEP_FORMATTING="0"))
        assert p.returncode == 0, f"man -l {path}: {p.stderr}"
        assert not p.stderr.strip(), f"man --warnings -l {path}:\n{p.stderr}"
        text = re.sub(r".\x08", "", p.stdout)   # the overstrike of bold and underline
        assert re.search(rf"^ +{re.escape(tool)} +- ", text, re.M) and "OPTIONS" in text, text[:400]


def expected_commit():
    """What the Makefile wrote: the clone's commit, -dirty with changes, or
    unknown without .git: read from git here, independently."""
    if not os.path.exists(os.path.join(kpitest.ROOT, ".git")) or not shutil.which("git"):
        return "unknown"
    p = kpitest.run(["git", "-C", kpitest.ROOT, "rev-parse", "--short=12", "HEAD"])
    return p.stdout.strip() if p.returncode == 0 else "unknown"


def test_version_names_the_version_and_commit():
    version = open(os.path.join(kpitest.ROOT, "VERSION")).read().strip()
    commit = expected_commit()
    for tool, _, _ in TOOLS:
        p = kpitest.run([os.path.join(kpitest.BIN, tool), "--version"], timeout=30)
        assert p.returncode == 0, f"{tool} --version exited {p.returncode}: {p.stderr}"
        first = p.stdout.split("\n")[0]
        m = re.fullmatch(rf"{re.escape(tool)} (\S+) \(commit (\S+)\)", first)
        assert m, f"{tool} --version: {p.stdout!r}"
        assert m.group(1) == version, f"{tool}: version {m.group(1)}, VERSION says {version}"
        # make (which make test runs first) rewrote the header for HEAD, and
        # marked it -dirty where the tree has changes
        assert m.group(2) in (commit, commit + "-dirty"), \
            f"{tool} says commit {m.group(2)}, the clone is at {commit} (run make)"


def test_a_tree_without_git_says_unknown():
    """A tarball's build (no .git) must still build, and say so: the
    Makefile's commit for a git archive of HEAD."""
    if expected_commit() == "unknown":
        raise kpitest.Skip("this tree is no git clone: the case is the tree itself")
    d = kpitest.tmpdir()
    kpitest.run(["sh", "-c", f"git -C {kpitest.ROOT} archive HEAD | tar -x -C {d}"], check=True)
    for tree, want in ((d, "unknown"), (kpitest.ROOT, expected_commit())):
        p = kpitest.run(["make", "-s", "--no-print-directory", "-C", tree, "--eval",
                         "kpi-print-commit: ; @echo commit=$(KPI_COMMIT)", "kpi-print-commit"], timeout=60)
        got = re.findall(r"^commit=(\S+)$", p.stdout, re.M)
        assert p.returncode == 0 and got and got[-1] in (want, want + "-dirty"), \
            f"make in {tree}: {p.stdout}{p.stderr} (want {want})"
