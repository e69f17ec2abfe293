"""Reader words (issue 49): a display name for every internal key a reader meets in the brief — accelerators of
the KV-cache catalogue, workloads of a profile ("quick-1"), runs.csv columns, study keys. The brief's HTML goes
through reader_text() once (brief/render.py) outside code spans, preformatted text (Appendix B's parameters) and
markup; tests/test_reader_words.py fails on any snake_case identifier or catalogue key left in a rendered brief.
"""
from __future__ import annotations

import re

# Catalogue keys and study keys a reader would otherwise meet as written in params.yaml.
NAMES = {"this-cpu": "this machine's CPU", "h200": "H200", "h100-sxm": "H100 SXM", "a100": "A100",
         "kv_cache": "KV-cache", "object_sweep": "object sweep", "transfer_sweep": "transfer-size",
         "stream_inference": "streaming", "train_resnet50": "ResNet50 training", "vector_search": "vector search",
         "au_percent": "AU %", "samples_per_s": "samples/s", "limited_by": "limited by",
         "limited_by_reason": "why limited", "cache_method": "cache method", "drop_caches": "drop caches",
         "fadvise_dontneed": "fadvise (don't need)", "search_list": "search list size",
         "study_to_reference": "ours ÷ reference",
         # the emulated device profiles (core/targets.py DEVICE_PROFILES)
         "hdd_7200": "7,200 rpm HDD", "sata_ssd": "SATA SSD", "nvme_gen3": "PCIe 3.0 NVMe SSD",
         "nvme_gen4": "PCIe 4.0 NVMe SSD", "nvme_gen5": "PCIe 5.0 NVMe SSD"}
# Column-name pieces: what a snake_case name's last words mean, in the units a reader reads.
UNITS = [("_mb_per_s", " MB/s"), ("_gib_per_s", " GiB/s"), ("_gb_per_s", " GB/s"), ("_per_s", "/s"),
         ("_percent", " %"), ("_ms", " ms"), ("_s", " s"), ("_mib", " MiB"), ("_gib", " GiB"), ("_mb", " MB"),
         ("_kib", " KiB"), ("_bytes", " bytes")]
WORKLOAD = re.compile(r"\b(tiny|quick|paper|full)-(\d+)\b")
# A snake_case identifier not part of a path or file name (kv_cache/runs.csv, points_x.csv stay as written).
SNAKE = re.compile(r"(?<![\w/.\-])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![\w/\-]|\.\w)")
CATALOGUE = re.compile(r"(?<![\w/.\-])(?:this-cpu|h100-sxm|h200|a100|(?:tiny|quick|paper|full)-\d+)(?![\w/\-]|\.\w)")


def display(key: str) -> str:
    """A reader's name for one internal key: the table's, else its words with the unit spelled as a unit."""
    if key in NAMES:
        return NAMES[key]
    m = WORKLOAD.fullmatch(key)
    if m:
        return f"{m.group(1)} workload {m.group(2)}"
    words = f"_{key}_"
    for piece, unit in UNITS:          # a unit anywhere in the name: throughput_mb_per_s_max
        words = words.replace(piece + "_", unit + "_")
    return words.strip("_").replace("_", " ")


def plural(n, word: str, many: str | None = None) -> str:
    """'1 thread', '2 threads', '1 process', '4 processes' (many: the plural where adding s is wrong); a count that
    is no number ('(not recorded)') takes the plural."""
    many = many or word + ("es" if word.endswith(("s", "sh", "tch", "x")) else "s")     # batches, epochs
    try:
        x = float(n)
    except (TypeError, ValueError):
        return f"{n} {many}"
    return (f"{int(x):,}" if x.is_integer() else f"{x:,g}") + " " + (word if x == 1 else many)


# "2 repeat(s)", "1 process(es)", "2 unconfined run(s)": a count with a noun written for either number (issue 62).
COUNTED = re.compile(r"\b(\d[\d,]*)(\s+(?:[a-z]+\s+)?)([A-Za-z]+)\((e?s)\)")


def counted(text: str) -> str:
    """Text with every 'N noun(s)' in the number N takes: '1 repeat', '2 repeats', '1 process', '3 processes'."""
    return COUNTED.sub(lambda m: m.group(1) + m.group(2) + m.group(3) + ("" if m.group(1) == "1" else m.group(4)),
                       text)


def reader_text(text: str, keep: frozenset[str] = frozenset()) -> str:
    """Text of an HTML page with every internal key in reader words and every 'N noun(s)' in its number; `keep`:
    the user's own names (targets) as written."""
    def swap(m: re.Match) -> str:
        if m.group(0) in keep:
            return m.group(0)
        name = display(m.group(0))     # a name with "/" or "-" stays whole in a table cell (display._wrap_at_spaces_only)
        return f'<span class="nw">{name}</span>' if re.search(r"\S[-/]\S", name) else name
    return counted(SNAKE.sub(swap, CATALOGUE.sub(swap, text)))


# Left as written: markup, code spans, preformatted text, and the notes saying why a study's files could not be
# read (they name the file's own column or key, which the user fixes there).
_SKIP = re.compile(r"(<(code|pre|script|style|svg)\b.*?</\2>)|(<div class=\"warn unreadable\".*?</div>)|(<[^>]*>)",
                   re.S | re.I)


def reader_html(page: str, keep: frozenset[str] = frozenset()) -> str:
    """The HTML with reader words in its text, markup, code spans, preformatted text, scripts and styles as
    they are."""
    out, at = [], 0
    for m in _SKIP.finditer(page):
        out.append(reader_text(page[at:m.start()], keep))
        out.append(m.group(0))
        at = m.end()
    out.append(reader_text(page[at:], keep))
    return "".join(out)


def internal_words(page: str, keep: frozenset[str] = frozenset()) -> list[str]:
    """Internal identifiers a reader would meet in the HTML's text (outside markup, code and pre)."""
    text = _SKIP.sub(" ", page)
    found = [m.group(0) for m in SNAKE.finditer(text)] + [m.group(0) for m in CATALOGUE.finditer(text)]
    return [w for w in found if w not in keep]



def _bounds(values, fmt) -> tuple[int, str, str] | None:
    """(runs, lowest, highest) formatted, or None under two runs."""
    v = _numbers(values)
    if len(v) < 2:
        return None
    f = fmt.format if isinstance(fmt, str) else fmt
    return len(v), f(min(v)), f(max(v))


def _numbers(values) -> list[float]:
    return [float(x) for x in values if x is not None and x == x]


def _with_earlier(values, earlier) -> tuple[int, list[float]]:
    """(studies, every value) of this study's runs and the earlier studies' (kit/history.earlier)."""
    before = [v for v in (_numbers(e) for e in earlier or []) if v]
    return 1 + len(before), _numbers(values) + [x for v in before for x in v]


def spread(values, fmt="{:,.1f}", earlier=None) -> str:
    """The range of the runs behind an answer, in words: '3 runs 449.5–612.0', or 'one run: no range' (page 1
    shows it beside the answer, so a reader can tell whether a second study's answer differs from this one).
    With earlier studies of the same parameters on this machine (kit/history.earlier: one list per study), their
    range too, with how many studies and runs it holds and where they came from: '3 runs 449.5–612.0; 2 studies
    (1 notebook, 1 pipeline) of these parameters on this machine, 5 runs: 430.2–612.0'.
    fmt: a format string or a function of the number."""
    b = _bounds(values, fmt)
    own = f"{b[0]} runs {b[1]}–{b[2]}" if b else "one run: no range"
    studies, every = _with_earlier(values, earlier)
    if studies < 2 or not _numbers(values):
        return own
    _, lo, hi = _bounds(every, fmt)
    origins = getattr(earlier, "origins", None)
    where = f" ({origins()})" if origins else ""
    return f"{own}; {studies} studies{where} of these parameters on this machine, {len(every)} runs: {lo}–{hi}"


def spread_cell(values, fmt="{:,.1f}", earlier=None) -> str:
    """spread() for a page-1 cell: '449.5–612.0 over 3 runs' (a quote names how many runs its range holds), or
    'one run'; with earlier studies, the range over all of their runs (how many studies: the scorecard's closing
    line and the chapter, so the cell stays short)."""
    studies, every = _with_earlier(values, earlier)
    if studies > 1 and _numbers(values):
        n, lo, hi = _bounds(every, fmt)
        return f"{lo}–{hi} over {n} runs"
    b = _bounds(values, fmt)
    return f"{b[1]}–{b[2]} over {b[0]} runs" if b else "one run"


# What a customer reading the brief's body (page 1 to the last chapter; the appendices may keep them) would not
# understand, code spans included (issue 62: "no config keys, file names, key paths, hashes or internal ids in the
# body"): each kind with what the brief says instead.
CUSTOMER = [
    ("an internal identifier", SNAKE), ("an internal identifier", CATALOGUE),
    ("a parameter's key path", re.compile(r"(?<![\w/.\-])[a-z][a-z0-9]*(?:\.[a-z0-9_*]+)*\.[a-z0-9*]*_[a-z0-9_.*]*")),
    ("a file name", re.compile(r"[\w<>*-]+\.(?:json|csv|yaml|yml|log|ipynb|py)\b")),
    ("an environment variable", re.compile(r"\b(?!O_DIRECT\b)[A-Z][A-Z0-9]+(?:_[A-Z0-9]+)+\b")),
    ("a commit hash", re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")),
    ("'honest' (say 'measured': MLPerf's figures are another accounting, not dishonest)",
     re.compile(r"\bhonest\b", re.I)),
    ("a noun for either number (say 1 thread, 2 threads)", re.compile(r"\w\((?:e?s)\)")),
    ("an arrow between internal names", re.compile(r"\w->\w")),
]
_MARKUP = re.compile(r"<(script|style|svg)\b.*?</\1>|<!--.*?-->|<[^>]*>", re.S | re.I)
TERMS = frozenset({"io_uring", "O_DIRECT"})     # the names a storage engineer knows them by


def body_of(page: str) -> str:
    """The brief's HTML before its first appendix (page 1, the snapshot and the chapters)."""
    at = page.find('class="appendix first-appendix"')
    return page[:page.rfind("<", 0, at)] if at >= 0 else page


def customer_words(page: str, keep: frozenset[str] = frozenset()) -> list[str]:
    """What a customer would not understand in the brief's body, code spans included: 'kind: …context…' each.
    keep: the user's own names (targets), shown as written."""
    import html as html_mod
    body = body_of(page)
    out = []
    for para in re.findall(r"<p\b.*?</p>", body, re.S):
        if para.count("one run: no range") > 1:
            out.append("a caveat repeated in one paragraph: 'one run: no range' "
                       f"×{para.count('one run: no range')}")
    text = html_mod.unescape(_MARKUP.sub(" ", body))
    for kind, pattern in CUSTOMER:
        for m in pattern.finditer(text):
            if m.group(0) in keep or m.group(0) in TERMS:
                continue
            out.append(f"{kind}: …{text[max(0, m.start() - 50):m.end() + 30]}…".replace("\n", " "))
    return out + [f"a heading whose section is only a pointer to an appendix: {h}" for h in pointer_only(body)]


def pointer_only(body: str) -> list[str]:
    """The body's headings (h2) whose section holds no figure, table or list and little text beside its link to an
    appendix: a section with no result, which belongs in the appendix whole."""
    out = []
    parts = re.split(r"(<h2\b.*?</h2>)", body, flags=re.S)
    for head, rest in zip(parts[1::2], parts[2::2]):
        if 'class="details-link"' not in rest:
            continue
        rest = re.sub(r'<p class="details-link".*?</p>', "", rest, flags=re.S)
        if re.search(r"<(table|img|svg|ul|ol)\b|class=\"card", rest):
            continue
        if len(" ".join(_MARKUP.sub(" ", rest).split())) < 500:
            out.append(" ".join(_MARKUP.sub(" ", head).split()))
    return out


# The notes a run keeps (notes.json, in the engine's words) that a reader of "Limits of this run" meets: said in
# words, each once (issue 62: "target 'local-s3' is an S3 target; KV-cache measures directories only, so it ran
# without it"). Notes of other shapes are shown as they are.
_LEFT_OUT = re.compile(r"target '([^']+)' is an S3 target; .+? measures directories only, so it ran without it")
_SWEEP_LEFT_OUT = re.compile(r"target '([^']+)' is an S3 target: .+?'s (\w+) sweep measures directories only and "
                             r"ran without it \(the save / restore protocol ran on it\)")
_S3_TARGETS = re.compile(r"\bS3 target\(s\) ([^\s,(]+(?:, [^\s,(]+)*)")
_JVM = re.compile(r"the brokers' JVMs ran with KAFKA_JVM_PERFORMANCE_OPTS=(.*) \(after storagebrief's own options\)")


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def limit_words(notes: list[str]) -> list[str]:
    """A run's notes for 'Limits of this run', in a reader's words, each once."""
    out, left, sweeps = [], [], {}
    for n in dict.fromkeys(notes):
        if m := _LEFT_OUT.fullmatch(n):
            left.append(m.group(1))
        elif m := _SWEEP_LEFT_OUT.fullmatch(n):
            sweeps.setdefault(m.group(1), []).append(m.group(2))
        elif m := _JVM.fullmatch(n):
            out.append(f"the Kafka brokers' Java VMs ran with extra options set in the environment: {m.group(1)}")
        else:
            out.append(_S3_TARGETS.sub(lambda s: ("the S3 targets " if "," in s.group(1) else "the S3 target ")
                                       + s.group(1), n))
    if left:
        kind = "an object store (S3) target" if len(left) == 1 else "object store (S3) targets"
        out.insert(0, f"not run on {_listed(left)}: {kind}, and this study reads and writes files in a directory")
    for t, which in sweeps.items():
        verbs = "sweep reads and writes" if len(which) == 1 else "sweeps read and write"
        out.append(f"on {t}, an object store (S3) target, only the save and restore protocol ran: the "
                   f"{_listed(which)} {verbs} files in a directory")
    return out
