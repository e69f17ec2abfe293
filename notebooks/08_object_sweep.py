# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 08 — Objects: GET and PUT at object size × concurrency, directory vs S3
#
# The object-storage analogue of the transfer sweep, on warp's and elbencho's axes: whole-object GETs and PUTs at
# object sizes × requests in flight, on an idle system and beside a CPU load, measuring throughput (MB/s),
# objects/s, per-request latency (p50, p99) and what the client's CPU paid per GB.
#
# An S3 target (`kind: s3` in `targets:`) is either the **local gateway** (versitygw, started by the study on
# loopback; its objects are plain files on the target's device, under the target's emulated profile) or your
# **external endpoint** (`endpoint`, `bucket`, `prefix`; credentials from the environment or an AWS profile only;
# storagebrief writes below its own run prefix and removes only that). Directory targets run the same client threads
# on whole files, so a directory and a local-gateway S3 target on one device give **directory vs S3** at like size:
# the cost of the object path alone. Rows where the client's (or client + gateway's) CPU reached 80 % of the machine
# say so: their figure is the CPU's, not the storage's. Details: `docs/studies/object_sweep.md`.
#
# The same study runs without Jupyter: `storagebrief object-sweep --out DIR`.
#
# **Run All** runs it with `params.yaml`'s knobs; change any of them in the parameters cell below. Results go to a new folder `reports/runs/<time>/object_sweep/` (the pipeline's `reports/object_sweep/` belongs to `dvc repro`).

# %% tags=["parameters"]
# This study's knobs: params.yaml's `object_sweep:` section. A value changed here applies to this notebook's
# runs (merged over params.yaml, validated before any work); change params.yaml for `dvc repro` too.
object_sweep = {
    'targets': ['local', 'local-s3'],  # quick: directory vs S3 on one disk; []: every target (paper)
    'client': 'minio-go',  # the S3 client: the compiled s3worker (benchmarks/object_clients.py compares it with s3dlio)
    'ops': ['get', 'put'],
    'object_sizes': ['64k', '1m'],  # K: 1,024 B; paper: [4k, 64k, 1m, 16m]
    'concurrency': [8],  # requests in flight (client threads); paper: [1, 8, 32]
    'reference_client': False,  # True: a compiled S3 client (Go, `make s3ref`) beside ours at each idle gateway point
    'mib_per_point': 8,  # data moved per point: objects: this / size, within min..max below
    'min_objects': 8,
    'max_objects': 64,
    'loads': ['idle'],  # quick: idle only (the busy system costs ~50 s here); paper: [idle, busy]
    'busy': {
        'cpu_percent': 86,  # stress-ng CPU load on every CPU beside the client (as the transfer sweep's)
        'settle_s': 0.2,
    },
    'repeats': 2,
    'seed': 0,
}
targets = None     # None: params.yaml's targets; or a list like params.yaml's (name, path, profile)
out_dir = None     # None: a new reports/runs/<time>/object_sweep/ (dvc repro passes reports/object_sweep)
progress = "auto"  # a bar in JupyterLab; "lines": one line per run

# %%
from storagebrief import brief, notebook

runs = notebook.run_study("object_sweep", object_sweep, targets=targets, out_dir=out_dir, progress=progress)

# %% [markdown]
# ## Runs
# One row per measured batch (`runs.csv`; every column is described in `runs.schema.json`; MB = 10⁶ bytes).
# Repeats merged per point: `points.csv`; directory vs S3 on one device: `pairs.csv`; the gateway's log: `logs/`.

# %%
notebook.show_runs(runs, ["target", "access", "load", "op", "object_label", "concurrency", "repeat",
                       "throughput_mb_per_s", "objects_per_s", "latency_ms_p50", "latency_ms_p99",
                       "client_cpu_s_per_gb", "gateway_cpu_s_per_gb", "limited_by", "cache_method"])

# %% [markdown]
# ## Results
# The same tables, figures and analysis that the brief shows.

# %%
brief.study_section("object_sweep", runs.attrs["out_dir"])
