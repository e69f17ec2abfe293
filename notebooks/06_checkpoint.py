# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 06 — Checkpointing: llama3 checkpoints saved and restored
#
# **What it reproduces.** MLPerf Storage v3.0's checkpointing benchmark (DLIO): the llama3 models' checkpoints
# (8b, 70b, 405b, 1t; sizes from DLIO's formula, files laid out per rank as DeepSpeed ZeRO writes them) are
# written `saves` times, one process per writing rank, each file in 32 MiB writes of incompressible bytes and
# fsync'ed at close, then read back `restores` times (4 reader threads per rank, 128 MiB reads) after the caches
# were dropped; a pause before every operation, off the clock. Each run's `summary.json` in `mlperf/results/`
# carries MLPerf's own keys (its "GB" is GiB), as MLPerf's mlpstorage lays a run out.
#
# **How it goes past MLPerf.** MLPerf's throughput is all ranks' bytes ÷ *rank 0's own* duration, with no barrier
# before the clock stops: a rank that finishes later is not waited for. Beside that figure this study reports the
# measured one — bytes ÷ the time from a barrier at the start until the *last* rank's fsync returned — their ratio
# (the overstatement), and the skew between ranks, per checkpoint (`checkpoints.csv`) and per rank (`ranks.csv`).
# Quick settings divide every file by `scale` (2048: ≈ 52 MiB for llama3-8b) so the notebook runs in seconds;
# `scale: 1` is the paper's size.
#
# The same study runs without Jupyter: `storagebrief checkpoint --out DIR`.
#
# **Run All** runs it with `params.yaml`'s knobs; change any of them in the parameters cell below. Your edits stay in this notebook's `.ipynb` (git ignores it); the tracked `.py` beside it keeps params.yaml's values (docs/notebooks.md). Results go to a new folder `reports/runs/<time>/checkpoint/` (the pipeline's `reports/checkpoint/` belongs to `dvc repro`).

# %% tags=["parameters"]
# This study's knobs: params.yaml's `checkpoint:` section. A value changed here applies to this notebook's
# runs (merged over params.yaml, validated before any work) and is saved in this .ipynb only, never in
# the tracked .py; change params.yaml for `dvc repro` too.
checkpoint = {
    'models': ['llama3-8b'],  # llama3-8b, llama3-70b, llama3-405b, llama3-1t (core.checkpoint_workloads)
    'scale': 2048,  # divides every file's size (1: MLPerf's 105 GiB for llama3-8b)
    'mode': 'default',  # default: every rank; subset: ranks 0..7 of the full layout (not llama3-8b)
    'saves': 3,  # checkpoint writes per run (MLPerf: 10)
    'restores': 3,  # checkpoint reads per run, after the writes, caches dropped (MLPerf: 10)
    'pause_s': 0.1,  # pause before every save / restore, off the clock (MLPerf: 5; quick: 0.1, as each
    # save already waits for its memory to settle and each restore for a cache drop)
    'rank_shift': 0,  # restore: rank r reads the files rank (r + shift) mod n wrote
    'retain': 2,  # complete checkpoints kept; older ones deleted (timed apart)
    'write_block_mib': 32,  # one write() of incompressible bytes (MLPerf v3.0: 32 MiB)
    'read_block_mib': 128,  # one read on restore (MLPerf v3.0: 128 MiB)
    'readers_per_rank': 4,  # reader threads per rank on restore (MLPerf v3.0: 4)
    'save_io': 'buffered',  # buffered (MLPerf's: page cache, then fsync; memory pre-faulted before each save)
    # or direct (O_DIRECT: the disk's figure, the page cache and VM memory left out)
    'repeats': 1,
    'protocol_runs': 1,  # runs of the largest model's protocol, repeats included (3: page 1 gives
    # a range of 3); quick: 1, 3 cost ~45 s more of a make study already at its 15 minutes
    'ranks': None,  # None: the model's own rank count (8 in subset mode); nothing else is allowed
    'shapes': {},  # user-defined transformers by name, usable in models and cost.model
    # e.g. {tiny: {layers: 4, hidden: 512, ffn: 1024, heads: 8, kv_heads: 2, vocab: 32000,
    #        tp: 1, pp: 1, dp: 2, zero_stage: 3}}  (ranks: tp·pp·dp)
    'launcher': 'fork',  # fork: one process per rank on this host; mpi: mpirun ranks (docs/studies/checkpoint.md)
    'mpi': {  # used by launcher: mpi only (the emulate study's mpi section, same keys)
        'mpirun': 'mpirun',
        'hostfile': None,  # Open MPI hostfile ("client1 slots=8" per line), or:
        'hosts': [],  # --host entries, e.g. [client1:4, client2:4]; []: this host
        'oversubscribe': True,  # more ranks than cores on a host
        'extra_args': [],
    },
    'client_check': True,  # re-run the largest model's protocol per directory target with the ranks on half the CPUs
    'client_check_repeats': 1,  # confined runs per target (compared with every save / restore of the point's own runs)
    'cost': {  # what a checkpoint costs an emulated training loop (after the protocol runs)
        'modes': ['none', 'sync', 'async'],  # none: the baseline (always first); [] turns the cost sweep off
        'intervals_steps': [4, 16],  # a checkpoint after every k steps ([] turns the cost sweep off)
        'steps': 32,  # training steps per run
        'compute_s': 0.05,  # emulated accelerator compute per step (the one sleep standing for work)
        'model': 'llama3-8b',  # the checkpoint saved: this model's at checkpoint.scale (quick ≈ 52 MiB)
        'files': 8,  # files per checkpoint, each written and fsync'ed
        'staging': 'reused',  # async snapshot into one buffer kept across saves (reused) or new memory (fresh)
        'overhead_limit_percent': 5,  # the brief's intervals: the shortest keeping training's overhead at most this
    },
    'framework': {  # TensorFlow's own checkpoints of a BERT-shaped Keras model (the Samsung SDC 2023 study's BERT rows)
        'scenarios': ['default', 'every', 'limited', 'ingest'],  # default / every k / limited memory / ingest alongside; []: off
        'steps': 24,  # training steps per scenario (paper: 2000)
        'every_steps': 3,  # the frequent interval (paper: 250)
        'default_every_steps': 12,  # the default interval: BERT run_pretraining's save_checkpoints_steps (paper: 1000)
        'max_to_keep': 5,  # tf.train.CheckpointManager's (Estimator's default: 5)
        'layers': 2,  # quick: a few layers, small hidden size (≈ 18 MB a checkpoint); paper: BERT-base
        'hidden': 128,
        'heads': 2,
        'ffn': 512,
        'seq_len': 64,
        'vocab': 8192,
        'predictions': 10,  # masked positions per sequence (BERT: 20)
        'batch_size': 8,
        'learning_rate': 0.0001,  # AdamW, weight decay 0.01
        'threads': None,  # TensorFlow's threads; None: every core
        'memory_headroom_mib': 48,  # limited: the job's own memory (apart from page cache) + this (16: OOM-killed; 64: did not always bind)
        'ingest_mb_per_s': 20,  # ingest: the writer's rate (BERT-shaped TFRecord frames, fsync'ed twice a second)
        'timeout_s': 1800,  # TensorFlow's start-up, and each scenario, at most this long
    },
}
targets = None     # None: params.yaml's targets; or a list like params.yaml's (name, path, profile)
out_dir = None     # None: a new reports/runs/<time>/checkpoint/ (dvc repro passes reports/checkpoint)
progress = "auto"  # a bar in JupyterLab; "lines": one line per run

# %%
from storagebrief import brief, notebook

runs = notebook.run_study("checkpoint", checkpoint, targets=targets, out_dir=out_dir, progress=progress)

# %% [markdown]
# ## Runs
# One row per measured run (`runs.csv`; every column is described in `runs.schema.json`): one table per sweep
# (protocol: MLPerf's saves and restores; cost: what checkpointing costs training; framework: TensorFlow's own).

# %%
notebook.show_runs(runs, ["target", "sweep", "model", "mode", "writers", "repeat", "save_mode", "interval_steps",
                       "framework_scenario", "honest_save_gib_per_s", "mlperf_save_gib_per_s",
                       "save_overstatement_ratio", "save_rank_skew_s_mean", "honest_load_gib_per_s",
                       "load_overstatement_ratio", "overhead_percent", "stall_s_per_checkpoint", "persist_s_mean",
                       "tf_checkpoint_s_mean", "tf_checkpoint_mb_per_s", "checkpoint_time_percent",
                       "cache_method"])

# %% [markdown]
# ## Results
# The same tables, figures and analysis that the brief shows.

# %%
brief.study_section("checkpoint", runs.attrs["out_dir"])
