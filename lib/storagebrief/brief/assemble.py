"""The performance brief's sections: cover, snapshot, one section per study, appendices.

The brief is a notebook (notebooks/brief.py, Jupytext) executed by papermill; every cell
calls into this module, which reads the studies' output directories through one gate
(brief/inputs.py): a study whose files cannot be used gets "could not be read: <why>"
in its section and is left out of the rest. Studies come from the registry
(storagebrief.studies): each contributes its title, headlines() and its own section;
this module adds what every brief shares.
"""
from __future__ import annotations

import html
import re
from pathlib import Path

import pandas as pd

from ..core import cache, config as config_mod
from ..studies import get as get_study
from ..report import formatting
from . import choose, inputs, pageone, quiet, scorecard
from .headline_inputs import (METHOD_WORDS, cache_caveats, fallback_cache_methods,  # noqa: F401 - tests
                              snapshot_headlines)                                    # read them here
from ..report.words import limit_words
from .inputs import unapplied_profiles  # noqa: F401 - tests read it here
from .parts import not_rendered as _not_rendered, part as _part, survives as _survives
from ..report.display import (Appendix, details_to, limits_box, raw_table_html, show_html, show_md, show_table,
                              wrap_at_spaces_only)


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


def all_headlines(reports_dir: str | Path) -> list[dict]:
    return snapshot_headlines(reports_dir)[0]


SNAPSHOT_CARDS = 9          # three rows of three: one per study while there are nine


effect_size = formatting.effect_size       # the snapshot's ranking (report/formatting.py)


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
            show_html('<h2 class="snapshot">Test results snapshot</h2>' + missing)
        elif inputs.readable(reports_dir):   # results, none comparing two targets (an external endpoint alone)
            show_html('<h2 class="snapshot">Test results snapshot</h2><p>No comparison between targets: the studies '
                      'that ran compared no reference target with another (one target each, or an external '
                      'endpoint alone). Their answers are on page 1 and in their chapters.</p>')
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
    body = '<div class="cards">' + wrap_at_spaces_only("".join(cards)) + "</div>"   # "hdd-" / "emulated" seen
    used = scorecard.glossary_terms(" ".join(f"{h['label']} {h['text']} {h['ref']} {h['other']}" for h in hs))
    # where a reader meets them first (issue 62): page 1's terms it had no room to define, and these cards'
    terms = [w for _, w in scorecard.GLOSSARY if (w in used or w in pageone.USED) and w not in pageone.DEFINED]
    show_html('<h2 class="snapshot">Test results snapshot</h2><p>Reference target compared with each other target (for '
              'training, also each memory limit with no limit on the same target); "up to" is the largest '
              f'difference over the configurations both ran (means over repeats). The {len(hs)} largest effects '
              f'of {total} comparisons, ' + ("at least one per study" if every else "each study's largest first")
              + '; all of them are in Appendix C.' + (f' Terms: {html.escape("; ".join(terms))}.' if terms else "")
              + '</p>' + body + missing)


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
    # a table a reader sorts (by study, by result): the HTML's, and headlines.json; the snapshot prints the largest
    show_html(raw_table_html(pd.DataFrame(rows), "Every headline the studies computed (reports/headlines.json), "
                                                 "largest effects on the snapshot; each is recomputable from its "
                                                 "study's runs.csv"))


FIRST_DETAIL_LETTER = "D"      # A, B and C are the system, the procedure and every comparison
_DETAIL_APPENDICES: list[Appendix] = []   # this brief's per-section detail appendices, in order


def title_block(reports_dir: str | Path, params_file: str | Path) -> None:
    """Page 1's cover (brief/pageone.py), opening a new brief: its own appendices D, E, …"""
    _DETAIL_APPENDICES.clear()
    pageone.cover(reports_dir, params_file)


answers = pageone.answers


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
        if appendix is not None:          # the brief: the chapter opens with its headline and page 1's answer
            appendix.items.append(("html", _csv_links(d)))
            _headline(study, s)
            pageone.chapter_answer(study.name, d.parent)
            if quiet.sentence(frame):
                show_html(f'<p class="quiet">{html.escape(quiet.sentence(frame))}</p>')
        study.brief_section(d, frame, s.names)
    notes = d / "notes.json"
    warnings = list(inputs.read_json(notes).get("warnings", [])) if notes.is_file() else []
    methods = fallback_cache_methods(frame)
    if methods:
        why = "chosen" if set(methods) & {cache.BY_FILES_PARAM, cache.BY_FILES_ENV} else "needs root"
        how = ", ".join(METHOD_WORDS.get(m, m) for m in methods)
        warnings.append(f"cold cache by {how} instead of drop_caches ({why}): files the "
                        "run reads were evicted, other cached data (metadata, libraries) was not")
    limits_box(limit_words(warnings))


def _csv_links(study_dir: Path) -> str:
    """The study's CSV files, linked from its appendix (relative to brief.html, which lies beside the studies'
    folders): the long tables a reader would sort are there and in the HTML brief, not printed."""
    files = sorted(Path(study_dir).glob("*.csv"))
    links = ", ".join(f'<a href="{html.escape(study_dir.name)}/{html.escape(f.name)}">{html.escape(f.name)}</a>'
                      for f in files)
    where = choose.sources(study_dir.parent).get(study_dir.name, {}).get("folder") or choose.shown(study_dir)
    return f'<p class="csv-links">Every value of this study: {links} (in {html.escape(str(where))}/).</p>' \
        if files else ""


def _headline(study, s: inputs.StudyInput) -> None:
    """The chapter's one-sentence headline: its largest comparison (the snapshot's card for it)."""
    hs = [h for h in study.headlines(s.frame, s.names) if h.get("delta_percent") is not None]
    if hs:
        h = max(hs, key=effect_size)
        show_html(f'<p class="headline"><b>{html.escape(h["label"])}: {html.escape(h["text"])}</b> '
                  f'({html.escape(h["ref"])} vs {html.escape(h["other"])}).</p>')


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
    details=True: the whole section is an appendix of its own (no result of it is a chapter's: issue 62)."""
    from . import characterization as chz
    appendix = detail_appendix("Block-level I/O characterization", "appendix-characterization") \
        if details else None
    chz.section(reports_dir, [(s.key, s.title, s.dir) for s in inputs.readable(reports_dir)], target_order,
                appendix)


@_part("Appendix A")
def appendix_configuration(reports_dir: str | Path) -> None:
    inv = inputs.latest_inventory(reports_dir)
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
    show_html('<h2 class="appendix first-appendix">Appendix A — System configuration</h2>')
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
    choose.show_sources(reports_dir)          # a brief of chosen studies: where each one's results came from
    show_md(
        how_ran(reports_dir) + " Before every measured run the page cache was made cold "
        "(the method is the `cache_method` column of runs.csv); device counters and CPU were sampled "
        f"every {params.run.monitor_interval_s} s while the run was in flight. Runs repeat and "
        "interleave targets so drift affects all targets alike. " + _which_params(reports_dir, params, params_file))
    raw = ran_params(config_mod.raw_params(params), reports_dir)
    text = yaml.safe_dump(raw, sort_keys=False)
    # print sets the parameters in three narrow columns, where a target's long path would wrap mid-name: there the
    # targets are Appendix A's table (name, path, device, profile, access); the HTML shows them here as well
    rest = yaml.safe_dump({k: v for k, v in raw.items() if k != "targets"}, sort_keys=False)
    show_html(f"<pre class='params html-only'>{html.escape(text)}</pre>"
              "<pre class='params print-only'>targets: # each target's name, path, device, profile and access: "
              f"Appendix A\n{html.escape(rest)}</pre>")


# How a study's run was started (inventory.json `entry`, core.inventory.entry_point), {its}: "its" or "their"
HOW_RAN = {"pipeline": "through {its} DVC stage (`dvc repro`: papermill executes the numbered notebook, which calls "
                       "`storagebrief`)",
           "notebook": "from {its} notebook (JupyterLab or papermill; the notebook calls `storagebrief`)",
           "CLI": "from the command line (`storagebrief <study>`)"}


def how_ran(reports_dir) -> str:
    """How each study in the brief was started, from what its results recorded: through its DVC stage, its notebook
    or the command line ('Each study ran … through its DVC stage' was printed for every run, issue 62)."""
    recorded = inputs.entries(reports_dir)
    names = {s.title: re.split(r"[:(]", s.title)[0].strip() for s in inputs.studies(reports_dir)}
    groups: dict[str, list[str]] = {}
    for title, name in names.items():
        how = recorded.get(title)
        groups.setdefault(how if how in HOW_RAN else "", []).append(name)
    if len(groups) == 1 and "" not in groups:
        how, = groups
        return "Each study ran " + HOW_RAN[how].format(its="its") + "."
    parts = []
    for how in (*HOW_RAN, ""):
        if how not in groups:
            continue
        who = groups[how]
        listed = "the " + (who[0] if len(who) == 1 else ", ".join(who[:-1]) + " and " + who[-1]) + \
            (" study" if len(who) == 1 else " studies")
        its = "its" if len(who) == 1 else "their"
        parts.append(f"{listed} ran {HOW_RAN[how].format(its=its)}" if how else
                     f"how {listed} {'was' if len(who) == 1 else 'were'} started was not recorded")
    text = "; ".join(parts) + "."
    return text[0].upper() + text[1:]


def ran_params(raw: dict, reports_dir) -> dict:
    """The parameters with only the sections of the studies in this brief (a one-study brief printed two pages
    of settings for all nine): the shared ones (scale, targets, profiles, run) stay."""
    present = {s.key for s in inputs.studies(reports_dir)}
    return {k: v for k, v in raw.items() if k not in config_mod.study_sections() or k in present}


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
