"""The performance brief's sections: cover, snapshot, one section per study, appendices.

The brief is a notebook (notebooks/brief.py, Jupytext) executed by papermill; every cell
calls into this module, which reads the studies' output directories through one gate
(brief/inputs.py): a study whose files cannot be used gets "could not be read: <why>"
in its section and is left out of the rest. Studies come from the registry
(storagebrief.studies): each contributes its title, headlines() and its own section;
this module adds what every brief shares.
"""
from __future__ import annotations

import functools
import html
import re
from pathlib import Path

import pandas as pd

from ..core import config as config_mod
from ..studies import get as get_study
from ..report import formatting
from . import accelerators, inputs
from ..report.display import Appendix, details_to, limits_box, set_target_order, show_html, show_md, show_table


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return getattr(get_ipython(), "kernel", None) is not None


def _not_rendered(what: str, exc: Exception) -> None:
    show_html(f'<div class="warn unreadable"><b>{html.escape(what)} could not be rendered</b>: '
              f'{html.escape(type(exc).__name__)}: {html.escape(str(exc))}. The inputs passed the brief\'s checks, '
              'so this is an input those checks do not know or a bug: please report it with the study\'s folder.</div>')


def _survives(what: str, fn, *args) -> None:
    """Run one part of the brief; in the brief's kernel an error becomes a visible note in its place
    (its half-made output dropped) so every other part still renders, and render() repeats it on the
    terminal. Elsewhere (tests, scripts) the error propagates, so a bug is not hidden."""
    if not _in_kernel():
        fn(*args)
        return
    import matplotlib.pyplot as plt
    from IPython.utils.capture import capture_output
    try:
        with capture_output() as cap:
            fn(*args)
    except Exception as exc:   # noqa: BLE001 - any error of one part; reported, not swallowed
        plt.close("all")
        _not_rendered(what, exc)
        return
    cap.show()


def _part(what: str):
    def wrap(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            _survives(what, lambda: fn(*args, **kwargs))
        return run
    return wrap


def available(reports_dir: str | Path) -> list[tuple[str, str, Path]]:
    """(study name, title, output directory) of every registered study that left results, readable or
    not: each gets its section (an unreadable one says why). Other parts use inputs.readable()."""
    return [(s.key, s.title, s.dir) for s in inputs.studies(reports_dir)]


def target_order(study_dir: Path, frame: pd.DataFrame) -> list[str]:
    """Targets in params order (the first is the reference), from the run's inventory."""
    inv = Path(study_dir) / "inventory.json"
    try:
        return inputs.target_order(frame, inputs.read_json(inv) if inv.is_file() else {})
    except inputs.Unreadable:
        return inputs.target_order(frame, {})


def fallback_cache_methods(frame: pd.DataFrame) -> list[str]:
    """cache.cold_cache's fallbacks (no root, or cold cache off); a study may choose a method by
    design (training evicts its dataset files only: 'fadvise_dontneed (dataset files)')."""
    return sorted(m for m in set(frame.cache_method.fillna("").astype(str))
                  if m == "fadvise_dontneed" or m.startswith("none"))


def unapplied_profiles(frame: pd.DataFrame) -> dict[str, str]:
    """target -> how much of its emulated profile was not applied, from the runs' own rows."""
    out = {}
    if "emulated" not in frame or "profile" not in frame:
        return out
    for name, g in frame.groupby("target"):
        prof = str(g.profile.fillna("").iloc[0])
        applied = g.emulated.astype(str).str.lower().eq("true")
        if prof and prof != "nan" and not applied.all():
            share = "none" if not applied.any() else f"{int((~applied).sum())} of {len(g)}"
            out[name] = f"profile {prof} not applied in {share} of its runs (they ran unthrottled)"
    return out


def _caveats(s: inputs.StudyInput, h: dict) -> list[str]:
    """What a headline's numbers do not show: a sweep cut short, an emulated profile or a cold cache that
    was not applied."""
    frame = s.frame
    out = []
    if s.cut_short():
        out.append(f"sweep cut short: {s.status['runs_done']} of {s.status['runs_planned']} runs")
    out += [f"{t}: {why}" for t, why in unapplied_profiles(frame).items() if t in (h["ref"], h["other"])]
    methods = fallback_cache_methods(frame)
    if methods:
        out.append(f"cold cache by {', '.join(methods)}, not drop_caches")
    return out


def snapshot_headlines(reports_dir, survive: bool | None = None) -> tuple[list[dict], list[tuple[str, str]]]:
    """The snapshot's headlines of every readable study, and (study title, why) of those left out.
    survive: a study whose arithmetic fails is left out, not raised (default: inside the brief's kernel)."""
    survive = _in_kernel() if survive is None else survive
    out, left_out = [], []
    for s in inputs.studies(reports_dir):
        if not s.ok:
            left_out.append((s.title, f"could not be read: {s.problem}"))
            continue
        try:
            hs = get_study(s.key).headlines(s.frame, s.names)
        except Exception as exc:   # noqa: BLE001 - one study's arithmetic must not take the others' cards
            if not survive:
                raise
            left_out.append((s.title, f"headlines could not be computed: {type(exc).__name__}: {exc}"))
            continue
        out += [{**h, "study": s.key, "study_title": s.title, "caveats": _caveats(s, h)} for h in hs]
    return out, left_out


def all_headlines(reports_dir: str | Path) -> list[dict]:
    return snapshot_headlines(reports_dir)[0]


def _all_unapplied(reports_dir) -> dict[str, str]:
    out: dict[str, str] = {}
    for s in inputs.readable(reports_dir):
        for t, why in unapplied_profiles(s.frame).items():
            out.setdefault(t, why)
    return out


@_part("The cover")
def title_block(reports_dir: str | Path, params_file: str | Path) -> None:
    params = config_mod.load(params_file, check_targets=False)   # the brief writes nothing into targets
    _DETAIL_APPENDICES.clear()                                     # a new brief: its own appendices D, E, …
    set_target_order([t.name for t in params.targets])             # one colour per target in every figure
    studies = [s.title + ("" if s.ok else " (could not be read)") + (" (cut short)" if s.cut_short() else "")
               for s in inputs.studies(reports_dir)]
    inv = _latest_inventory(reports_dir)
    unapplied = _all_unapplied(reports_dir)

    def label(t) -> str:
        if not t.get("profile_name"):
            return ""
        if t["name"] in unapplied:
            return f" (emulated {html.escape(t['profile_name'])} <b>NOT applied</b>: ran unthrottled)"
        return f" (emulated {html.escape(t['profile_name'])})"
    targets = ", ".join(f"<b>{html.escape(t['name'])}</b>" + label(t) for t in inv.get("targets", []))
    show_html(
        '<div class="cover"><h1>Storage performance brief</h1>'
        f'<p class="subtitle">How storage shapes AI pipelines on <b>{html.escape(inv.get("cpu_model", "this machine"))}</b>'
        f' — scale <b>{params.scale}</b>, targets {targets}</p>'
        f'<p class="meta">Studies: {html.escape("; ".join(studies)) or "none"}. Commit {html.escape(inv.get("git_commit", "?"))},'
        f' params {html.escape(inv.get("params_hash", "?"))}. Every figure below is computed from the runs.csv '
        'files the studies wrote; the appendices list the system and the parameters that ran.</p></div>')
    rows = []
    for t in inv.get("targets", []):
        dev, prof = t.get("device") or {}, t.get("profile") or {}
        rows.append({"Target": t["name"], "Directory": t["path"],
                     "Device": f'{dev.get("name")} ({dev.get("model")}, {"rotational" if dev.get("rotational") else "non-rotational"})'
                     if dev.get("name") else "unresolved",
                     "Emulated device": (f'NOT APPLIED ({unapplied[t["name"]]}); meant {t["profile_name"]}: '
                                         if t["name"] in unapplied else f'{t["profile_name"]}: ') +
                     (f'read ≤ {prof.get("read_mb_per_s") or "∞"} MB/s, ≤ {prof.get("read_iops") or "∞"} IOPS')
                     if prof else "none (as is)"})
    if rows:
        show_table(pd.DataFrame(rows), "Storage targets compared in this brief (details in Appendix A).")


@_part("The answers")
def answers(reports_dir: str | Path) -> None:
    """Page 1's answers, one row per question and target, from every readable study that has some."""
    rows = []
    studies = inputs.readable(reports_dir)
    found_by = {s.key: _study_answers(s) for s in studies}
    # "How many accelerators": one reconciled row per target (brief/accelerators.py) in place of the emulate
    # and transfer-size studies' own rows, placed where the first of them stood
    by_key = {s.key: s for s in studies}
    both = ("emulate", "transfer_sweep")
    acc = _survives_value("the accelerators answer", accelerators.answers, by_key.get("emulate"),
                          by_key.get("transfer_sweep"), found_by.get("emulate")) if set(both) & set(by_key) else []
    reconciled = bool(acc)
    for s in studies:
        found = found_by[s.key]
        if reconciled and s.key in both:
            found = [a for a in found if not str(a["question"]).startswith(accelerators.REPLACES_PREFIX)]
        for a in found:
            rows.append({"Question": a["question"], "Target": a["target"], "Answer": a["answer"],
                         "Basis (what limited it, how measured)": a.get("basis", "")})
    # the accelerators answer first: the question a reader comes for, on page 1 for every target
    rows = [{"Question": a["question"], "Target": a["target"], "Answer": a["answer"],
             "Basis (what limited it, how measured)": a.get("basis", "")} for a in acc] + rows
    if rows:
        show_html('<h2 class="answers">The answers</h2>')
        show_table(pd.DataFrame(rows), "Each answer is computed from the runs the study wrote (its section and "
                                       "CSV files give the detail); quick-profile runs are short and scaled down.")


def _study_answers(s) -> list[dict]:
    try:
        return get_study(s.key).answers(s.dir, s.frame, s.names)
    except Exception as exc:   # noqa: BLE001 - one study's arithmetic must not take the others' answers
        if not _in_kernel():
            raise
        return [{"question": s.title, "target": "–", "answer": "could not be computed",
                 "basis": f"{type(exc).__name__}: {exc}"}]


def _survives_value(what: str, fn, *args) -> list:
    """fn(*args), or [] with a note in a kernel when it raised (the studies' own rows then stand)."""
    try:
        return fn(*args)
    except Exception as exc:   # noqa: BLE001
        if not _in_kernel():
            raise
        _not_rendered(what, exc)
        return []


SNAPSHOT_CARDS = 9          # three rows of three: one per study while there are nine


def effect_size(h: dict) -> float:
    """How large a headline's difference is, either way: |log| of its better-direction factor."""
    import math
    d = h.get("delta_percent")
    if d is None:
        return -1.0
    f = formatting.factor(d, h["better"])
    return math.inf if f == math.inf else abs(math.log(f)) if f > 0 else math.inf


def pick_cards(hs: list[dict], n: int = SNAPSHOT_CARDS) -> list[dict]:
    """The snapshot's cards: each study's largest effect first, then the largest of the rest, n in all,
    in the studies' order; every other comparison is in Appendix C."""
    ranked = sorted((h for h in hs if h.get("delta_percent") is not None), key=effect_size, reverse=True)
    chosen, studies = [], []
    for h in ranked:
        if h["study"] not in studies and len(chosen) < n:
            chosen.append(h)
            studies.append(h["study"])
    for h in ranked:
        if len(chosen) >= n:
            break
        if h not in chosen:
            chosen.append(h)
    order = {s: i for i, s in enumerate(dict.fromkeys(h["study"] for h in hs))}
    return sorted(chosen, key=lambda h: (order[h["study"]], -effect_size(h)))


@_part("The results snapshot")
def snapshot(reports_dir: str | Path) -> None:
    hs, left_out = snapshot_headlines(reports_dir)
    total, studies = len(hs), {h["study"] for h in hs if h.get("delta_percent") is not None}
    hs = pick_cards(hs)
    every = len({h["study"] for h in hs}) == len(studies)
    missing = ("<p class=\"left-out\">Not in this snapshot: " + "; ".join(
        f"<b>{html.escape(t)}</b> ({html.escape(why)})" for t, why in left_out) + ".</p>") if left_out else ""
    if not hs:
        if missing:
            show_html("<h2>Test results snapshot</h2>" + missing)
        else:
            show_md("No study results yet: run `dvc repro` or `storagebrief <study>` first.")
        return
    cards = []      # one grid, three to a row (the KIOXIA brief's snapshot page), each card naming its study
    for h in hs:
        word = h.get("hint") or ("higher is better" if h["better"] == "higher" else "lower is better")
        cards.append(
            f'<div class="card" data-study="{h["study"]}" data-headline="{html.escape(h["id"])}" '
            f'data-value="{h["delta_percent"]}"><div class="card-study">{html.escape(h["study_title"])}</div>'
            f'<div class="card-label">{html.escape(h["label"])}<br/><span class="hint">({word})</span></div>'
            f'<div class="card-value">{html.escape(h["text"])}</div>'
            f'<div class="card-pair">{html.escape(h["ref"])} vs {html.escape(h["other"])}</div>'
            + "".join(f'<div class="card-caveat">⚠ {html.escape(c)}</div>' for c in h.get("caveats", []))
            + '</div>')
    body = '<div class="cards">' + "".join(cards) + "</div>"
    show_html('<h2>Test results snapshot</h2><p>Reference target compared with each other target (for '
              'training, also each memory limit with no limit on the same target); "up to" is the largest '
              f'difference over the configurations both ran (means over repeats). The {len(hs)} largest effects '
              f'of {total} comparisons, ' + ("at least one per study" if every else "each study's largest first")
              + '; all of them are in Appendix C.</p>' + body + missing)


@_part("Appendix C")
def appendix_comparisons(reports_dir: str | Path) -> None:
    """Every headline comparison (the snapshot shows the largest): study, what, pair, result, where."""
    hs, _ = snapshot_headlines(reports_dir)
    if not hs:
        return
    rows = [{"Study": h["study_title"], "Comparison": h["label"], "Pair": f'{h["ref"]} vs {h["other"]}',
             "Result": h["text"], "Where": ", ".join(f"{k} {v}" for k, v in (h.get("at") or {}).items()),
             "Caveats": "; ".join(h.get("caveats", []))} for h in hs]
    show_html('<h2 class="appendix">Appendix C — Every comparison</h2>')
    show_table(pd.DataFrame(rows), "Every headline the studies computed (reports/headlines.json), largest effects "
                                   "on the snapshot; each is recomputable from its study's runs.csv.")


FIRST_DETAIL_LETTER = "D"      # A, B and C are the system, the procedure and every comparison
_DETAIL_APPENDICES: list[Appendix] = []   # this brief's per-section detail appendices, in order


def detail_appendix(title: str, anchor: str) -> Appendix:
    """A new detail appendix (D, E, …) for one body section of this brief; shown by appendix_details()."""
    a = Appendix(chr(ord(FIRST_DETAIL_LETTER) + len(_DETAIL_APPENDICES)), title, anchor)
    _DETAIL_APPENDICES.append(a)
    return a


def detail_link(appendix: Appendix | None, what: str = "Detail tables") -> None:
    """The body's pointer to its appendix (a link in the HTML, "see Appendix D" in the PDF), under the
    section's heading: at its end it was a line of its own on an otherwise empty page (seen)."""
    if appendix is not None:
        show_html(f'<p class="details-link">{html.escape(what)} of this section: see <a href="#{appendix.anchor}">'
                  f'{html.escape(appendix.heading())}</a>.</p>')


def study_section(key: str, study_dir: str | Path, details: bool = False) -> None:
    """A study's brief section from its output directory (also used by its notebook): a note first when
    the sweep was cut short, then the section, or why its results could not be read.
    details=True (the brief): its detail tables go to an appendix of their own, linked from the section;
    False (the study's notebook): everything inline."""
    study = get_study(key)
    s = inputs.read_study(study.name, study_dir)
    show_html(f'<h2 class="section" id="section-{study.name}">{html.escape(study.title)}</h2>')
    if s.cut_short():
        show_html(f'<div class="warn cut-short" data-study="{study.name}"><b>{html.escape(s.cut_short())}</b></div>')
    if not s.ok:
        show_html(f'<div class="warn unreadable" data-study="{study.name}"><p>The results in '
                  f'<code>{html.escape(str(s.dir))}</code> could not be read: {html.escape(s.problem)}. This study is '
                  f'left out of the snapshot and the block-level characterization; rerun it (<code>storagebrief '
                  f'{html.escape(study.command)}</code> or <code>dvc repro {html.escape(study.name)}</code>) to replace '
                  'them.</p></div>')
        return
    short = re.split(r":| \(", study.title)[0]         # "Emulated-accelerator training", "Checkpointing"
    appendix = detail_appendix(f"{short}: details", f"appendix-{study.name}") if details else None
    detail_link(appendix)
    _survives(f"The {study.title} section", _study_body, study, s, appendix)


def _study_body(study, s: inputs.StudyInput, appendix: Appendix | None = None) -> None:
    d, frame = s.dir, s.frame
    with details_to(appendix):
        study.brief_section(d, frame, s.names)
    notes = d / "notes.json"
    warnings = list(inputs.read_json(notes).get("warnings", [])) if notes.is_file() else []
    methods = fallback_cache_methods(frame)
    if methods:
        warnings.append(f"cold cache by {', '.join(methods)} instead of drop_caches (needs root): files the "
                        "run reads were evicted, other cached data (metadata, libraries) was not")
    limits_box(warnings)


@_part("The detail appendices")
def appendix_details(reports_dir: str | Path | None = None) -> None:
    """Appendix D onwards: each body section's detail tables and figures, in the sections' order."""
    for a in _DETAIL_APPENDICES:      # every one: its section links it before knowing what it will hold
        a.show()
        if not a.items:
            show_md("Nothing beyond what the section shows for this run.")
    _DETAIL_APPENDICES.clear()


@_part("The block-level I/O characterization")
def block_characterization(reports_dir: str | Path, details: bool = False) -> None:
    """The block-level I/O characterization of every readable study (brief/characterization.py);
    details=True: its tables and plots in an appendix of their own."""
    from . import characterization as chz
    appendix = detail_appendix("Block-level I/O characterization: details", "appendix-characterization") \
        if details else None
    chz.section(reports_dir, [(s.key, s.title, s.dir) for s in inputs.readable(reports_dir)], target_order,
                appendix)
    detail_link(appendix, "Tables and plots")     # after its heading, which chz.section shows


def _latest_inventory(reports_dir) -> dict:
    """The newest inventory.json that reads (a study's corrupt one does not take the appendix with it), with
    the targets of every study's inventory: a study that ran on some targets only (the object sweep's
    directory-vs-S3 pair) does not hide the others. A target's newest description wins."""
    found = sorted(Path(reports_dir).glob("*/inventory.json"), key=lambda p: p.stat().st_mtime)
    newest, targets = {}, {}
    for f in found:
        try:
            inv = inputs.read_json(f)
        except (inputs.Unreadable, OSError):
            continue
        if isinstance(inv.get("targets", []), list):
            newest = inv
            for t in inv.get("targets", []):
                if isinstance(t, dict) and "name" in t:
                    targets[t["name"]] = t
    return {**newest, "targets": list(targets.values())} if newest else {}


@_part("Appendix A")
def appendix_configuration(reports_dir: str | Path) -> None:
    inv = _latest_inventory(reports_dir)
    if not inv:
        return
    gib = inv["memory_total_bytes"] / 2**30
    rows = [("CPU model", inv["cpu_model"]), ("Sockets", inv["cpu_sockets"]),
            ("Cores (physical / threads)", f'{inv["cpu_cores_physical"]} / {inv["cpu_threads"]}'),
            ("Memory", f"{gib:.1f} GiB"), ("Operating system", inv["os"]), ("Kernel", inv["kernel"]),
            ("Python", inv["python"]), ("Git commit", inv["git_commit"]), ("Params hash", inv["params_hash"])]
    if inv.get("git_changed_files"):
        rows.append(("Uncommitted changes (why '-dirty')", ", ".join(inv["git_changed_files"])))
    if inv.get("run_updated_files"):
        rows.append(("Rewritten by this run (not code)", ", ".join(inv["run_updated_files"]) +
                     ": DVC records the outputs of each stage it ran"))
    rows += [(f"Privilege: {k}", v) for k, v in inv.get("privileges", {}).items()]
    show_html('<h2 class="appendix">Appendix A — System configuration</h2>')
    show_table(pd.DataFrame(rows, columns=["Item", "Value"]))
    trows = []
    for t in inv.get("targets", []):
        dev = t.get("device") or {}
        prof = t.get("profile") or {}
        caps = ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in prof.items()
                         if k != "description" and v) if prof else "none (device as is)"
        s3 = t.get("s3") or {}
        trows.append({"Target": t["name"], "Path": t["path"],
                      "Access": f'S3 {s3.get("kind")}: {s3.get("endpoint")}' if s3 else "directory",
                      "Device": f'{dev.get("name")} ({dev.get("model")})' if dev.get("name") else dev.get("reason", "?"),
                      "Rotational": dev.get("rotational"), "Interface": dev.get("interface"),
                      "Filesystem": t["filesystem"], "Mount options": t["mount_options"],
                      "Emulated profile": (t.get("profile_name") or "–") + (f": {caps}" if prof else "")})
    show_table(pd.DataFrame(trows), "Storage targets. Emulated profiles cap the device with cgroup blkio throttling.")
    _client_hosts(reports_dir)
    pk = inv.get("packages", {})
    items = sorted(pk.items())
    half = (len(items) + 1) // 2     # two column pairs: half the height, no page of its own
    pairs = [(*items[i], *(items[i + half] if i + half < len(items) else ("", ""))) for i in range(half)]
    show_table(pd.DataFrame(pairs, columns=["Package", "Version", "Package ", "Version "]), "Software versions")


def _client_hosts(reports_dir) -> None:
    """Every host of the studies' multi-host runs (inventory.json `hosts`), each with its roles."""
    hosts: dict[str, dict] = {}
    for f in sorted(Path(reports_dir).glob("*/inventory.json")):
        try:
            inv = inputs.read_json(f)
        except (inputs.Unreadable, OSError):
            continue
        for h in inv.get("hosts") or []:
            if isinstance(h, dict) and h.get("name"):
                seen = hosts.setdefault(h["name"], {**h, "roles": []})
                seen["roles"] = sorted(set(seen["roles"]) | set(h.get("roles") or []))
    if len(hosts) < 2:
        return
    rows = [{"Host": h["name"], "Roles": ", ".join(h["roles"]), "CPU": h.get("cpu_model", "?"),
             "Threads": h.get("cpu_threads"), "Memory": f'{h["memory_total_bytes"] / 2**30:.1f} GiB'
             if h.get("memory_total_bytes") else "?", "OS / kernel": f'{h.get("os", "?")} / {h.get("kernel", "?")}'}
            for h in hosts.values()]
    show_table(pd.DataFrame(rows), "Client hosts of multi-host runs: each host's own facts, reported by its first "
                                   "rank (the launcher's from this inventory).")


@_part("Appendix B")
def appendix_procedure(reports_dir: str | Path, params_file: str | Path) -> None:
    import yaml
    params = config_mod.load(params_file, check_targets=False)
    show_html('<h2 class="appendix">Appendix B — Test procedure and parameters</h2>')
    show_md(
        "Each study ran from `params.yaml` through its DVC stage (papermill executes the numbered "
        "notebook, which calls `storagebrief`). Before every measured run the page cache was made cold "
        "(the method is the `cache_method` column of runs.csv); device counters and CPU were sampled "
        f"every {params.run.monitor_interval_s} s while the run was in flight. Runs repeat and "
        "interleave targets so drift affects all targets alike. " + _which_params(reports_dir, params, params_file))
    text = yaml.safe_dump(config_mod.raw_params(params), sort_keys=False)
    show_html(f"<pre class='params'>{html.escape(text)}</pre>")


def _which_params(reports_dir, params, params_file) -> str:
    """The sentence above the parameters: they are the ones that ran only when every study's results recorded
    this file's hash (results keep the hash of the params that made them, with any -S changes, not a copy)."""
    name = Path(params_file).name
    other = {t: h for t, h in inputs.params_hashes(reports_dir).items() if h != params.source_hash}
    if not other:
        return f"The parameters that ran (`{name}`, hash {params.source_hash}):"
    runs = "; ".join(f"{t}: hash {h}" for t, h in other.items())
    return (f"**These results were not made with `{name}`** (hash {params.source_hash}): {runs}. Other "
            "parameters (another params file or `-S` changes) made them; each section's 'What ran' states the "
            f"settings it used. Below is `{name}` as it is now, not what ran:")
