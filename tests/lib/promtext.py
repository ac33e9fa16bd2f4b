"""The tests' one parser of the Prometheus text format (kpi-infer's and
kpi-agent's /metrics), strict: every sample line must parse (labels quoted
and escaped as the format says, a float value) and every sample's family must
have its # TYPE line before it.  Two views of what it parses: by_key, keyed
by the sample as written ('name{labels}'), and by_labels, keyed by name and
label set."""
import collections, json

Sample = collections.namedtuple("Sample", "name labels body value")
Sample.__doc__ = """name; labels {name: value}, unescaped; body the text between
the braces as written ("" none); value a float."""


def _split_labels(body):
    """'a="x",b="y, z"' -> ['a="x"', 'b="y, z"']: commas inside quotes stay."""
    parts, cur, q, esc = [], "", False, False
    for ch in body:
        if esc:
            cur += ch
            esc = False
        elif ch == "\\":
            cur += ch
            esc = True
        elif ch == '"':
            cur += ch
            q = not q
        elif ch == "," and not q:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    return parts


def parse(text):
    """Every sample of text, in order, as Samples."""
    out, typed = [], set()
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("# TYPE "):
            typed.add(line.split()[2])
            continue
        if line.startswith("#"):
            continue
        if "{" in line:
            name, rest = line.split("{", 1)
            body, value = rest.rsplit("} ", 1)
            labels = {}
            for part in _split_labels(body):
                k, v = part.split("=", 1)
                labels[k] = json.loads(v)
        else:
            name, value = line.split(" ", 1)
            body, labels = "", {}
        fam = name
        for suf in ("_bucket", "_sum", "_count"):
            if name.endswith(suf) and name[: -len(suf)] in typed:
                fam = name[: -len(suf)]
        assert fam in typed, f"{name}: no # TYPE line before it"
        out.append(Sample(name, labels, body, float(value)))
    return out


def by_key(text):
    """{'name{labels}': value} as written, plus {'name': value} for the first
    sample of each name."""
    out = {}
    for s in parse(text):
        out[f"{s.name}{{{s.body}}}" if s.body else s.name] = s.value
        out.setdefault(s.name, s.value)
    return out


def by_labels(text):
    """{(name, frozenset(labels.items())): value}."""
    return {(s.name, frozenset(s.labels.items())): s.value for s in parse(text)}
