# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 — ResNet50 training under memory limits: disk profiles
#
# Reproduces the training half of *Benchmarking Storage with AI Workloads* (Samsung, SDC): `tf.keras.applications.ResNet50(weights=None)` trains from TFRecords (the preprocessing stage's output, or a generated ImageNet-like set when a larger dataset is asked for) while each job runs in its own cgroup. Scenarios on every target: baseline vs limited memory (dataset:memory ratio), K models in parallel, ingestion while training, and frequent checkpoints. The monitor records the device's disk profile.
#
# **Run All** runs it with `params.yaml`'s knobs; change any of them in the parameters cell below. Your edits stay in this notebook's `.ipynb` (git ignores it); the tracked `.py` beside it keeps params.yaml's values (docs/notebooks.md). Results go to a new folder `reports/runs/<time>/train_resnet50/` (the pipeline's `reports/train_resnet50/` belongs to `dvc repro`). The same study runs without Jupyter: `storagebrief train-resnet50 -S train_resnet50.parallel_models=[1,2] --out DIR`.

# %% tags=["parameters"]
# This study's knobs: params.yaml's `train_resnet50:` section. A value changed here applies to this notebook's
# runs (merged over params.yaml, validated before any work) and is saved in this .ipynb only, never in
# the tracked .py; change params.yaml for `dvc repro` too.
train_resnet50 = {
    'targets': [],  # subset of target names; []: every target
    'dataset': 'auto',  # auto: preprocess TFRecords if they hold >= dataset_images, else generate
    'dataset_images': 64,  # records in the generated set (quick: 67 MB, > the 2.5:1 cache share; more
    # than preprocess's 48, so auto generates: its 256x256 records are too small)
    'preprocess_outputs': 'reports/preprocess/outputs.json',
    'record_kib': 1024,  # generated JPEG record size; quick uses 1 MiB so a dataset larger than the
    # memory slack is read in seconds on CPU (paper: 110, as ImageNet)
    'shards': 4,  # generated TFRecord files
    'num_classes': 4,
    'input_size': 64,  # ResNet50 input (min 32); paper 224. Not 32: its last stage is then 1x1, so batch norm
    # normalises over a batch's 16 samples and a converged model's loss spiked to 5.4 on a
    # batch with a skewed class mix (docs/studies/train_resnet50.md); at 64 (2x2) none in 96 steps
    'batch_size': 16,  # quick: 4 steps an epoch (2/3 of the compute of 96 records at batch 32)
    'class_balanced_batches': True,  # generated sets: batch_size / num_classes of each class a batch; skewed batches of
    # 16 through batch norm spiked a converged model's loss to 2.3 (docs/studies/train_resnet50.md)
    'epochs': 2,  # >= 2: epochs after the first show the page-cache effect
    'learning_rate': 0.001,  # SGD, momentum 0.9 (0.01 diverged here: epoch loss 3.5-7.7 on 4 classes)
    'shuffle_buffer': 32,  # records (half the quick set)
    'read_parallelism': 4,  # TFRecord files read at once (interleave)
    'warmup_steps': 2,  # traced before the measured phase
    'memory_limits': ['none', '2.5:1'],  # none | dataset:memory ratio (caps the page cache) | size (2GiB, whole job)
    'memory_margin_mib': 48,  # absolute limits: the suggested minimum is TensorFlow's measured need + this
    'parallel_models': [1, 2],  # K models at once, cores split, one cgroup each
    'parallel_memory': '2.5:1',
    'ingest_mb_per_s': 20,  # concurrent writer while one model trains; 0: skip
    'ingest_memory': 'none',
    'checkpoint_every_steps': 4,  # frequent checkpoints; 0: skip
    'checkpoint_default_interval_s': 600,  # tf.estimator's default, used by every other run
    'checkpoint_memory': 'none',
    'repeats': 1,
    'memory_runs': 1,  # runs of the memory sweep, repeats included (3: page 1 gives a range of 3);
    # quick: 1, 3 cost ~52 s more of a make study already at its 15 minutes
    'stall_timeout_s': 240,  # a job without a step for this long is killed (thrashing)
    'seed': 0,
}
targets = None     # None: params.yaml's targets; or a list like params.yaml's (name, path, profile)
out_dir = None     # None: a new reports/runs/<time>/train_resnet50/ (dvc repro passes reports/train_resnet50)
progress = "auto"  # a bar in JupyterLab; "lines": one line per run

# %%
from storagebrief import brief, notebook

runs = notebook.run_study("train_resnet50", train_resnet50, targets=targets, out_dir=out_dir, progress=progress)

# %% [markdown]
# ## Runs
# One row per measured run (`runs.csv`; per-job rows in `jobs.csv`, per-epoch rows in `epochs.csv`); units are in the column headers. Failed runs carry their reason.

# %%
notebook.show_runs(runs, ["target", "sweep", "models", "memory_setting", "status", "training_time_s",
                       "images_per_s", "memory_limit_bytes", "page_cache_cap_bytes", "page_cache_mean_bytes",
                       "memory_peak_bytes", "job_read_bytes", "reread_ratio", "device_read_mib_per_s_avg",
                       "cpu_iowait_percent", "failure_reason"])

# %% [markdown]
# ## Results
# The same tables, figures and analysis that the brief shows.

# %%
brief.study_section("train_resnet50", runs.attrs["out_dir"])
