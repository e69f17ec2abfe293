# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 — Emulated-accelerator training (DLIO / MLPerf Storage style)
#
# Reproduces *Accelerating Machine Learning Performance / Decreasing Training Times with KIOXIA CM7 Series SSDs* (2024), which ran the DLIO benchmark's unet3d workload with 8 to 18 emulated V100 accelerators, and applies MLPerf Storage's rule: a storage target *supports* the largest number of accelerators whose accelerator utilization (AU) stays at or above 90 % (70 % for cosmoflow).
#
# Each emulated accelerator is a process with its own loader (read threads, prefetch) that reads the real bytes of a shuffled share of the dataset from the target, then sleeps for the accelerator's compute time per batch; the accelerators meet at a barrier every step, like an all-reduce. The sweep adds accelerators until the target can no longer keep them busy: by default it searches (1, 2, 4, 8, … then bisection, within a time budget; `accelerators: auto`), or it runs a fixed list of counts.
#
# **Run All** runs it with `params.yaml`'s knobs (the quick profile is scaled down and says so below); change any of them in the parameters cell below. Your edits stay in this notebook's `.ipynb` (git ignores it); the tracked `.py` beside it keeps params.yaml's values (docs/notebooks.md). Results go to a new folder `reports/runs/<time>/emulate/` (the pipeline's `reports/emulate/` belongs to `dvc repro`). The same study runs without Jupyter: `storagebrief emulate --out DIR` (or `-S emulate.accelerators=[1,2]` for a fixed list).

# %% tags=["parameters"]
# This study's knobs: params.yaml's `emulate:` section. A value changed here applies to this notebook's
# runs (merged over params.yaml, validated before any work) and is saved in this .ipynb only, never in
# the tracked .py; change params.yaml for `dvc repro` too.
emulate = {
    'workloads': ['unet3d'],  # catalogue: unet3d, resnet50, cosmoflow, retinanet (+ any defined below)
    'accelerator_type': 'v100',  # key of each workload's compute_s (unet3d: v100 a100 h100 b200; resnet50: v100 a100
    # h100; cosmoflow: a100 h100; retinanet: b200 mi355 — docs/studies/emulate-mlperf.md, with sources)
    'workload_overrides': {  # partial specs merged over the reference values, or whole new workloads
        'unet3d': {
            'record_bytes': 500000,  # bytes per sample (reference 146,600,628)
            'record_bytes_stdev': 233000,  # same relative spread as the reference (68,341,808)
            'compute_s': {  # seconds per batch (reference 1.3604)
                'v100': 0.04,
            },
        },
    },
    'accelerators': 'auto',  # auto: search the largest N per workload and target (1, 2, 4, ... until AU < threshold
    # or the client limits, then bisect; docs/studies/emulate.md "Accelerators supported, searched"); or a
    # fixed list, e.g. [1, 2, 3, 4], swept on every target
    'search_budget_s': 60,  # auto: seconds of runs per workload and target; stopped there, the answer is ">= N"
    's3_search_budget_s': 45,  # auto on S3 targets (their own, smaller budget); None: search_budget_s
    'search_max': 64,  # auto: the largest N probed (passing it, the answer is ">= N"); with
    # min_steps_per_epoch set, 16 keeps the S3 target's set at 16 x 88 files (0.7 GB)
    'stop_below_threshold': False,  # a list: stop a target's sweep after the first N whose AU < threshold
    'repeats': 2,
    'epochs': 2,  # DLIO default is 5; quick: 2 (a run lasts about epochs x dataset / (N x 50 MB/s), so
    # one accelerator's runs, where the search spends most, shrink by a third; with
    # min_steps_per_epoch every N's AU window spans the 24 steps window.py asks for)
    'num_files': 336,  # files per workload (None with mlperf sizing: >= 5 x host memory)
    'min_steps_per_epoch': None,  # au_window: the data set grows with N, as MLPerf sizes it, so every accelerator has
    # the fewest steps per epoch whose AU window is a measurement (22 for unet3d at 2
    # epochs: 88 files per accelerator); None: num_files at every N. Quick: None, as the
    # bigger sets cost ~36 s of a make study already at its 15 minutes (docs/studies/emulate.md)
    'dataset_sizing': 'memory_cap',  # memory_cap: run in a cgroup capping page cache (dataset >= 5 x cap);
    # mlperf: dataset >= 5 x host memory; fixed: as given, cache not controlled
    'memory_limit_mib': 32,  # the cap (memory_cap only)
    'odirect': False,  # True: O_DIRECT reads (page cache bypassed)
    'readahead': None,  # None: off under the memory cap (avoids thrash), kernel default otherwise
    'read_threads': None,  # None: the workload's own (unet3d 4, resnet50 8)
    'prefetch': 2,  # ready batches per read thread (PyTorch prefetch_factor)
    'read_block_kib': 1024,  # bytes per read call (multiple of 4)
    'checkpoint_every_steps': 0,  # 0: no checkpoints
    'checkpoint_mib': 0,
    'seed': 0,
    'client_check': True,  # re-run the answer's point with the emulator on half its CPUs: client-bound or not
    'client_check_repeats': 1,  # confined runs of that point (compared with its own repeats' spread)
    'mlperf_rules': False,  # MLPerf Storage v3.0 run rules: 6 runs per point (1 warm-up + 5 scored), rules' dataset
    # size; needs repeats: 6 and dataset_sizing: mlperf (docs/studies/emulate-mlperf.md)
    'mlperf_hosts': 1,  # mlperf_rules: client hosts in the rules' dataset-size formula
    'launcher': 'fork',  # fork: accelerators forked on this host; mpi: mpirun ranks (docs/multi-host.md)
    'mpi': {  # used by launcher: mpi only
        'mpirun': 'mpirun',
        'hostfile': None,  # Open MPI hostfile ("client1 slots=8" per line), or:
        'hosts': [],  # --host entries, e.g. [client1:8, client2:8]; []: this host
        'oversubscribe': True,  # more ranks than cores on a host
        'extra_args': [],
    },
}
targets = None     # None: params.yaml's targets; or a list like params.yaml's (name, path, profile)
out_dir = None     # None: a new reports/runs/<time>/emulate/ (dvc repro passes reports/emulate)
progress = "auto"  # a bar in JupyterLab; "lines": one line per run

# %%
from storagebrief import brief, notebook

runs = notebook.run_study("emulate", emulate, targets=targets, out_dir=out_dir, progress=progress)

# %% [markdown]
# ## Runs
# One row per measured run (`runs.csv`); units are in the column headers (MB = 10⁶ bytes, MiB = 2²⁰ bytes). Per-accelerator rows are in `accelerators.csv`, per-read latency histograms in `latency_histograms.csv`, an MLPerf-Storage-like summary in `mlperf_results.json`, and every run in MLPerf Storage's own results layout under `mlperf/results/<target>/training/<workload>/run/<time>/summary.json` (docs/studies/emulate-mlperf.md). Rows with `client_check` = half CPUs are the client check's re-runs; rows with `mlperf_run` = warm-up are the MLPerf rules' warm-up runs: neither counts in any figure.

# %%
notebook.show_runs(runs, ["target", "workload", "accelerators", "search_step", "search_phase", "repeat", "total_time_s",
                       "au_percent", "limited_by", "limited_by_reason", "client_check", "cpu_confinement", "mlperf_run",
                       "samples_per_s", "loader_read_mb_per_s", "device_read_mb_per_s_avg",
                       "device_read_mb_per_s_max", "read_latency_us_mean", "read_latency_us_p99",
                       "throttle_au_bound_percent", "dataset_sizing", "cache_method"])

# %% [markdown]
# ## Results
# The same tables, figures and analysis that the brief shows.

# %%
brief.study_section("emulate", runs.attrs["out_dir"])
