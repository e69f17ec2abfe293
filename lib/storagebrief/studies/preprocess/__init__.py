"""Preprocessing ingest: TIFF -> OpenCV resize -> TFRecord with P processes (Colfax/Micron 2018)."""
from ...core.study import Study

STUDY = Study(
    name="preprocess",
    command="preprocess",
    title="Preprocessing ingest: TIFF → resize → TFRecord",
    notebook="notebooks/01_preprocess.py",
    outputs=("runs.csv", "timeseries", "inventory.json", "outputs.json", "notes.json", "skipped_files.csv",
             "notebook.ipynb"),
    brief_inputs=("runs.csv", "inventory.json", "notes.json", "outputs.json", "skipped_files.csv"),
    # 24 x 6.2 MB: a throttled run lasts about a second, long enough to be caught holding its cgroup
    tiny={"image_count": 24, "image_counts": [], "processes": [2], "repeats": 3, "image_width": 1920,
          "image_height": 1080, "num_classes": 2, "resize_width": 32, "resize_height": 32},
)
