# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 09 — Vector search: QPS at a stated recall, reads per query, QPS predicted from the device's IOPS
#
# Vector search on SSD: a DiskANN (Vamana + PQ) disk index searched with direct I/O, recall@k beside QPS, per-query
# tails, reads per query three ways, and QPS predicted from the target's own 4 KiB random-read IOPS (MLPerf
# Storage v3.0's vector-database workload, measured so that its figures can be judged).
#
# A query walks a graph whose nodes are 4 KiB sectors on the device, so a storage serves about (its random-read
# IOPS at the depth a search keeps in flight) ÷ (reads per query) queries per second, and only at a stated recall:
# a shorter search list L reads less and finds less. Every point here has its recall@10 against exact ground
# truth, per-query latency percentiles (each query timed alone, not v3.0's batch averages), reads per query from
# the engine, the process and the block layer, and the QPS that fio's IOPS on the same index file predict, with
# the regime (I/O-bound: the prediction holds; CPU-bound: measured below it, and the row says the client set the
# pace). The uniform control is v3.0's random data: the same reads, far lower recall. The brief reports the best
# QPS among points at recall ≥ `recall_floor`. Details: `docs/studies/vector_search.md`.
#
# The same study runs without Jupyter: `storagebrief vector-search --out DIR`.
#
# **Run All** runs it with `params.yaml`'s knobs; change any of them in the parameters cell below. Your edits stay in this notebook's `.ipynb` (git ignores it); the tracked `.py` beside it keeps params.yaml's values (docs/notebooks.md). Results go to a new folder `reports/runs/<time>/vector_search/` (the pipeline's `reports/vector_search/` belongs to `dvc repro`).

# %% tags=["parameters"]
# This study's knobs: params.yaml's `vector_search:` section. A value changed here applies to this notebook's
# runs (merged over params.yaml, validated before any work) and is saved in this .ipynb only, never in
# the tracked .py; change params.yaml for `dvc repro` too.
vector_search = {
    'targets': [],  # []: every directory target (S3 targets are left out: docs/studies/vector_search.md)
    'num_vectors': 20000,  # database vectors (float32); paper: 1,000,000
    'dimension': 64,  # paper: 128 (v3.0 uses 1536: set it here; build time and disk grow with it)
    'clusters': 64,  # Gaussian clusters of the clustered set
    'cluster_spread': 0.15,  # a cluster's sd relative to the centres' sd
    'query_noise': 0.02,  # planted query: a database vector + noise of this sd (v3.0 query_mode: planted)
    'queries': 200,  # planted queries; each point runs them in order ...
    'min_queries': 5,  # ... at least this many ...
    'max_point_s': 1.0,  # ... and issues no new one after this many seconds (an emulated HDD: ~150 IOPS)
    'k': 10,  # recall@k
    'search_list': [20, 50, 100],  # L, the candidate list (each >= k); paper: [10, 20, 50, 100, 200]
    'beam_width': [1, 2],  # reads in flight per query hop
    'threads': [1],  # concurrent queries; paper: [1, 2, 4]
    'graph_degree': 32,  # Vamana R
    'build_complexity': 64,  # Vamana build L
    'pq_chunks': 32,  # PQ bytes per vector kept in memory (<= dimension)
    'build_threads': 1,  # 1: the same index from the same seed, bit for bit; 0: every CPU (not)
    'probe_s': 0.4,  # fio 4 KiB random-read probe after each point, at its queue depth (+0.2 s ramp)
    'recall_floor': 0.95,  # QPS is an answer only at recall >= this
    'uniform_control': True,  # v3.0's uniform random data at each L, first beam width, first target
    'repeats': 1,  # MLPerf v3.0 wants 5 runs per point (paper: 5)
    'answer_runs': 1,  # runs of each target's page-1 point (best QPS at recall >= the floor), repeats included,
    # run again after the sweep (3: a range of 3); quick: 1, 3 cost ~25 s more
    'seed': 0,
}
targets = None     # None: params.yaml's targets; or a list like params.yaml's (name, path, profile)
out_dir = None     # None: a new reports/runs/<time>/vector_search/ (dvc repro passes reports/vector_search)
progress = "auto"  # a bar in JupyterLab; "lines": one line per run

# %%
from storagebrief import brief, notebook

runs = notebook.run_study("vector_search", vector_search, targets=targets, out_dir=out_dir, progress=progress)

# %% [markdown]
# ## Runs
# One row per measured run (`runs.csv`; every column is described in `runs.schema.json`).

# %%
notebook.show_runs(runs, ['target', 'repeat', 'data', 'search_list', 'beam_width', 'qps', 'latency_ms_mean', 'latency_ms_p50', 'latency_ms_p95', 'latency_ms_p99', 'latency_ms_p999', 'cache_method'])

# %% [markdown]
# ## Results
# The same tables, figures and analysis that the brief shows.

# %%
brief.study_section("vector_search", runs.attrs["out_dir"])
