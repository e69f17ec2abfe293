"""Result files get the umask's mode; headlines of an unapplied profile say so.

(Split from tests/test_faults.py, issue 10/20: tests unchanged.)"""
from __future__ import annotations

import os

import pandas as pd

from storagebrief.core import results
from storagebrief.brief import assemble as brief_mod


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
