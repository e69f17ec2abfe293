"""The performance brief's sections: cover, snapshot, one section per study, appendices.

The brief is a notebook (notebooks/brief.py, Jupytext) executed by papermill; every cell
calls into this module, which reads the studies' output directories. Studies come
from the registry (storagebrief.studies): each contributes its title, headlines()
and its own section; this module adds what every brief shares.
"""
from __future__ import annotations

import html
import json
from pathlib import Path

import pandas as pd

from ..core import config as config_mod, results
from ..studies import REGISTRY, get as get_study
from .display import limits_box, show_html, show_md, show_table


def available(reports_dir: str | Path) -> list[tuple[str, str, Path]]:
    """(study name, title, output directory) of every registered study that has results."""
    out = []
    for study in REGISTRY.values():
        d = Path(reports_dir) / study.name
        if (d / "runs.csv").exists():
            out.append((study.name, study.title, d))
    return out


def target_order(study_dir: Path, frame: pd.DataFrame) -> list[str]:
    """Targets in params order (the first is the reference), from the run's inventory."""
    inv = study_dir / "inventory.json"
    if inv.exists():
        names = [t["name"] for t in json.loads(inv.read_text()).get("targets", [])]
        names = [n for n in names if n in set(frame.target)]
        if names:
            return names
    return list(dict.fromkeys(frame.target))


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


def _caveats(frame: pd.DataFrame, h: dict) -> list[str]:
    """What a headline's numbers do not show: an emulated profile or a cold cache that was not applied."""
    out = [f"{t}: {why}" for t, why in unapplied_profiles(frame).items() if t in (h["ref"], h["other"])]
    methods = fallback_cache_methods(frame)
    if methods:
        out.append(f"cold cache by {', '.join(methods)}, not drop_caches")
    return out


def all_headlines(reports_dir: str | Path) -> list[dict]:
    out = []
    for key, title, d in available(reports_dir):
        frame = results.read_runs(d / "runs.csv")
        for h in get_study(key).headlines(frame, target_order(d, frame)):
            out.append({**h, "study": key, "study_title": title, "caveats": _caveats(frame, h)})
    return out


def _all_unapplied(reports_dir) -> dict[str, str]:
    out: dict[str, str] = {}
    for _, _, d in available(reports_dir):
        for t, why in unapplied_profiles(results.read_runs(d / "runs.csv")).items():
            out.setdefault(t, why)
    return out


def title_block(reports_dir: str | Path, params_file: str | Path) -> None:
    params = config_mod.load(params_file)
    studies = [t for _, t, _ in available(reports_dir)]
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


def snapshot(reports_dir: str | Path) -> None:
    hs = all_headlines(reports_dir)
    if not hs:
        show_md("No study results yet: run `dvc repro` or `storagebrief <study>` first.")
        return
    groups: dict[str, list[str]] = {}
    for h in hs:
        word = h.get("hint") or ("higher is better" if h["better"] == "higher" else "lower is better")
        groups.setdefault(h["study_title"], []).append(
            f'<div class="card" data-study="{h["study"]}" data-headline="{html.escape(h["id"])}" '
            f'data-value="{h["delta_percent"]}">'
            f'<div class="card-label">{html.escape(h["label"])}<br/><span class="hint">({word})</span></div>'
            f'<div class="card-value">{html.escape(h["text"])}</div>'
            f'<div class="card-pair">{html.escape(h["ref"])} vs {html.escape(h["other"])}</div>'
            + "".join(f'<div class="card-caveat">⚠ {html.escape(c)}</div>' for c in h.get("caveats", []))
            + '</div>')
    body = "".join(f'<h3 class="snap-study">{html.escape(title)}</h3><div class="cards">{"".join(cards)}</div>'
                   for title, cards in groups.items())
    show_html('<h2>Test results snapshot</h2><p>Reference target compared with each other target (for '
              'training, also each memory limit with no limit on the same target); "up to" is the largest '
              'difference over the configurations both ran (means over repeats).</p>' + body)


def study_section(key: str, study_dir: str | Path) -> None:
    """A study's brief section from its output directory (also used by its notebook)."""
    study = get_study(key)
    d = Path(study_dir)
    show_html(f'<h2 class="section">{html.escape(study.title)}</h2>')
    frame = results.read_runs(d / "runs.csv")
    study.brief_section(d, frame, target_order(d, frame))
    notes = d / "notes.json"
    warnings = json.loads(notes.read_text()).get("warnings", []) if notes.exists() else []
    methods = fallback_cache_methods(frame)
    if methods:
        warnings.append(f"cold cache by {', '.join(methods)} instead of drop_caches (needs root): files the "
                        "run reads were evicted, other cached data (metadata, libraries) was not")
    limits_box(warnings)


def block_characterization(reports_dir: str | Path) -> None:
    """The block-level I/O characterization of every study (report/characterization.py)."""
    from . import characterization as chz
    chz.section(reports_dir, available(reports_dir), target_order)


def _latest_inventory(reports_dir) -> dict:
    found = sorted(Path(reports_dir).glob("*/inventory.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(found[-1].read_text()) if found else {}


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
        trows.append({"Target": t["name"], "Path": t["path"],
                      "Device": f'{dev.get("name")} ({dev.get("model")})' if dev.get("name") else dev.get("reason", "?"),
                      "Rotational": dev.get("rotational"), "Interface": dev.get("interface"),
                      "Filesystem": t["filesystem"], "Mount options": t["mount_options"],
                      "Emulated profile": (t.get("profile_name") or "–") + (f": {caps}" if prof else "")})
    show_table(pd.DataFrame(trows), "Storage targets. Emulated profiles cap the device with cgroup blkio throttling.")
    pk = inv.get("packages", {})
    items = sorted(pk.items())
    half = (len(items) + 1) // 2     # two column pairs: half the height, no page of its own
    pairs = [(*items[i], *(items[i + half] if i + half < len(items) else ("", ""))) for i in range(half)]
    show_table(pd.DataFrame(pairs, columns=["Package", "Version", "Package ", "Version "]), "Software versions")


def appendix_procedure(reports_dir: str | Path, params_file: str | Path) -> None:
    import yaml
    params = config_mod.load(params_file)
    show_html('<h2 class="appendix">Appendix B — Test procedure and parameters</h2>')
    show_md(
        "Each study ran from `params.yaml` through its DVC stage (papermill executes the numbered "
        "notebook, which calls `storagebrief`). Before every measured run the page cache was made cold "
        "(the method is the `cache_method` column of runs.csv); device counters and CPU were sampled "
        f"every {params.run.monitor_interval_s} s while the run was in flight. Runs repeat and "
        "interleave targets so drift affects all targets alike. The parameters that ran:")
    text = yaml.safe_dump(config_mod.raw_params(params), sort_keys=False)
    show_html(f"<pre class='params'>{html.escape(text)}</pre>")
