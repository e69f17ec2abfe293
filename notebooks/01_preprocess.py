# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 — Preprocessing ingest: TIFF → OpenCV resize → TFRecord
#
# Reproduces *How (and why) new QLC SATA SSDs deliver 8x faster machine learning* (Colfax/Micron, 2018): large TIFFs are read with OpenCV, resized and written to TFRecords by P concurrent processes on each storage target. Bandwidth and completion time are measured per process count, then per image count at the best process count.
#
# **Run All** runs it with `params.yaml`'s knobs; change any of them in the parameters cell below. Your edits stay in this notebook's `.ipynb` (git ignores it); the tracked `.py` beside it keeps params.yaml's values (docs/notebooks.md). Results go to a new folder `reports/runs/<time>/preprocess/` (the pipeline's `reports/preprocess/` belongs to `dvc repro`). The same study runs without Jupyter: `storagebrief preprocess -S preprocess.processes=[1,2] --out DIR`.

# %% tags=["parameters"]
# This study's knobs: params.yaml's `preprocess:` section. A value changed here applies to this notebook's
# runs (merged over params.yaml, validated before any work) and is saved in this .ipynb only, never in
# the tracked .py; change params.yaml for `dvc repro` too.
preprocess = {
    'source_dir': None,  # a folder of your own TIFFs (class subfolders: labels); None: generate
    'image_count': 48,  # images in the process sweep (and in the generated dataset)
    'image_counts': [8, 24],  # image-count sweep at each target's best process count
    'processes': [1, 2, 4],
    'image_width': 1920,
    'image_height': 1080,
    'bit_depth': 8,  # 8 or 16 (16-bit is scaled linearly to 8-bit)
    'channels': 3,  # 1 (gray) or 3 (RGB)
    'num_classes': 4,
    'resize_width': 256,
    'resize_height': 256,
    'interpolation': 'area',
    'output_mode': 'sharded',  # sharded: one TFRecord per process; single: one file, as in the paper
    'repeats': 2,  # quick: 2 (± shown from 2 repeats; paper: 3)
    'seed': 0,
}
targets = None     # None: params.yaml's targets; or a list like params.yaml's (name, path, profile)
out_dir = None     # None: a new reports/runs/<time>/preprocess/ (dvc repro passes reports/preprocess)
progress = "auto"  # a bar in JupyterLab; "lines": one line per run

# %%
from storagebrief import brief, notebook

runs = notebook.run_study("preprocess", preprocess, targets=targets, out_dir=out_dir, progress=progress)

# %% [markdown]
# ## Runs
# One row per measured run (`runs.csv`); units are in the column headers.

# %%
notebook.show_runs(runs, ["target", "sweep", "processes", "image_count", "repeat", "completion_time_s",
                       "input_mb_per_s", "images_per_s", "read_share_percent", "device_read_mb_per_s_avg",
                       "cache_method"])

# %% [markdown]
# ## Results
# The same tables, figures and analysis that the brief shows.

# %%
brief.study_section("preprocess", runs.attrs["out_dir"])
