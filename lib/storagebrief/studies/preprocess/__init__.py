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
)
