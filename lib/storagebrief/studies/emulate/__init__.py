"""Emulated-accelerator training, DLIO / MLPerf Storage style (KIOXIA CM7 brief, 2024)."""
from ...core.study import Study

STUDY = Study(
    name="emulate",
    command="emulate",
    title="Emulated-accelerator training (DLIO / MLPerf Storage style)",
    notebook="notebooks/02_emulated_training.py",
    outputs=("runs.csv", "accelerators.csv", "hosts.csv", "latency_histograms.csv", "timeseries", "inventory.json",
             "study.json", "notes.json", "mlperf_results.json", "notebook.ipynb"),
    brief_inputs=("runs.csv", "inventory.json", "study.json", "latency_histograms.csv", "hosts.csv", "notes.json"),
)
