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


def reader_text(text: str, keep: frozenset[str] = frozenset()) -> str:
    """Text of an HTML page with every internal key in reader words; `keep`: the user's own names (targets) as
    written."""
    def swap(m: re.Match) -> str:
        if m.group(0) in keep:
            return m.group(0)
        name = display(m.group(0))     # a name with "/" or "-" stays whole in a table cell (display._wrap_at_spaces_only)
        return f'<span class="nw">{name}</span>' if re.search(r"\S[-/]\S", name) else name
    return SNAKE.sub(swap, CATALOGUE.sub(swap, text))


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
    """spread() for a page-1 cell: '449.5–612.0', or 'one run'; with earlier studies, the range over all of
    them (how many studies: the scorecard's closing line and the chapter, so the cell stays short)."""
    studies, every = _with_earlier(values, earlier)
    if studies > 1 and _numbers(values):
        _, lo, hi = _bounds(every, fmt)
        return f"{lo}–{hi}"
    b = _bounds(values, fmt)
    return f"{b[1]}–{b[2]}" if b else "one run"
