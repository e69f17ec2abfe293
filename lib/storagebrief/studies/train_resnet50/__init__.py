"""Real ResNet50 training under cgroup memory limits, with a disk profile per run (Samsung SDC)."""
from ...core.study import Study

STUDY = Study(
    name="train_resnet50",
    command="train-resnet50",
    title="ResNet50 training under memory limits",
    notebook="notebooks/03_train_resnet50.py",
    outputs=("runs.csv", "jobs.csv", "epochs.csv", "timeseries", "logs", "inventory.json", "notes.json",
             "notebook.ipynb"),
    brief_inputs=("runs.csv", "jobs.csv", "epochs.csv", "timeseries", "notes.json", "inventory.json"),
    upstream=("reports/preprocess/outputs.json",),
    tiny={"dataset": "generated", "dataset_images": 32, "record_kib": 32, "shards": 2,
          "input_size": 32, "batch_size": 8, "epochs": 1, "warmup_steps": 1,
          "memory_limits": ["none", "2.5:1"], "parallel_models": [1], "parallel_memory": "none",
          "ingest_mb_per_s": 0, "checkpoint_every_steps": 0, "stall_timeout_s": 300,
          "preprocess_outputs": "/nonexistent/outputs.json"},
)
