"""Nothing a user names reaches the brief unescaped (issue 44, defect 5).

A shape named `<script>alert(1)</script>` appeared raw twice in brief.html: markdown (show_md) passed raw HTML
through. Now every string reaches the page through a door that escapes it (report/display.py: show_md renders
markdown with raw HTML escaped, tables and captions are escaped, the HTML the package builds puts values through
`esc`). Names are refused by `validate` where they become paths, but results written by hand or by an older
version, folder names and free-text knobs (target paths, accelerator names, failure reasons, notes) still reach
the brief: the brief here is rendered from results in which every such string is markup.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO, base_params
from storagebrief import studies
from storagebrief.core import config
from storagebrief.report import display
from storagebrief.studies import REGISTRY

import test_brief_faults as bf


def mark(knob: str) -> str:
    """A payload naming its knob: raw, it would open a <b>, run a script and load an image; no '/' in it except
    the closing tags', so it also fits a folder name where marked with mark_path."""
    return f'<b class="inj-{knob}">{knob}</b><script>inj("{knob}")</script><img src=x onerror=inj-{knob}>'


def mark_path(knob: str) -> str:
    return f"<img src=x onerror=inj-{knob}>"


def raw_markup(page: str) -> list[str]:
    """Every payload that survived as markup (escaped, each shows as text and matches none of these)."""
    return re.findall(r'<b class="inj-[^"]*"|<script>inj|<img src=x onerror=inj[^ >]*|href="javascript:[^"]*', page)


# ------------------------------------------------------------------------ the doors, one by one (fast)
def test_markdown_escapes_raw_html_and_harmful_links():
    out = display.markdown_html(f"**{mark('md')}** and [a link](javascript:inj) and `{mark('code')}`\n\n"
                                f"- {mark('bullet')}\n\n<div>{mark('block')}</div>\n")
    assert raw_markup(out) == [], out
    assert "<strong>" in out and "<li>" in out and "<code>" in out     # markdown itself still renders


def test_tables_and_captions_escape_every_cell(monkeypatch):
    shown = []
    monkeypatch.setattr(display, "show_html", shown.append)
    display.show_table(pd.DataFrame({mark("header"): [mark("cell")], "n": [1.0]}), mark("caption"), body=True)
    display.limits_box([mark("limit")])
    assert shown and raw_markup("".join(shown)) == [], shown


def test_no_study_builds_html_itself():
    """A study's text reaches the page through show_md / show_table / analysis / show_figure only (each escapes):
    a study that imports IPython's display or show_html could put a name in raw."""
    offenders = []
    for path in (REPO / "lib" / "storagebrief" / "studies").rglob("*.py"):
        text = path.read_text()
        if re.search(r"\bshow_html\b|IPython\.display|from IPython", text):
            offenders.append(str(path.relative_to(REPO)))
    assert offenders == []


# ------------------------------------------------------------------------ a whole brief, every named knob marked
KV_SECTION = {"run": ["w"], "workloads": {"w": {"model": "llama3.1-8b", "users_per_client": 2, "concurrency": 2}},
              "clients": 2, "contexts": [{"tokens": 16, "weight": 1}], "turns": [{"tokens": 3, "weight": 1}],
              "turn_tokens": 8, "duration_s": 0.3, "repeats": 1, "write_block_mib": 1, "prefill": {"measure": False}}
TARGETS = {"fast": mark("target_name_fast"), "slow": mark("target_name_slow")}


def _rename(value, table: dict[str, str]):
    """`value` (JSON-like) with every string and key found in `table` replaced."""
    if isinstance(value, dict):
        return {table.get(k, k): _rename(v, table) for k, v in value.items()}
    if isinstance(value, list):
        return [_rename(v, table) for v in value]
    return table.get(value, value) if isinstance(value, str) else value


def _kv_results(tmp: Path, dest: Path) -> None:
    """A real tiny kv_cache run on two targets, its results then renamed as if its target, workload, model and
    shape names were markup (results an older version let through), a failure reason and a note marked too."""
    (tmp / "kvt").mkdir()
    data = {"targets": [{"name": n, "path": str(tmp / "kvt" / n)} for n in TARGETS],
            "run": {"cold_cache": True, "trace": False}, "kv_cache": KV_SECTION}
    studies.get("kv_cache").run(config.validate(data, root=REPO), dest, log=lambda *_: None, progress="off")
    table = {**TARGETS, "w": mark("kv_workload"), "llama3.1-8b": mark("kv_model")}
    for name in ("runs.csv", "breakeven.csv", "latency.csv"):
        f = dest / name
        frame = pd.read_csv(f)
        for col in frame.columns:
            if not pd.api.types.is_numeric_dtype(frame[col]):
                frame[col] = frame[col].map(lambda v: table.get(v, v))
        if name == "runs.csv":       # one more run, failed, whose reason quotes a marked path
            extra = frame.iloc[[0]].assign(run_id="kv_cache-x-r9", status="failed",
                                           failure_reason=f"target full mid-run: {mark('failure_reason')}")
            frame = pd.concat([frame, extra], ignore_index=True)
        frame.to_csv(f, index=False)
    for name in ("study.json", "inventory.json"):
        f = dest / name
        f.write_text(json.dumps(_rename(json.loads(f.read_text()), table)))
    notes = json.loads((dest / "notes.json").read_text())
    notes["warnings"].append(f"a note naming {mark('note')}")
    (dest / "notes.json").write_text(json.dumps(notes))


def _inventory(tmp: Path) -> dict:
    inv = bf.inventory(tmp)
    inv["cpu_model"] = mark("cpu_model")
    inv["git_changed_files"] = [mark("changed_file")]
    inv["hosts"] = [{"name": mark(f"host{i}"), "roles": [mark("role")]} for i in (1, 2)]
    for t in inv["targets"]:
        t["name"] = TARGETS[t["name"]]
        t["path"] = str(tmp / "t" / mark_path("target_path"))
        t["device"]["model"] = mark("device_model")
        t["mount_options"] = mark("mount_options")
        if t["profile_name"]:
            t["profile_name"] = mark("profile_name")
        t["s3"] = {"kind": mark("s3_kind"), "endpoint": mark("s3_endpoint"), "bucket": mark("s3_bucket"),
                   "prefix": mark("s3_prefix")}
    return inv


def _study_rows(study: str) -> list[dict]:
    """brief_faults' rows of a study with every text column, target and failure reason marked."""
    rows = bf.study_rows(study)
    kinds = REGISTRY[study].room("metrics").RUNS_COLUMNS
    for i, r in enumerate(rows):
        for c, k in kinds.items():
            if k.startswith("text"):
                r[c] = mark(f"{study}_{c}")
        r["target"] = TARGETS[r["target"]]
        if i == len(rows) - 1:
            r.update(status="failed", failure_reason=mark(f"{study}_failure_reason"))
    return rows


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> tuple[str, Path]:
    tmp = tmp_path_factory.mktemp("escaping")
    root = bf.make_project(tmp)
    params = yaml.safe_load((root / "params.yaml").read_text())
    marked_dir = tmp / "t" / mark_path("params_target_path")       # a folder name may be markup
    marked_dir.mkdir(parents=True)
    params["targets"][1]["path"] = str(marked_dir)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    reports = root / "reports"
    shutil.rmtree(reports)
    for study in REGISTRY:
        if study == "kv_cache":
            _kv_results(tmp, reports / study)
            continue
        rows = {"preprocess": bf.preprocess_rows, "stream_inference": bf.stream_rows}.get(study)
        rows = rows() if rows else _study_rows(study)
        for r in rows:
            r["target"] = TARGETS.get(r["target"], r["target"])
            if study == "stream_inference":
                r["video"] = mark("video")
        d = bf.write_study(reports, study, rows, tmp)
        (d / "notes.json").write_text(json.dumps({"warnings": [mark(f"{study}_note")]}))
    for inv in reports.glob("*/inventory.json"):
        data = json.loads(inv.read_text())
        if inv.parent.name == "kv_cache":
            data.update({k: v for k, v in _inventory(tmp).items() if k != "targets"})
            for t in data["targets"]:
                t["path"] = str(tmp / "t" / mark_path("target_path"))
        else:
            data = _inventory(tmp)
        inv.write_text(json.dumps(data))
    text, _ = bf.brief(root)
    return text, root


@pytest.mark.e2e
def test_a_brief_whose_every_named_knob_is_markup_shows_it_as_text(page):
    text, _ = page
    assert raw_markup(text) == []
    # the payloads are there, as text: the brief shows the names, it does not drop them
    for knob in ("target_name_fast", "kv_workload", "kv_model", "failure_reason", "note", "cpu_model", "video",
                 "profile_name", "device_model", "s3_endpoint"):
        assert f"inj-{knob}" in text, knob
    assert "inj-target_path" in text


@pytest.mark.e2e
def test_the_kv_section_with_marked_names_renders_whole(page):
    """The KV section (the defect's own case) renders its tables and break-even, not a 'could not be rendered'."""
    text, _ = page
    kv = bf.chapter(text, "kv_cache")
    assert "could not be rendered" not in kv, kv[kv.find("could not be rendered") - 1500:][:2000]
    assert "<img" in kv and "Reload or recompute" in kv and "What failed" in kv   # its tables: its appendix
