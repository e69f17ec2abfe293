"""Page 1 (issue 49): a cover of two or three plain sentences and the scorecard (brief/scorecard.py), questions
as rows and targets as columns; the full answers and their basis print in each study's chapter (chapter_answer).
Each target's device is named by its kind and model from the inventory ("a directory on a virtual disk, QEMU
HARDDISK", issue 62); machine paths and device ids are in Appendix A, not here. Page 1 never spills: answers()
fits the footnotes to what the cover leaves of the page (report/layout.page_one_pt)."""
from __future__ import annotations

import html
import re
from pathlib import Path

import pandas as pd

from ..core import config as config_mod
from ..kit import history
from ..report import layout
from ..report.display import markdown_html, set_target_order, show_html, show_table
from ..report.words import display
from ..studies import get as get_study
from . import accelerators, headline_inputs, inputs, quiet, quotes, scorecard
from .parts import in_kernel, not_rendered, part

ACCELERATOR_STUDIES = ("emulate", "transfer_sweep")     # both answer "how many accelerators": one reconciled row
_COVER: list[str] = []          # the cover's HTML as last shown (title_block opens a brief with it)
DEFINED: list[str] = []         # the glossary lines page 1 printed (the snapshot defines only the others)
USED: list[str] = []            # the glossary lines of the terms page 1 uses (the snapshot defines those it did not)
# A disk model naming a hypervisor's emulated device (QEMU HARDDISK, VBOX HARDDISK, VMware Virtual disk, Msft
# Virtual Disk, Xen): the data sits on a virtual disk, whatever it reports as rotational.
VIRTUAL_MODEL = re.compile(r"\b(?:QEMU|VBOX|VMware|Virtual|Xen)\b", re.I)
MEMORY_FS = ("tmpfs", "ramfs")


def device_words(t: dict) -> str:
    """A target's device as a reader names it, from the inventory: 'a virtual disk, QEMU HARDDISK', 'an NVMe
    SSD, Samsung SSD 990 PRO', 'memory (tmpfs)'; '' when the inventory does not say. No path, no device id."""
    dev, fs = t.get("device") or {}, str(t.get("filesystem") or "")
    if fs in MEMORY_FS:
        return f"memory ({fs})"
    interface = str(dev.get("interface") or "unknown")
    model = re.sub(r"^ATA\s+", "", str(dev.get("model") or "").strip())     # Linux's vendor of every SATA disk
    if not dev.get("name"):
        return f"{'an' if fs[:1] in 'aeiou' else 'a'} {fs} file system" if fs and fs != "unknown" else ""
    # a PCI vendor id (virtio reports 0x1af4) or the "<interface> disk" stand-in names no model
    named = "" if re.fullmatch(r"0x[0-9a-f]+|unknown|", model, re.I) or model == f"{interface} disk" else model
    if interface == "virtio" or VIRTUAL_MODEL.search(model):
        kind = "a virtual disk"
        named = named or ("virtio" if interface == "virtio" else "")
    elif interface == "nvme":
        kind = "an NVMe SSD"
    elif dev.get("rotational") is True:
        kind = "a hard disk"
    elif dev.get("rotational") is False:
        kind = "an SSD"
    else:
        kind = "a disk"
    return kind + (f", {named}" if named else "")


def _target_words(t: dict, unapplied: dict, on_device: bool = True) -> str:
    """'hdd-emulated (an emulated hdd_7200 disk: read ≤ 150 MB/s, on a virtual disk, virtio)' in words, no path;
    on_device False: without the device (the cover says it once when every target shares it)."""
    name, prof, s3 = t["name"], t.get("profile") or {}, t.get("s3") or {}
    dev = device_words(t) if on_device else ""
    if s3:
        external = "external" in str(s3.get("kind", ""))
        return (f"{name} (S3 objects through {'an endpoint' if external else 'a local gateway'}"
                + ("" if external or not dev else f", on {dev}") + ")")
    on = f", on {dev}" if dev else ""
    if t.get("profile_name"):
        if name in unapplied:
            return f"{name} (meant as an emulated {display(t['profile_name'])}, not applied: ran unthrottled{on})"
        caps = ", ".join(x for x in (f"read ≤ {prof['read_mb_per_s']:g} MB/s" if prof.get("read_mb_per_s") else "",
                                     f"≤ {prof['read_iops']:,} IOPS" if prof.get("read_iops") else "") if x)
        return f"{name} (an emulated {display(t['profile_name'])}{': ' + caps if caps else ''}{on})"
    if not on_device:
        return f"{name} (a directory)"
    return f"{name} (a directory {'in' if dev.startswith('memory') else 'on'} {dev or 'this machine'})"


@part("The cover")
def cover(reports_dir: str | Path, params_file: str | Path) -> None:
    params = config_mod.load(params_file, check_targets=False)   # the brief writes nothing into targets
    set_target_order([t.name for t in params.targets])             # one colour per target in every figure
    studies = inputs.studies(reports_dir)
    inv = inputs.latest_inventory(reports_dir)
    unapplied = inputs.all_unapplied(reports_dir)
    devices = {device_words(t) for t in inv.get("targets", []) if not (t.get("s3") or {}).get("kind", "").startswith(
        "external")}
    shared = next(iter(devices)) if len(devices) == 1 and "" not in devices and len(inv.get("targets", [])) > 1 else ""
    targets = [_target_words(t, unapplied, on_device=not shared) for t in inv.get("targets", [])]
    n = len(studies)
    # one device under every target: named once (page 1's room goes to the findings, issue 62)
    summary = (f"{n} stud{'y' if n == 1 else 'ies'} of how storage shapes AI pipelines, against {len(targets)} "
               f"storage target{'' if len(targets) == 1 else 's'}{f' on one device, {shared}' if shared else ''}: "
               f"{'; '.join(targets) or 'none'}.")
    odd = [s.title + (" could not be read" if not s.ok else " was cut short") for s in studies
           if not s.ok or s.cut_short()]
    text = ('<div class="cover"><h1>Storage performance brief</h1>'
            f'<p class="summary">{html.escape(summary)}</p>'
            f'<p class="setup"><b>Set-up:</b> {html.escape(setup_words(params.scale, studies, inv))}</p>'
            + (f'<p class="meta">{html.escape("; ".join(odd))}.</p>' if odd else "") + '</div>')
    _COVER[:] = [text]                 # what answers() leaves room for on page 1
    show_html(text)


def setup_words(scale: str, studies: list, inv: dict) -> str:
    """Page 1's set-up sentence (issue 62: a vendor's quote carries its context): the profile, what it sizes the
    data at against the papers' sizes (the emulated training's samples and compute, the vector search's set), and
    the machine. From the studies' own records (study.json, inventory.json), not from params.yaml."""
    sizes = [w for s in studies if s.ok for w in _sizes(s.key, s.dir)]
    cpu = inv.get("cpu_model") or "a CPU not recorded"
    more = ", ".join(x for x in (f"{inv['cpu_threads']} CPU threads" if inv.get("cpu_threads") else "",
                                 f"{inv['memory_total_bytes'] / 2**30:.1f} GiB memory"
                                 if isinstance(inv.get("memory_total_bytes"), (int, float)) else "") if x)
    machine = f"one machine ({cpu}{', ' + more if more else ''})"
    if scale == "paper":
        return f"the paper profile{' (' + '; '.join(sizes) + ')' if sizes else ''}, on {machine}."
    return (f"the {scale} profile, short runs on data scaled down to finish in minutes"
            f"{' (' + '; '.join(sizes) + ')' if sizes else ''}, on {machine}: numbers for this machine, not a cluster "
            "(the paper profile runs the papers' sizes).")


def _sizes(key: str, d: Path) -> list[str]:
    """What a study's run sized its data at, in words, where the study records it; [] otherwise."""
    try:
        desc = inputs.read_json(d / "study.json") if (d / "study.json").is_file() else {}
    except (inputs.Unreadable, OSError):
        return []
    out = []
    if key == "emulate":
        acc = str(desc.get("accelerator_type") or "")
        for name, w in (desc.get("workloads") or {}).items():
            if not isinstance(w, dict):
                continue
            spec, ref = w.get("spec") or {}, w.get("reference") or {}
            mine, theirs = spec.get("record_bytes"), ref.get("record_bytes")
            compute, ref_compute = (spec.get("compute_s") or {}).get(acc), (ref.get("compute_s") or {}).get(acc)
            if not isinstance(mine, (int, float)):
                continue
            timed = isinstance(compute, (int, float))
            text = f"{name} samples of {_mb(mine)} MB" + (f" and {compute:.2f} s of compute per batch" if timed else "")
            ref_words = [f"{_mb(theirs)} MB" if isinstance(theirs, (int, float)) and theirs != mine else "",
                         f"{ref_compute:.2f} s on a {acc.upper()}" if timed and isinstance(ref_compute, (int, float))
                         and ref_compute != compute else ""]
            if any(ref_words):
                text += ", against MLPerf's " + " and ".join(x for x in ref_words if x)
            out.append(text)
    elif key == "vector_search" and isinstance(desc.get("num_vectors"), int):
        dim = f" of {desc['dimension']} dimensions" if isinstance(desc.get("dimension"), int) else ""
        out.append(f"vector search over {desc['num_vectors']:,} vectors{dim}")
    return out


def _mb(n: float) -> str:
    return f"{n / 1e6:.2f}" if n < 10e6 else f"{n / 1e6:,.1f}"


def page_one_rows(reports_dir: str | Path) -> list[dict]:
    """Every page-1 answer (question, target, answer, basis, optional short/note) with the study whose
    chapter prints it: the accelerators question once per workload and target (brief/accelerators.py)."""
    studies = inputs.readable(reports_dir)
    found_by = {s.key: _study_answers(s) for s in studies}
    by_key = {s.key: s for s in studies}
    acc = _value("the accelerators answer", accelerators.answers, by_key.get("emulate"),
                 by_key.get("transfer_sweep"), found_by.get("emulate")) \
        if set(ACCELERATOR_STUDIES) & set(by_key) else []
    home = next((k for k in ACCELERATOR_STUDIES if k in by_key), None)
    rows = [{**a, "study": home, "disturbed": quiet.cell_note(by_key[home].frame, str(a["target"]))}
            for a in acc]                               # the question a reader comes for, first
    for s in studies:
        for a in found_by[s.key]:
            if acc and s.key in ACCELERATOR_STUDIES and str(a["question"]).startswith(accelerators.REPLACES_PREFIX):
                continue
            # how many studies its range holds and where they came from: this one and the earlier ones of these
            # parameters (kit/history)
            before = max((history.earlier(s.dir, m, str(a["target"])) for m in a.get("measures") or {}),
                         key=len, default=history.Earlier())
            rows.append({**a, "study": s.key, "studies": 1 + len(before), "origins": before.origins(),
                         "disturbed": quiet.cell_note(s.frame, str(a["target"]))})
    return rows


def record_history(reports_dir: str | Path) -> int:
    """Record the values behind this brief's page-1 answers in the project's history (kit/history), so a later
    brief of the same parameters on this machine shows the range over both studies; rows added."""
    dirs = {s.key: s.dir for s in inputs.readable(reports_dir)}
    return history.record(reports_dir, page_one_rows(reports_dir), dirs)


def record_run(key: str, study_dir: str | Path) -> int:
    """At the end of a study's run (a notebook, the CLI, `dvc repro`): the values behind its page-1 answers in its
    project's history (kit/history; none outside a project), whether or not a brief is rendered; rows added."""
    s = inputs.read_study(key, study_dir)
    if not s.ok:
        return 0
    rows = [{**a, "study": key} for a in get_study(key).answers(s.dir, s.frame, s.names)]
    return history.record(Path(study_dir).parent, rows, {key: s.dir}, project_only=True)


@part("The answers")
def answers(reports_dir: str | Path) -> None:
    """Page 1's scorecard, from every readable study that has answers."""
    rows = page_one_rows(reports_dir)
    if not rows:
        return
    targets = [t["name"] for t in inputs.latest_inventory(reports_dir).get("targets", [])]
    chapters = {str(a["question"]): f"section-{a['study']}" for a in rows if a.get("study")}
    found = quotes.lines(rows, headline_inputs.snapshot_headlines(reports_dir)[0])
    page = fitted(rows, targets, chapters, _COVER[0] if _COVER else "", found)
    DEFINED[:] = [words for _, words in scorecard.GLOSSARY if html.escape(words) in page]
    USED[:] = scorecard.glossary_terms(html.unescape(re.sub(r"<[^>]+>", " ", page)))
    show_html(page)


def fitted(rows: list[dict], targets: list[str], chapters: dict[str, str], cover: str = "",
           found: list[str] | None = None) -> str:
    """Page 1 under `cover`: the findings to quote (brief/quotes.py), then the answers, as many footnotes as fit on
    one page (report/layout.page_one_pt): past that the other caveats share one footnote pointing to their
    chapters, which print every note in full. What gives way first: footnotes down to the not-settled ones (and one
    for the rest), then the terms' line (scorecard.GLOSSARY: the snapshot on page 2 defines them then), then the
    findings from the last, then the rest."""
    found = list(found or [])
    kept = [n for a in rows if scorecard.on_page_one(a) for n in scorecard.cell_notes(a)
            if n.startswith(scorecard.KEPT_FIRST)]
    least = min(scorecard.MAX_NOTES, len(set(kept)) + 1)       # why each answer is not settled, and one for the rest
    tries = [(g, q, n) for q in range(len(found), min(1, len(found)) - 1, -1) for g in (True, False)
             for n in range(scorecard.MAX_NOTES, least - 1, -1)]
    tries += [(False, 0, n) for n in range(least - 1, -1, -1)]
    for glossary, q, n in tries:
        text = (quotes.block(found[:q]) + '<h2 class="answers">The answers</h2>'
                + scorecard.table_html(rows, targets, chapters, n, glossary))
        if layout.page_one_pt(cover + text) <= layout.PAGE_ONE_PT:
            return text
    return text


ONE_RUN = "one run: no range"           # report/words.spread for an answer of one run


def chapter_answer(key: str, reports_dir: str | Path) -> None:
    """A chapter's page-1 answer in full, right under its headline (every number page 1 shows is here);
    its basis goes to the chapter's appendix (inside details_to)."""
    rows = [a for a in page_one_rows(reports_dir) if a.get("study") == key]
    for q in dict.fromkeys(str(a["question"]) for a in rows):
        mine = [a for a in rows if str(a["question"]) == q]
        notes = list(dict.fromkeys(n for a in mine for n in scorecard.cell_notes(a)))
        said = "; ".join(f"{a['target']}: {a['answer']}" for a in mine)
        if said.count(ONE_RUN) > 1:          # the caveat once, not once per target (issue 62: six in a paragraph)
            said = re.sub(r" \(" + ONE_RUN + r"\)", "", said)
            said = re.sub(r"; " + ONE_RUN + r"(?=[;)])", "", re.sub(r"\(" + ONE_RUN + r"; ", "(", said))
            notes.insert(0, "each figure is from one run, so it has no range")
        show_html(markdown_html(f"**{q}** " + said + "."
                                + "".join(f" Note: {n}." for n in notes)))     # the chapter's own, always shown
    if rows:
        show_table(pd.DataFrame([{"Question": a["question"], "Target": a["target"], "Answer": a["answer"],
                                  "Basis (what limited it, how measured)": a.get("basis", "")} for a in rows]),
                   "Page 1's answers of this study with their basis.")


def _study_answers(s) -> list[dict]:
    try:
        return get_study(s.key).answers(s.dir, s.frame, s.names)
    except Exception as exc:   # noqa: BLE001 - one study's arithmetic must not take the others' answers
        if not in_kernel():
            raise
        return [{"question": s.title, "target": "–", "answer": "could not be computed",
                 "basis": f"{type(exc).__name__}: {exc}"}]


def _value(what: str, fn, *args) -> list:
    """fn(*args), or [] with a note in a kernel when it raised (the studies' own rows then stand)."""
    try:
        return fn(*args)
    except Exception as exc:   # noqa: BLE001
        if not in_kernel():
            raise
        not_rendered(what, exc)
        return []
