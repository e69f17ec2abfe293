"""The page-cache cap and the readers' own memory (emulate/memory.py): a count whose reads do not fit the cap is
never run (a fixed list naming it is refused, a search stops below it), and a capped run whose cache thrashed is
client-limited, not storage-limited. The quick profile's 32 MiB cap took 12 accelerators to 2.6 device bytes per
loader byte (AU 43 %, labelled 'storage'), and 32 of them thrashed for minutes until the OOM killer ended the study."""
from __future__ import annotations

import pandas as pd
import pytest

from storagebrief.core import config
from storagebrief.studies.emulate import brief, limits, memory, plan as emulate_plan
from storagebrief.studies.emulate.search import Search
from test_emulate import params_dict
from test_emulate_search import drive, fake_au

QUICK = {  # the quick profile's unet3d under its 32 MiB cap
    "workloads": ["unet3d"], "accelerator_type": "v100",
    "workload_overrides": {"unet3d": {"record_bytes": 500000, "record_bytes_stdev": 233000, "compute_s": {"v100": 0.04}}},
    "num_files": 336, "dataset_sizing": "memory_cap", "memory_limit_mib": 32, "repeats": 1,
}


def test_the_quick_profiles_cap_holds_eight_accelerators_reads():
    """4 read threads × a 0.5 MB sample in flight + 0.5 MiB own each: 8 need 19 MiB (0.98 device byte per loader
    byte in 6 runs), 10 need 24 MiB (thrashed in 1 run of 4): 65 % of 32 MiB holds 8."""
    assert memory.read_bytes(1 << 20, 500000) == 503808
    assert memory.max_accelerators(32 << 20, 4, 1 << 20, 500000) == 8
    assert memory.need_bytes(8, 4, 1 << 20, 500000) <= 0.65 * (32 << 20) < memory.need_bytes(9, 4, 1 << 20, 500000)
    assert memory.read_bytes(64 << 10, 500000) == 64 << 10          # a block smaller than a sample: the block


def test_a_fixed_list_past_the_cap_is_refused_before_work(tmp_path):
    with pytest.raises(config.ParamsError, match=r"emulate\.accelerators = \[4, 16\]: workload 'unet3d': 16 accelerators need "
                                                 r"16 × \(4 read threads × 0.48 MiB in flight \+ 0.5 MiB own\) = "
                                                 r"39 MiB, over 65% of the 32 MiB page-cache cap.*at most 8 fit; "
                                                 r"use counts up to 8"):
        config.validate(params_dict(tmp_path, {**QUICK, "accelerators": [4, 16]}))
    assert not (tmp_path / "fast").exists()
    config.validate(params_dict(tmp_path, {**QUICK, "accelerators": [4, 8]}))         # fits
    config.validate(params_dict(tmp_path, {**QUICK, "accelerators": [16], "odirect": True}))   # no cache, no cap
    config.validate(params_dict(tmp_path, {**QUICK, "accelerators": [16], "memory_limit_mib": 64,
                                           "num_files": 700}))


def test_a_cap_that_holds_no_accelerator_names_memory_limit_mib(tmp_path):
    section = {**QUICK, "accelerators": "auto", "read_threads": 16, "memory_limit_mib": 16, "num_files": 4000,
               "workload_overrides": {"unet3d": {"record_bytes": 4 << 20, "record_bytes_stdev": 0,
                                                 "compute_s": {"v100": 0.04}}}}
    with pytest.raises(config.ParamsError, match=r"emulate\.memory_limit_mib = 16: workload 'unet3d': 1 accelerators need .* at most "
                                                 r"0 fit; raise memory_limit_mib"):
        config.validate(params_dict(tmp_path, section))


def test_a_search_on_a_directory_stops_at_the_caps_count_and_says_so(tmp_path):
    p = config.validate(params_dict(tmp_path, {**QUICK, "accelerators": "auto"})).section("emulate")
    assert p.search_cap("unet3d", None) == (8, "memory")
    assert p.search_cap("unet3d", type("S3Target", (), {"s3": object()})()) == (64, "cap")   # S3: the gateway reads
    sp = emulate_plan.SearchPlan(p, ["local"])
    s = sp.searches[("unet3d", "local")]
    rows = drive(s, fake_au(100))
    for r in rows:
        r["search_max_by"] = "memory"
    out = s.outcome()
    assert [r["accelerators"] for r in rows] == [1, 2, 4, 8]
    assert (out.answer, out.limited_by) == (8, "memory")
    assert out.text == "≥ 8 (more accelerators' data would not fit the memory this run allows for caching)"
    sup = limits.supported(pd.DataFrame(rows)).iloc[0]              # the rows alone say the same
    assert (sup.accelerators_supported, sup.supported_limited_by, sup.accelerators_supported_text) == (
        8, "memory", out.text)
    frame = pd.DataFrame(rows)
    assert brief.answers(None, frame, ["t"])[0]["answer"] == out.text
    assert "or fewer where the page-cache cap holds fewer accelerators' reads (t: 8)" in brief._memory_caps(frame)
    plain = Search(90.0, repeats=1, budget_s=1e9, cap=16)          # search_max alone: 'cap', as before
    drive(plain, fake_au(100))
    assert plain.outcome().limited_by == "cap"


BUSY = {"au_percent": 43.4, "measured_time_s": 1.5, "device_util_percent_avg": 91.0, "device_read_latency_us": 9900,
        "device_read_latency_us_idle": 875, "cpu_busy_percent": 40.0}


def test_a_capped_run_whose_cache_thrashed_is_client_limited_not_storage():
    """The quick profile's 12 accelerators: the device busy and slow, as storage-limited runs look, but it read
    2.6 × what the loaders asked for: its own re-reads under the cap."""
    row = {**BUSY, "memory_limit_bytes": 32 << 20, "device_bytes_per_loader_byte": 2.61}
    by, why = limits.limited_by(row)
    assert by == "client" and why.startswith("page cache thrashed under the 32 MiB cap (emulate.memory_limit_mib): "
                                             "the device read 2.6 × the bytes the loaders asked for")
    assert limits.limited_by({**row, "device_bytes_per_loader_byte": 1.0})[0] == "storage"
    assert limits.limited_by({**row, "memory_limit_bytes": None})[0] == "storage"       # no cap: readahead, not thrash
    assert limits.limited_by({**row, "memory_limit_bytes": float("nan")})[0] == "storage"
