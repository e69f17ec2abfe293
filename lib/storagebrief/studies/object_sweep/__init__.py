"""GET and PUT at object sizes x concurrency, idle vs busy, on S3 targets and, beside them, on directories
(the object-storage analogue of the transfer sweep; warp's and elbencho's axes)."""
from ...core.study import Study

STUDY = Study(
    name="object_sweep",
    command="object-sweep",
    title="Objects: GET and PUT at object size × concurrency, directory vs S3",
    notebook="notebooks/08_object_sweep.py",
    outputs=("runs.csv", "points.csv", "pairs.csv", "study.json", "logs", "timeseries", "inventory.json",
             "notes.json", "notebook.ipynb"),
    brief_inputs=("runs.csv", "points.csv", "pairs.csv", "study.json", "notes.json", "inventory.json"),
    upstream=("reports/transfer_sweep/points.csv",),    # its brief section's fio column (brief.py _fio_like)
    object_targets=True,
    tiny={"targets": [], "object_sizes": ["64k", "1m"], "concurrency": [1, 2], "repeats": 1, "mib_per_point": 2,
          "min_objects": 4, "max_objects": 16, "loads": ["idle", "busy"], "busy": {"settle_s": 0.05}},
)
