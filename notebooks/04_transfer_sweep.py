# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 — Transfer size × queue depth, idle vs busy (fio)
#
# Reproduces *The Micron 9400 NVMe SSD Performance With NVIDIA Magnum IO GPUDirect Storage Platform* (2023): 4 KB, 128 KB and 1024 KB reads at doubling queue depths, every point a (throughput, latency) pair drawn as one curve per transfer size with the dots labelled by queue depth; an idle system against a busy one (a measured CPU + memory-bandwidth load, Micron's "emulated AI preprocessing"); and two storage targets on the busy system. The GPU path (GDS vs the legacy bounce buffer) runs only where a CUDA GPU and the wheels `make gpu` installs are present; otherwise the section says so.
#
# From the curves it forecasts how many accelerators each target can feed for a training workload of the MLPerf Storage catalogue, beside the emulate study's measured answer when that ran.
#
# The same study runs without Jupyter: `storagebrief transfer-sweep -S transfer_sweep.queue_depths=[1,8] --out DIR`.
#
# **Run All** runs it with `params.yaml`'s knobs; change any of them in the parameters cell below. Your edits stay in this notebook's `.ipynb` (git ignores it); the tracked `.py` beside it keeps params.yaml's values (docs/notebooks.md). Results go to a new folder `reports/runs/<time>/transfer_sweep/` (the pipeline's `reports/transfer_sweep/` belongs to `dvc repro`).

# %% tags=["parameters"]
# This study's knobs: params.yaml's `transfer_sweep:` section. A value changed here applies to this notebook's
# runs (merged over params.yaml, validated before any work) and is saved in this .ipynb only, never in
# the tracked .py; change params.yaml for `dvc repro` too.
transfer_sweep = {
    'engine': 'io_uring',  # io_uring | libaio | psync (psync: one I/O per job, numjobs: QD)
    'rw': ['randread'],  # randread | read | randwrite | write (writes overwrite the study's own file)
    'block_sizes': ['4k', '1m'],  # k: 1024 B; multiples of 512 (direct I/O); quick: the two ends (paper adds 128k)
    'queue_depths': [1, 8, 32],  # total QD: iodepth x numjobs
    'numjobs': 1,  # fio jobs per point (iodepth: QD / numjobs)
    'ramp_time_s': 0.15,  # fio ramp_time (not measured)
    'runtime_s': 0.6,  # fio runtime per point, time_based
    'repeats': 2,  # outer loop; percentiles of a point come from the repeats' merged bins
    'file_mib': 256,  # preconditioned file per target (fully written)
    'loads': ['idle', 'busy'],
    'busy': {
        'tool': 'stress-ng',  # stress-ng (calibrated: memrate rate limit + cpu-load) | stressapptest
        'cpu_percent': 86,  # Micron's GDS brief's busy system: 86 % CPU ...
        'memory_bandwidth_percent': 50,  # ... and ~50 % of the measured peak memory bandwidth
        'peak_seconds': 2.0,
        'calibrate_seconds': 1.0,
        'settle_s': 0.2,
    },
    'gpu': 'auto',  # auto: GPU paths (gds, legacy) when a CUDA GPU and `make gpu`'s wheels are present
    'forecast': {
        'workloads': ['unet3d'],  # core.workloads; the emulate study's spec is used when it ran
        'accelerator_type': 'v100',
        'workload_overrides': {  # used when reports/emulate has not run (same scaled unet3d as emulate)
            'unet3d': {
                'record_bytes': 500000,
                'record_bytes_stdev': 233000,
                'compute_s': {
                    'v100': 0.04,
                },
            },
        },
        'request_kib': 1024,  # the loader's read size (emulate.read_block_kib)
        'emulate_dir': 'reports/emulate',
    },
}
targets = None     # None: params.yaml's targets; or a list like params.yaml's (name, path, profile)
out_dir = None     # None: a new reports/runs/<time>/transfer_sweep/ (dvc repro passes reports/transfer_sweep)
progress = "auto"  # a bar in JupyterLab; "lines": one line per run

# %%
from storagebrief import brief, notebook

runs = notebook.run_study("transfer_sweep", transfer_sweep, targets=targets, out_dir=out_dir, progress=progress)

# %% [markdown]
# ## Runs
# One row per fio job (`runs.csv`; MB = 10⁶ bytes, MiB = 2²⁰ bytes, latencies in µs). Per point, repeats merged: `points.csv`; the forecast: `forecast.csv`; fio's raw JSON+: `fio/<run_id>.json`.

# %%
notebook.show_runs(runs, ["target", "load", "rw", "block_size_label", "queue_depth", "repeat",
                       "throughput_mb_per_s", "iops", "lat_us_mean", "clat_us_p99", "cpu_busy_percent",
                       "cache_method"])

# %% [markdown]
# ## Results
# The same tables, figures and analysis that the brief shows.

# %%
brief.study_section("transfer_sweep", runs.attrs["out_dir"])
