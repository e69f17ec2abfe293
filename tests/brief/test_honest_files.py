"""Result files get the umask's mode; headlines of an unapplied profile say so; Appendix B says when the results
were not made with the brief's params file (issue 44: it printed the project's params.yaml as "the parameters that
ran").

(Split from tests/test_faults.py, issue 10/20: tests unchanged.)"""
from __future__ import annotations

import json
import os
import shutil

import pandas as pd
import yaml

from storagebrief.core import results
from storagebrief.brief import assemble
from storagebrief.brief import assemble as brief_mod
from kv_tiny import result  # noqa: F401  (a tiny kv_cache run, a fixture)


# --------------------------------------------------------------------------- honest files and brief
def test_result_files_get_the_umask_mode(tmp_path):
    old = os.umask(0o022)
    try:
        results.write_json(tmp_path / "x.json", {"a": 1})
    finally:
        os.umask(old)
    assert (tmp_path / "x.json").stat().st_mode & 0o777 == results.FILE_MODE == 0o666 & ~old


def test_headlines_of_an_unapplied_profile_say_so(tmp_path):
    d = tmp_path / "preprocess"
    d.mkdir()
    rows = [{"study": "preprocess", "run_id": f"r{i}", "target": t, "profile": prof, "emulated": False,
             "repeat": 1, "started_at": "x", "cache_method": "drop_caches", "sweep": "processes",
             "processes": 1, "image_count": 4, "input_mb_per_s": mb, "completion_time_s": 10 / mb,
             # the rest of the columns the preprocess section needs (the brief's gate checks them)
             "input_bytes": 10e6, "images_per_s": 0.4 * mb, "images_skipped": 0, "read_share_percent": 40.0,
             "decode_resize_share_percent": 35.0, "encode_write_share_percent": 25.0}
            for i, (t, prof, mb) in enumerate((("fast", "", 200.0), ("slow", "hdd_7200", 150.0)))]
    pd.DataFrame(rows).to_csv(d / "runs.csv", index=False)
    hs = brief_mod.all_headlines(tmp_path)
    assert hs and all(any("slow: profile hdd_7200 not applied" in c for c in h["caveats"]) for h in hs)
    assert brief_mod.unapplied_profiles(pd.DataFrame(rows)) == {
        "slow": "profile hdd_7200 not applied in none of its runs (they ran unthrottled)"}


# --------------------------------------------------------------------------- results made with other params (issue 44)
def test_appendix_b_says_when_the_results_were_made_with_other_params(result, tmp_path, monkeypatch):
    root = tmp_path / "proj"
    reports = root / "reports"
    shutil.copytree(result, reports / "kv_cache")
    (root / "t").mkdir(parents=True)
    (root / "params.yaml").write_text(yaml.safe_dump({"targets": [{"name": "a", "path": str(root / "t")}]}))
    from storagebrief.report import display
    shown = []
    monkeypatch.setattr(display, "show_html", shown.append)
    monkeypatch.setattr(assemble, "show_html", shown.append)
    assemble.appendix_procedure(reports, root / "params.yaml")
    text = "\n".join(shown)
    recorded = json.loads((reports / "kv_cache" / "inventory.json").read_text())["params_hash"]
    assert "were not made with" in text and recorded in text, text[:2000]
    assert "The parameters that ran" not in text
