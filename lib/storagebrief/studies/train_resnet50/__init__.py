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
)
