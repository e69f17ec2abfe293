"""The brief renders whatever it finds (issue 20): a study whose files cannot be used gets "could not be
read: <why>" in its section and every other part renders; a sweep cut short says so; `storagebrief brief`
writes nothing into targets and works from any directory.

Every brief here is rendered from a tiny project built by hand (params.yaml, dvc.yaml, reports/ with a good
preprocess and a good stream_inference study) through the CLI without the PDF. The unreadable-file faults,
the sweep cut short and the deleted target share two renders (`shared`: each fault in its own study's
folder, each test reading its own section); a test that needs its own project or its own command line
(another directory, --params, every inventory bad, a real checkpoint run) renders its own.
"""
from __future__ import annotations

import gzip
import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import base_params
from storagebrief.studies import REGISTRY

from conftest import REPO  # noqa: E402
TARGETS = ("fast", "slow")
GOOD = ("preprocess", "stream_inference")     # every project here holds their results
# Every test here renders a whole brief (papermill, nbconvert): end to end.
pytestmark = pytest.mark.e2e

TITLES = {k: study.title for k, study in REGISTRY.items()}


def _common(study: str, i: int, target: str, repeat: int) -> dict:
    return {"study": study, "run_id": f"{study}-{i}", "target": target, "profile": "" if target == "fast" else "hdd_7200",
            "emulated": target == "slow", "repeat": repeat, "started_at": "2025-01-01T00:00:00+00:00",
            "cache_method": "drop_caches"}


def preprocess_rows() -> list[dict]:
    rows = []
    for repeat in (1, 2):
        for t, speed in zip(TARGETS, (200.0, 120.0)):
            for sweep, procs, count in (("processes", 1, 6), ("processes", 2, 6), ("image_count", 2, 3)):
                mb = speed * procs * (1 + 0.01 * repeat)
                nbytes = count * 1_000_000
                rows.append({**_common("preprocess", len(rows), t, repeat), "sweep": sweep, "processes": procs,
                             "image_count": count, "output_mode": "per_process", "images_ok": count,
                             "images_skipped": 0, "input_bytes": nbytes, "completion_time_s": nbytes / mb / 1e6,
                             "input_mb_per_s": mb, "images_per_s": count / (nbytes / mb / 1e6),
                             "read_share_percent": 40.0, "decode_resize_share_percent": 35.0,
                             "encode_write_share_percent": 25.0})
    return rows


def stream_rows() -> list[dict]:
    rows = []
    for t, lat in zip(TARGETS, (80.0, 140.0)):
        for streams in (1, 2):
            rows.append({**_common("stream_inference", len(rows), t, 1), "sweep": "streams", "status": "ok",
                         "streams": streams, "video": "144p@12", "topics": 1, "partitions": 2, "replication_factor": 3,
                         "brokers": 3, "kafka": "started", "flush_messages": 1, "acks": "all", "jpeg_quality": 90,
                         "duration_s": 2.0, "consumers": 1, "input_size": 32, "batch_size": 8, "tf_device": "CPU",
                         "frames_produced": 24 * streams, "frames_classified": 24 * streams, "frames_dropped": 0,
                         "fps_achieved_min": 12.0, "streams_below_fps": 0, "produce_mb_per_s": 0.5 * streams,
                         "classified_frames_per_s": 12.0 * streams, "consumer_lag_frames_max": 3,
                         "latency_ms_p50": lat / 2, "latency_ms_p99": lat * streams, "device_iops_avg": 300.0 / streams,
                         "device_mib_per_s_avg": 4.0, "device_avg_read_kib": 0.0, "device_avg_write_kib": 16.0,
                         "device_response_time_us": lat * 10, "device_read_percent": 0.0,
                         "write_amplification": 1.2, "log_overhead_ratio": 1.1, "cpu_user_percent": 50.0,
                         "cpu_system_percent": 10.0, "cpu_iowait_percent": 1.0})
    return rows


def inventory(tmp: Path) -> dict:
    return {"cpu_model": "Test CPU", "cpu_sockets": 1, "cpu_cores_physical": 2, "cpu_threads": 2,
            "memory_total_bytes": 4 << 30, "os": "Debian", "kernel": "6.1", "python": "3.11",
            "packages": {"pandas": "3"}, "git_commit": "abc", "params_hash": "123", "privileges": {"root": "yes"},
            "targets": [{"name": t, "path": str(tmp / "t" / "gone" / t) if t == "fast" else str(tmp / "t" / t),
                         "device": {"name": "vda", "model": "virtio", "rotational": False},
                         "profile": None if t == "fast" else {"read_mb_per_s": 150},
                         "profile_name": None if t == "fast" else "hdd_7200",
                         "filesystem": "ext4", "mount_options": "rw"} for t in TARGETS]}


def write_study(reports: Path, study: str, rows: list[dict], tmp: Path) -> Path:
    d = reports / study
    d.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(d / "runs.csv", index=False)
    (d / "inventory.json").write_text(json.dumps(inventory(tmp)))
    (d / "notes.json").write_text(json.dumps({"warnings": []}))
    (d / "metrics.json").write_text(json.dumps({"runs": len(rows)}))
    return d


def make_project(tmp_path: Path) -> Path:
    """A project folder: params.yaml (target 'fast' under t/gone/, 'slow' under t/), dvc.yaml, the brief
    notebook, and reports/ with two good studies (preprocess, stream_inference)."""
    root = tmp_path / "proj"
    (root / "notebooks").mkdir(parents=True)
    shutil.copy2(REPO / "notebooks" / "brief.py", root / "notebooks")
    params = base_params(tmp_path)
    params["targets"][0]["path"] = str(tmp_path / "t" / "gone" / "fast")
    params["targets"][1]["path"] = str(tmp_path / "t" / "slow")
    for t in params["targets"]:
        Path(t["path"]).mkdir(parents=True)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (root / "dvc.yaml").write_text("stages: {}\n")
    reports = root / "reports"
    write_study(reports, "preprocess", preprocess_rows(), tmp_path)
    write_study(reports, "stream_inference", stream_rows(), tmp_path)
    return root


@pytest.fixture
def project(tmp_path):
    return make_project(tmp_path)


def brief(cwd: Path, *args: str) -> tuple[str, subprocess.CompletedProcess]:
    """`storagebrief brief --no-pdf` in cwd; returns the HTML it wrote (asserting it did) and the process."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "lib") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    res = subprocess.run([sys.executable, "-m", "storagebrief.cli", "brief", "--no-pdf", *args], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    path = re.search(r"wrote (\S+brief\.html)", res.stdout)
    assert path, res.stdout + res.stderr
    html_path = Path(path.group(1))
    if not html_path.is_absolute():
        html_path = cwd / html_path
    return html_path.read_text(), res


def sections(page: str) -> dict[str, str]:
    """Heading text -> the HTML up to the next heading of a section."""
    parts = re.split(r"<h2[^>]*>", page)
    out = {}
    for part in parts[1:]:
        title = html.unescape(re.sub(r"<[^>]+>", "", part.split("</h2>", 1)[0])).strip().rstrip("¶").strip()
        out[title] = part
    return out


def chapter(page: str, key: str) -> str:
    """A study's chapter and its appendix (issue 49: a chapter keeps one key figure, one key table and its first
    paragraph; the rest of its section follows in its appendix)."""
    own = re.search(rf'<h2[^>]*id="appendix-{key}".*?(?=<h2|$)', page, re.S)
    return sections(page)[REGISTRY[key].title] + (own.group(0) if own else "")


def assert_brief(page: str, bad: str | None = None, why: str | None = None, good: tuple[str, ...] = GOOD) -> None:
    """Every part of the brief is there; the bad study's section says it could not be read and why; the
    good studies rendered their own content (a figure in the section, its tables in the section's
    appendix, linked from it) and have snapshot cards."""
    s = sections(page)
    for heading in ("Test results snapshot", "Appendix A — System configuration",
                    "Appendix B — Test procedure and parameters"):
        assert heading in s, (heading, list(s))
    assert any(h.startswith("Appendix ") and h.endswith("Block-level I/O characterization") for h in s), list(s)
    assert "Storage performance brief" in page and "could not be rendered" not in page
    for study, title in TITLES.items():
        if study == bad:
            assert "could not be read" in s[title], s[title][:2000]
            text = html.unescape(re.sub(r"<[^>]+>", "", s[title]))
            assert why in text and "brief:" not in text, (why, text[:2000])     # once, no terminal noise
            assert "<table" not in s[title] and f'href="#appendix-{study}"' not in s[title]
            assert not [c for c in re.findall(r'<div class="card"[^>]*>', page) if f'data-study="{study}"' in c]
        elif study in good:
            assert "could not be read" not in s[title] and "<img" in s[title], title
            details = [t for t in s if t.startswith("Appendix ") and t.endswith(f"{title.split(':')[0]}: details")]
            assert details and "<table" in s[details[0]] and f'href="#appendix-{study}"' in s[title], (title, list(s))
            assert f'data-study="{study}"' in s["Test results snapshot"], study


# --------------------------------------------------------------------------- unreadable files
# Each fault goes into its own study's folder (a study holds one fault per render), and the faults of
# a render share one brief: each test reads its fault's section in the shared render, as
# strictly as when every fault had a brief of its own (the reason, no table, no card, no appendix link),
# and the good studies still render. Two renders instead of thirteen (with the two tests below).
def study_rows(study: str) -> list[dict]:
    """Four runs the study's gate accepts: the engine's columns and every column its metrics room
    declares (numbers where it declares numbers), so that the fault planted is the only reason."""
    kinds = REGISTRY[study].room("metrics").RUNS_COLUMNS
    rows = []
    for t in TARGETS:
        for repeat in (1, 2):
            row = _common(study, len(rows), t, repeat)
            rows.append({**{c: "x" if k.startswith("text") else float(len(rows) + 1) for c, k in kinds.items()},
                         **row})
    return rows


def _write_runs(d: Path, rows: list[dict], encoding: str = "utf-8") -> None:
    pd.DataFrame(rows).to_csv(d / "runs.csv", index=False, encoding=encoding)


def empty_runs_csv(d: Path) -> str:
    (d / "runs.csv").write_bytes(b"")
    return "runs.csv is empty"


def binary_runs_csv(d: Path) -> str:
    (d / "runs.csv").write_bytes(gzip.compress(pd.DataFrame(preprocess_rows()).to_csv().encode()))
    return "runs.csv is binary, not text"


def runs_csv_not_utf8(d: Path) -> str:
    rows = study_rows(d.name)
    rows[1]["run_id"] += " café"
    _write_runs(d, rows, encoding="latin-1")
    return "runs.csv is not UTF-8 text (byte 0xe9"


def runs_csv_text_where_numbers_belong(d: Path) -> str:
    rows = study_rows(d.name)
    rows[1]["latency_ms_p99"] = "fast"
    _write_runs(d, rows)
    return "column latency_ms_p99 holds text where numbers belong (1 value(s), e.g. 'fast' on line 3)"


def runs_csv_missing_columns(d: Path) -> str:
    _write_runs(d, [{k: v for k, v in r.items() if k not in ("latency_ms_p99", "cache_method")}
                    for r in study_rows(d.name)])
    return "runs.csv lacks column(s) cache_method, latency_ms_p99"


def runs_csv_cut_fewer_fields(d: Path) -> str:
    """The writer died after a few fields of the last row (and a newline)."""
    text = (d / "runs.csv").read_text()
    last = text.rstrip("\n").rsplit("\n", 1)[1]
    text = text[: len(text) - len(last) - 1] + ",".join(last.split(",")[:5]) + "\n"
    (d / "runs.csv").write_text(text)
    return f"runs.csv was cut mid-row: line {text.count(chr(10))} has 5 of {len(last.split(','))} fields"


def runs_csv_cut_no_newline(d: Path) -> str:
    """Cut inside its last value: every field is there, one number is short."""
    (d / "runs.csv").write_text((d / "runs.csv").read_text().rstrip("\n")[:-2])
    return "runs.csv was cut mid-row (its last line has no newline)"


def corrupt_metrics_json(d: Path) -> str:
    (d / "metrics.json").write_text('{"runs": 4, "headl')
    return "metrics.json is not valid JSON (line 1, column 13: Unterminated string"


def corrupt_notes_json_and_inventory(d: Path) -> str:
    (d / "notes.json").write_text('["not", "an object"]')
    (d / "inventory.json").write_bytes(b"\x00\x01")
    return "inventory.json is binary, not text"      # the first bad file read names the reason


def runs_without_a_target(d: Path) -> str:
    rows = study_rows(d.name)
    rows[2]["target"] = None
    _write_runs(d, rows)
    return "runs.csv line 4 has no target"


# fault -> (render, the study whose folder holds it); a study holds at most one fault per render.
# object_sweep declares latency_ms_p99 a number and emulate reads inventory.json before notes.json, as
# stream_inference does. In render B stream_inference is one of the bad (a good study's own section seen
# unreadable too) and preprocess the one good.
FAULTS = {
    empty_runs_csv: ("A", "emulate"), binary_runs_csv: ("A", "train_resnet50"),
    runs_csv_not_utf8: ("A", "transfer_sweep"), runs_csv_cut_fewer_fields: ("A", "checkpoint"),
    corrupt_metrics_json: ("A", "kv_cache"), runs_csv_text_where_numbers_belong: ("A", "object_sweep"),
    runs_csv_cut_no_newline: ("B", "train_resnet50"), corrupt_notes_json_and_inventory: ("B", "emulate"),
    runs_without_a_target: ("B", "transfer_sweep"), runs_csv_missing_columns: ("B", "stream_inference"),
}
RENDER_GOOD = {"A": GOOD, "B": ("preprocess",)}


def _cut_short_and_remove_a_target(root: Path, tmp: Path) -> dict:
    """Render A: preprocess's sweep was stopped half way, stream_inference's finished
    (test_status_incomplete_says_cut_short); target 'fast' and its parent are deleted before the brief
    (test_deleted_target_is_not_touched)."""
    (root / "reports" / "preprocess" / "status.json").write_text(json.dumps({
        "complete": False, "runs_planned": 24, "runs_done": 12, "started_at": "2025-01-01T00:00:00+00:00",
        "finished_at": None, "stopped_by": "SIGTERM"}))
    (root / "reports" / "stream_inference" / "status.json").write_text(json.dumps({
        "complete": True, "runs_planned": 4, "runs_done": 4, "started_at": "2025-01-01T00:00:00+00:00",
        "finished_at": "2025-01-01T00:10:00+00:00", "stopped_by": None}))
    shutil.rmtree(tmp / "t" / "gone")
    return {"tmp": tmp, "slow_mtime_ns": (tmp / "t" / "slow").stat().st_mtime_ns}


RENDER_SETUP = {"A": _cut_short_and_remove_a_target, "B": lambda root, tmp: {}}


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """render name -> (page, process, why by fault, what its set-up noted): the render's project is
    built, its faults planted and the brief rendered on first use, so one test renders only its own."""
    done: dict[str, tuple | Exception] = {}

    def render(name: str) -> tuple:
        if name not in done:
            try:
                tmp = tmp_path_factory.mktemp(f"faults-{name}")
                root = make_project(tmp)
                why = {plant: plant(write_study(root / "reports", study, study_rows(study), tmp))
                       for plant, (r, study) in FAULTS.items() if r == name}
                noted = RENDER_SETUP[name](root, tmp)
                done[name] = (*brief(root), why, noted)
            except Exception as exc:       # every test of a render that failed fails at once, not again
                done[name] = exc
        if isinstance(done[name], Exception):
            raise done[name]
        return done[name]

    return render


def assert_fault(shared, plant) -> tuple[str, subprocess.CompletedProcess]:
    """The fault's study says it could not be read and why; every other part of its render is there."""
    name, study = FAULTS[plant]
    page, res, why, _ = shared(name)
    assert_brief(page, study, why[plant], good=RENDER_GOOD[name])
    return page, res


def test_empty_runs_csv(shared):
    _, res = assert_fault(shared, empty_runs_csv)
    assert "could not be read: runs.csv is empty" in res.stderr     # said on the terminal too


def test_binary_runs_csv(shared):
    assert_fault(shared, binary_runs_csv)


def test_runs_csv_not_utf8(shared):
    assert_fault(shared, runs_csv_not_utf8)


def test_runs_csv_text_where_numbers_belong(shared):
    assert_fault(shared, runs_csv_text_where_numbers_belong)


def test_runs_csv_missing_columns(shared):
    assert_fault(shared, runs_csv_missing_columns)


@pytest.mark.parametrize("cut", [runs_csv_cut_fewer_fields, runs_csv_cut_no_newline], ids=["fewer fields", "no newline"])
def test_runs_csv_cut_mid_row(shared, cut):
    assert_fault(shared, cut)


def test_corrupt_metrics_json(shared):
    assert_fault(shared, corrupt_metrics_json)


def test_corrupt_notes_json_and_inventory(shared):
    page, _ = assert_fault(shared, corrupt_notes_json_and_inventory)
    assert "Test CPU" in sections(page)["Appendix A — System configuration"]   # another study's inventory


def test_runs_without_a_target(shared):
    assert_fault(shared, runs_without_a_target)


def test_an_error_in_one_part_is_a_note_not_a_lost_brief(project):
    # Inputs the checks pass but a part cannot use: every inventory lacks the machine's description.
    for d in (project / "reports").iterdir():
        (d / "inventory.json").write_text(json.dumps({"targets": inventory(project.parent)["targets"]}))
    page, res = brief(project)
    s = sections(page)
    assert "<b>Appendix A could not be rendered</b>: KeyError: 'memory_total_bytes'" in page
    assert "Appendix A could not be rendered" in res.stderr            # said on the terminal too
    for title in (TITLES["preprocess"], TITLES["stream_inference"], "Appendix B — Test procedure and parameters"):
        assert "<img" in s[title] or "<pre" in s[title], title           # a section's tables are in its appendix
    assert "<table" in s["Appendix D — Preprocessing ingest: details"]


# --------------------------------------------------------------------------- a sweep cut short
def test_status_incomplete_says_cut_short(shared):
    page = shared("A")[0]      # preprocess: 12 of 24 runs, stopped by SIGTERM; stream_inference: complete
    assert_brief(page)
    s = sections(page)
    note = "This sweep was cut short: 12 of 24 runs (stopped by SIGTERM); figures cover only those runs."
    body = s[TITLES["preprocess"]]
    assert note in body and body.index(note) < body.index("<img")       # the section starts with it
    assert "cut short" not in s[TITLES["stream_inference"]]                  # complete: nothing said
    assert "sweep cut short: 12 of 24 runs" in s["Test results snapshot"]   # on its cards too


# --------------------------------------------------------------------------- targets and directories
def test_deleted_target_is_not_touched(shared):
    page, _, _, noted = shared("A")      # target 'fast' and its parent were deleted before the brief
    tmp = noted["tmp"]
    assert_brief(page)
    assert not (tmp / "t" / "gone").exists()    # nothing created where the old target was
    assert (tmp / "t" / "slow").stat().st_mtime_ns == noted["slow_mtime_ns"]   # no probe file in the live one
    assert str(tmp / "t" / "gone" / "fast") in sections(page)["Appendix A — System configuration"]


def test_brief_from_a_subdirectory(project):
    page, res = brief(project / "notebooks")
    assert_brief(page)
    assert Path(re.search(r"wrote (\S+)", res.stdout).group(1)) == project / "reports" / "brief.html"


def test_brief_from_elsewhere_with_params(project):
    page, res = brief(Path("/tmp"), "--params", str(project / "params.yaml"))
    assert_brief(page)
    assert Path(re.search(r"wrote (\S+)", res.stdout).group(1)) == project / "reports" / "brief.html"



# --------------------------------------------------------------------------- checkpoint, sweeps off (issue 36)
@pytest.mark.slow
def test_a_checkpoint_result_with_the_framework_and_cost_sweeps_off_renders(project):
    """The checkpoint model's default (no TensorFlow scenarios) and no cost sweep: before, the section was
    "could not be rendered: AttributeError: ... 'framework_scenario' ... a bug"."""
    from storagebrief.core import config
    ck = REGISTRY["checkpoint"]
    small = {"models": ["llama3-8b"], "scale": 65536, "saves": 1, "restores": 1, "pause_s": 0.0, "retain": 1,
             "write_block_mib": 1, "read_block_mib": 1, "readers_per_rank": 1, "repeats": 1, "cost": {"modes": []}}
    params = config.load(project / "params.yaml", changes={"checkpoint": small, "run": {"trace": False}})
    ck.run(params, project / "reports" / "checkpoint", log=lambda *_: None, progress="off")
    page, _ = brief(project)
    assert_brief(page)
    text = html.unescape(re.sub(r"<[^>]+>", "", chapter(page, "checkpoint")))
    assert "the framework sweep did not run" in text and "checkpoint.cost off" in text
