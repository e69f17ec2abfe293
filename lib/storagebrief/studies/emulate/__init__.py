"""Emulated-accelerator training, DLIO / MLPerf Storage style (KIOXIA CM7 brief, 2024)."""
from ...core.study import Study

STUDY = Study(
    name="emulate",
    command="emulate",
    title="Emulated-accelerator training (DLIO / MLPerf Storage style)",
    notebook="notebooks/02_emulated_training.py",
    outputs=("runs.csv", "accelerators.csv", "hosts.csv", "latency_histograms.csv", "timeseries", "inventory.json",
             "study.json", "notes.json", "mlperf_results.json", "mlperf", "notebook.ipynb"),
    brief_inputs=("runs.csv", "inventory.json", "study.json", "latency_histograms.csv", "hosts.csv", "notes.json",
                  "mlperf"),
    object_targets=True,
    tiny={"workloads": ["unet3d"], "accelerator_type": "v100", "num_files": 64, "dataset_sizing": "fixed",
          "epochs": 2, "repeats": 2, "accelerators": [1, 2], "read_threads": 2, "prefetch": 1,
          "read_block_kib": 64, "memory_limit_mib": 16,
          "workload_overrides": {"unet3d": {"record_bytes": 262144, "record_bytes_stdev": 0,
                                            "batch_size_by_accelerator": {"v100": 2},
                                            "compute_s": {"v100": 0.02}}}},
)
