# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 07 — KV-cache offload: reload from storage or recompute
#
# **What it reproduces.** MLPerf Storage v3.0's KV-cache benchmark: simulated users of an LLM service whose
# conversations outgrow accelerator memory. Each turn writes the conversation's KV cache (the model's keys and
# values for every token so far: 2 × layers × kv_heads × head_dim × 2 bytes per token, 128 KiB for llama3.1-8b,
# 320 KiB for llama3.1-70b) to a CPU-memory tier or to storage (one file per request, fsync'ed), and the next
# turn reads it back cold. MLPerf's three closed options are the paper-scale presets `mlperf-closed-1..3`; the
# quick profile keeps the real bytes per token and cuts users, contexts and time.
#
# **How it goes past MLPerf.** MLPerf divides the bytes by the *nominal* duration, however long the requests in
# flight at the end ran on; beside that figure this study divides by the time any client had a storage call in
# flight, and gives per-call latency (host and device apart), tier hit ratios, tokens/s served from storage and
# what limited each run. Then it answers what no MLPerf table does: beyond how many tokens does reloading a KV
# cache from this storage beat recomputing it (the prefill FLOP model, its rate measured here on a Keras decoder
# of llama shape and catalogued for accelerators, with sources)?
#
# The same study runs without Jupyter: `storagebrief kv-cache --out DIR`.
#
# **Run All** runs it with `params.yaml`'s knobs; change any of them in the parameters cell below. Results go to a new folder `reports/runs/<time>/kv_cache/` (the pipeline's `reports/kv_cache/` belongs to `dvc repro`).

# %% tags=["parameters"]
# This study's knobs: params.yaml's `kv_cache:` section. A value changed here applies to this notebook's
# runs (merged over params.yaml, validated before any work); change params.yaml for `dvc repro` too.
kv_cache = {
    'run': ['quick-1', 'quick-2', 'quick-3'],  # workloads in order: names below or MLPerf's mlperf-closed-1..3 (paper scale)
    'workloads': {  # name -> family (mlperf | closed-loop), model, users_per_client, cpu_tier_gib (per
        # client; None: none), max_concurrent_allocs (mlperf: writes in flight, 0: unbounded),
        # concurrency (closed-loop: requests in flight)
        'quick-1': {  # closed option 1, scaled
            'family': 'mlperf',
            'model': 'llama3.1-8b',
            'users_per_client': 4,
            'cpu_tier_gib': None,
            'max_concurrent_allocs': 2,
        },
        'quick-2': {  # option 2: a CPU tier
            'family': 'mlperf',
            'model': 'llama3.1-8b',
            'users_per_client': 4,
            'cpu_tier_gib': 0.0625,
            'max_concurrent_allocs': 0,
        },
        'quick-3': {  # option 3, scaled
            'family': 'mlperf',
            'model': 'llama3.1-70b',
            'users_per_client': 2,
            'cpu_tier_gib': None,
            'max_concurrent_allocs': 1,
        },
    },
    'mlperf': {  # the mlperf family's user model (MLPerf's defaults at 284ce72 but the templates' sizes)
        'templates': [  # a user draws context L, generation G and think seconds from one; a request U[L/4, L]
            {
                'name': 'chatbot',
                'context_tokens': [64, 256],
                'generate_tokens': [50, 200],
                'think_s': [0.1, 0.5],
            },
            {
                'name': 'coding',
                'context_tokens': [128, 352],
                'generate_tokens': [100, 500],
                'think_s': [0.2, 1.0],
            },
            {
                'name': 'document',
                'context_tokens': [128, 320],
                'generate_tokens': [200, 800],
                'think_s': [0.3, 1.5],
            },
        ],
        'decode_batch_tokens': 32,  # a request's new cache is read 1 + ceil(G / 32) times below prefill_only_tokens
        'end_conversation_probability': 0.2,
        'max_turns': 50,
        'storage_capacity_gib': None,  # per client; None: MLPerf's 95 % of the target's free space (capacity LRU)
    },
    'shapes': {},  # your own models: name -> {layers, hidden, heads, kv_heads, head_dim, ffn, context_window}
    'clients': 2,  # client processes (launcher fork) or MPI ranks (launcher mpi)
    'contexts': [  # closed-loop: a conversation's first context: tokens, drawn by weight
        {
            'tokens': 64,
            'weight': 1,
        },
        {
            'tokens': 128,
            'weight': 1,
        },
        {
            'tokens': 256,
            'weight': 0.5,
        },
    ],
    'turns': [  # turns per conversation (tokens: the number of turns), drawn by weight
        {
            'tokens': 2,
            'weight': 1,
        },
        {
            'tokens': 4,
            'weight': 1,
        },
    ],
    'turn_tokens': 32,  # tokens each later turn adds (its reload reads the previous turn's cache)
    'decode_reads': 1,  # reads of a request's new cache right after its write (MLPerf's PREFILL_DECODE: N)
    'prefill_only_tokens': 10000,  # from this context on, no decode reads (MLPerf: PREFILL only from 10K tokens)
    'duration_s': 3,  # nominal seconds per run; requests in flight at the end finish (MLPerf: 300)
    'seed': 42,  # MLPerf's
    'repeats': 1,  # MLPerf: 3 trials
    'write_block_mib': 16,  # one write() call of incompressible bytes
    'launcher': 'fork',  # fork: client processes on this host; mpi: mpirun ranks (the mpi keys below)
    'mpi': {  # used by launcher: mpi only (the emulate study's mpi section, same keys)
        'mpirun': 'mpirun',
        'hostfile': None,
        'hosts': [],
        'oversubscribe': True,
        'extra_args': [],
    },
    'client_check': True,  # re-run the first workload on the first target with the clients on half the CPUs
    'client_check_repeats': 1,  # confined runs (with repeats: 1, an unconfined re-run beside each: its spread)
    'prefill': {  # this machine's prefill rate: a small llama-shaped decoder in Keras, random weights
        'measure': True,  # False: no 'this-cpu' answer (and no TensorFlow start)
        'layers': 2,
        'hidden': 256,
        'heads': 4,
        'kv_heads': 2,
        'ffn': 688,
        'contexts': [512, 1024, 2048, 4096],  # tokens; the FLOP model's prediction is shown beside each
        'repeats': 3,  # timed passes per context (best kept, spread shown)
        'threads': None,  # TensorFlow's threads; None: every core
        'timeout_s': 600,
    },
    'breakeven': {
        'accelerators': ['this-cpu', 'h200', 'h100-sxm'],  # catalogue (README/docs: sources); this-cpu: measured above
        'answer_within_tokens': 131072,  # beyond this the answer is "not within 128K tokens"
        'need_at_tokens': 8192,  # the read GiB/s a reload needs to win at this context
    },
}
targets = None     # None: params.yaml's targets; or a list like params.yaml's (name, path, profile)
out_dir = None     # None: a new reports/runs/<time>/kv_cache/ (dvc repro passes reports/kv_cache)
progress = "auto"  # a bar in JupyterLab; "lines": one line per run

# %%
from storagebrief import brief, notebook

runs = notebook.run_study("kv_cache", kv_cache, targets=targets, out_dir=out_dir, progress=progress)

# %% [markdown]
# ## Runs
# One row per measured run (`runs.csv`; every column is described in `runs.schema.json`).

# %%
notebook.show_runs(runs, ['target', 'repeat', 'workload', 'model', 'kv_bytes_per_token', 'clients', 'users_per_client',
                         'mlperf_read_gib_per_s', 'honest_read_gib_per_s', 'overstatement_ratio', 'limited_by'])

# %% [markdown]
# ## Results
# The same tables, figures and analysis that the brief shows.

# %%
brief.study_section("kv_cache", runs.attrs["out_dir"])
