"""Transfer size x queue depth on idle and busy systems, fio (Micron 9400 + GPUDirect Storage, 2023),
with a forecast of the accelerators each target can feed."""
from ...core.study import Study

STUDY = Study(
    name="transfer_sweep",
    command="transfer-sweep",
    title="Transfer size × queue depth, idle vs busy (fio)",
    notebook="notebooks/04_transfer_sweep.py",
    outputs=("runs.csv", "points.csv", "forecast.csv", "fio", "timeseries", "inventory.json", "study.json",
             "notes.json", "notebook.ipynb"),
    brief_inputs=("runs.csv", "points.csv", "forecast.csv", "study.json", "notes.json", "inventory.json"),
    upstream=("reports/emulate/study.json", "reports/emulate/mlperf_results.json", "reports/emulate/runs.csv"),
    tiny={"block_sizes": ["4k", "64k"], "queue_depths": [1, 4], "repeats": 2, "file_mib": 8,
          "runtime_s": 0.5, "ramp_time_s": 0.05,
          "busy": {"peak_seconds": 0.5, "calibrate_seconds": 0.5, "settle_s": 0.1},
          "forecast": {"emulate_dir": "/nonexistent"}},
)
