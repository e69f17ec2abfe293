"""core.checkpoint_workloads: DLIO's size formula against MLPerf's published sizes, the files one
checkpoint writes per ZeRO stage, scaling, subset mode, and every refusal naming its key."""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict

import pytest

from storagebrief.core import checkpoint_workloads as ck
from storagebrief.core.checkpoint_workloads import (
    GIB, PAGE_BYTES, CheckpointWorkload, CheckpointWorkloadError, checkpoint_bytes, files_of_rank,
    layout, layout_bytes, model_bytes, optimizer_bytes_per_rank, parameters, workload,
    workload_from_dict)

# A toy shape small enough to check by hand: h=4, heads=2, kv_heads=1 -> d_kv = (4/2)·1 = 2.
TOY = dict(name="toy", layers=2, hidden=4, ffn=8, heads=2, kv_heads=1, vocab=10,
           tp=1, pp=1, dp=2, ranks=2, zero_stage=3)


def test_parameters_of_a_hand_checked_shape():
    # per layer: 2h=8, QKV h(h+2·d_kv)=4·8=32, output h²=16, MLP 3hf=96 -> 152
    # N = 2·V·h (80) + 2 layers·152 (304) + h (4) = 388
    w = workload_from_dict(TOY)
    assert w.kv_width == 2
    assert parameters(w) == 388
    assert model_bytes(w) == 776                          # fp16
    # per rank: 3 groups x (388 // 2 + 5·4 = 214 elements) x 4 B = 2568
    assert optimizer_bytes_per_rank(w) == 2568
    assert checkpoint_bytes(w) == 776 + 2 * 2568


def test_llama3_8b_parameters_are_the_8_billion_of_its_name():
    # 2·128256·4096 + 32·(8192 + 4096·(4096+2·1024) + 4096² + 3·4096·14336) + 4096
    assert parameters(workload("llama3-8b")) == 8_030_261_248


@pytest.mark.parametrize("name", ["llama3-8b", "llama3-70b", "llama3-405b"])
def test_formula_gives_the_published_size_within_one_percent(name):
    w = workload(name)
    computed = checkpoint_bytes(w) / GIB
    assert computed == pytest.approx(ck.PUBLISHED_GIB[name], rel=0.01)


def test_llama3_1t_formula_is_not_the_18_tb_of_the_rules_table(capsys):
    computed = checkpoint_bytes(workload("llama3-1t")) / GIB
    with capsys.disabled():
        print(f"\nllama3-1t: formula {computed:,.1f} GiB, rules' table {ck.PUBLISHED_GIB['llama3-1t']:,} GiB")
    assert computed == pytest.approx(15_426.5, abs=1)
    assert abs(computed / ck.PUBLISHED_GIB["llama3-1t"] - 1) > 0.10    # 18 TB is ~14 % more


def test_70b_uses_128_heads_because_64_misses_the_published_size():
    w = workload("llama3-70b")
    assert w.heads == 128
    real_llama = CheckpointWorkload(**{**asdict(w), "heads": 64})
    assert checkpoint_bytes(w) / GIB == pytest.approx(912, abs=1)          # 911.2
    assert checkpoint_bytes(real_llama) / GIB == pytest.approx(919.9, abs=0.1)


def test_size_table_has_every_model_with_its_published_figure():
    rows = {r.model: r for r in ck.size_table()}
    assert list(rows) == ["llama3-8b", "llama3-70b", "llama3-405b", "llama3-1t"]
    r = rows["llama3-8b"]
    assert r.computed_gib == pytest.approx(r.model_gib + r.optimizer_gib)
    assert (r.published_gib, round(r.computed_gib, 1)) == (105, 104.7)


def test_every_catalogue_workload_has_ranks_tp_pp_dp():
    expected = {"llama3-8b": (1, 1, 8, 8, 3), "llama3-70b": (8, 1, 8, 64, 3),
                "llama3-405b": (8, 32, 2, 512, 1), "llama3-1t": (8, 64, 2, 1024, 1)}
    got = {n: (w.tp, w.pp, w.dp, w.ranks, w.zero_stage) for n, w in ck.WORKLOADS.items()}
    assert got == expected


# ---- layout ------------------------------------------------------------------------------------

def test_zero3_8b_every_rank_writes_one_model_and_one_optimizer_file():
    w = workload("llama3-8b")
    files = layout(w)
    assert len(files) == 16
    assert Counter(f.rank for f in files) == {r: 2 for r in range(8)}
    names = {f.name for f in files}
    assert "zero_pp_rank_0_mp_rank_00_model_states.pt" in names
    assert "zero_pp_rank_7_mp_rank_00_optim_states.pt" in names
    model = [f.bytes for f in files if f.name.endswith("_model_states.pt")]
    # the model is split evenly: every shard within one page of 1/8 of 2N
    assert max(model) - min(model) <= PAGE_BYTES
    assert sum(model) == pytest.approx(model_bytes(w), abs=8 * PAGE_BYTES)


def test_zero3_70b_names_carry_dp_and_tensor_rank():
    files = layout(workload("llama3-70b"))
    assert len(files) == 64 + 64
    # rank 13: tp 5, dp 1 (mp = 13 mod 8)
    assert {f.name for f in files if f.rank == 13} == {
        "zero_pp_rank_1_mp_rank_05_model_states.pt", "zero_pp_rank_1_mp_rank_05_optim_states.pt"}


def test_zero1_405b_model_files_are_pieces_times_tp_written_by_dp_rank_0():
    w = workload("llama3-405b")
    files = layout(w)
    model = [f for f in files if f.name.startswith("layer_")]
    optim = [f for f in files if f.name.endswith("_optim_states.pt")]
    # DLIO's pieces: embedding, 126 layers, lm_head, final norm = 129, each split over tp=8
    assert len(model) == (126 + 3) * 8 == 1032
    assert len(optim) == 512
    assert len(files) == 1032 + 512
    # only data-parallel rank 0 (ranks 0..255) writes model files
    assert {f.rank for f in model} == set(range(256))
    # 126 layers over 32 stages: stages 0..29 hold 4, stages 30..31 hold 3 (+ the edge pieces)
    assert ck.stage_pieces(w, 0) == range(0, 5)            # embedding + layers 1..4
    assert ck.stage_pieces(w, 29) == range(117, 121)
    assert ck.stage_pieces(w, 30) == range(121, 124)
    assert ck.stage_pieces(w, 31) == range(124, 129)       # layers 124..126, lm_head, norm
    assert {f.name for f in files_of_rank(w, 8 * 31 + 3)} == {
        "layer_124-model_251-model_states.pt", "layer_125-model_251-model_states.pt",
        "layer_126-model_251-model_states.pt", "layer_127-model_251-model_states.pt",
        "layer_128-model_251-model_states.pt", "zero_pp_rank_0_mp_rank_251_optim_states.pt"}
    # a data-parallel rank 1 writes its optimizer shard only
    assert [f.name for f in files_of_rank(w, 256)] == ["zero_pp_rank_1_mp_rank_00_optim_states.pt"]


def test_zero1_without_pipeline_writes_one_model_file_per_tensor_shard():
    w = workload_from_dict({**TOY, "tp": 2, "dp": 2, "ranks": 4, "zero_stage": 1})
    names = sorted(f.name for f in layout(w))
    assert names == ["mp_rank_00_model_states.pt", "mp_rank_01_model_states.pt",
                     "zero_pp_rank_0_mp_rank_00_optim_states.pt",
                     "zero_pp_rank_0_mp_rank_01_optim_states.pt",
                     "zero_pp_rank_1_mp_rank_00_optim_states.pt",
                     "zero_pp_rank_1_mp_rank_01_optim_states.pt"]


@pytest.mark.parametrize("name", list(ck.WORKLOADS))
def test_files_sum_to_the_checkpoint_total_within_page_rounding(name):
    w = workload(name)
    files = layout(w)
    assert abs(layout_bytes(files) - checkpoint_bytes(w)) <= len(files) * PAGE_BYTES / 2
    assert len({(f.rank, f.name) for f in files}) == len(files)      # no file written twice
    assert all(f.bytes % PAGE_BYTES == 0 and f.bytes >= PAGE_BYTES for f in files)


def test_scaled_layout_keeps_the_files_and_shrinks_the_bytes():
    w = workload("llama3-405b")
    full, small = layout(w), layout(w, scale=1000)
    assert [(f.rank, f.name) for f in small] == [(f.rank, f.name) for f in full]
    assert layout_bytes(small) == pytest.approx(layout_bytes(full) / 1000, rel=0.01)
    tiny = layout(w, scale=1e12)
    assert {f.bytes for f in tiny} == {PAGE_BYTES}          # never below one page


def test_shares_are_whole_and_sum_to_the_total_before_page_rounding():
    # 10 bytes over 3 shards: 4, 3, 3 (page rounding would hide a lost remainder)
    assert [ck._share(10, 3, i) for i in range(3)] == [4, 3, 3]


def test_scaled_bytes_rounds_to_pages():
    assert ck.scaled_bytes(10 * PAGE_BYTES, 4) == 2 * PAGE_BYTES        # 2.5 pages -> 2
    assert ck.scaled_bytes(11 * PAGE_BYTES, 4) == 3 * PAGE_BYTES        # 2.75 -> 3
    assert ck.scaled_bytes(1, 1) == PAGE_BYTES


def test_subset_mode_writes_ranks_0_to_7_of_the_full_layout():
    w = workload("llama3-70b")
    subset = layout(w, mode="subset")
    assert {f.rank for f in subset} == set(range(8))
    assert subset == [f for f in layout(w) if f.rank < 8]
    # the rules' table: 114 GB for 70b on 8 processes
    assert layout_bytes(subset) / GIB == pytest.approx(ck.PUBLISHED_SUBSET_GIB["llama3-70b"], rel=0.01)


def test_subset_mode_is_refused_for_8b_which_already_runs_on_8_ranks():
    with pytest.raises(CheckpointWorkloadError, match=r"mode='subset'.*llama3-8b.*8 ranks"):
        layout(workload("llama3-8b"), mode="subset")
    with pytest.raises(CheckpointWorkloadError, match=r"mode='partial'.*'default' or 'subset'"):
        layout(workload("llama3-70b"), mode="partial")


# ---- refusals ----------------------------------------------------------------------------------

def test_unknown_model_is_refused_naming_the_known_ones():
    with pytest.raises(CheckpointWorkloadError, match=r"model='llama3-7b'.*llama3-8b, llama3-70b"):
        workload("llama3-7b")


@pytest.mark.parametrize("change, message", [
    ({"ranks": 3}, r"ranks=3 .*tp·pp·dp = 1·1·2 = 2"),
    ({"zero_stage": 2}, r"zero_stage=2 .*1 \(with pipeline\) or 3"),
    ({"pp": 2, "ranks": 4}, r"pp=2 .*must be 1 with zero_stage=3"),
    ({"zero_stage": 1, "pp": 4, "ranks": 8}, r"pp=4 .*at most layers=2"),
    ({"kv_heads": 3}, r"kv_heads=3 .*at most heads=2"),
    ({"heads": 5}, r"heads=5 .*at most hidden=4"),
    ({"layers": 0}, r"layers=0 .*whole number >= 1"),
    ({"tp": True}, r"tp=True .*whole number >= 1"),
    ({"hidden": 4.0}, r"hidden=4.0 .*whole number >= 1"),
    ({"name": ""}, r"name = '' is not allowed: a name used in file paths"),
    ({"name": "../x"}, r"name = '../x' is not allowed: a name used in file paths"),
])
def test_user_shape_refusals_name_key_value_and_what_is_allowed(change, message):
    with pytest.raises(CheckpointWorkloadError, match=message):
        workload_from_dict({**TOY, **change})


def test_user_shape_with_an_unknown_or_missing_key_is_refused():
    with pytest.raises(CheckpointWorkloadError, match=r"layer=2 .*not a key; keys are .*layers"):
        workload_from_dict({**TOY, "layer": 2})
    without_vocab = {k: v for k, v in TOY.items() if k != "vocab"}
    with pytest.raises(CheckpointWorkloadError, match=r"vocab=None .*required"):
        workload_from_dict(without_vocab)


def test_a_valid_user_shape_equals_the_catalogue_entry_it_copies():
    raw = asdict(workload("llama3-405b"))
    assert workload_from_dict(raw) == workload("llama3-405b")


@pytest.mark.parametrize("scale", [0, 0.5, -1, float("inf"), float("nan"), True, "2"])
def test_bad_scale_is_refused(scale):
    with pytest.raises(CheckpointWorkloadError, match=r"scale=.*finite number >= 1"):
        layout(workload("llama3-8b"), scale=scale)


@pytest.mark.parametrize("rank", [-1, 8, True, 1.0])
def test_rank_outside_the_workload_is_refused(rank):
    with pytest.raises(CheckpointWorkloadError, match=r"rank=.*from 0 to 7 for llama3-8b"):
        files_of_rank(workload("llama3-8b"), rank)


def test_checkpoint_folder_is_dlios_epoch_1_step_k():
    assert ck.checkpoint_folder(3) == "global_epoch1_step3"
