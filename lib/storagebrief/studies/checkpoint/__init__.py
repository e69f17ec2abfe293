"""Checkpointing: llama3 checkpoints saved and restored, MLPerf Storage v3.0 / DLIO style, with
MLPerf's own throughput (rank 0's clock) beside the honest one (the last rank's fsync)."""
from ...core.study import Study

STUDY = Study(
    name="checkpoint",
    command="checkpoint",
    title="Checkpointing: llama3 checkpoints saved and restored",
    notebook="notebooks/06_checkpoint.py",
    object_targets=True,        # the save / restore protocol runs on S3 targets (objects.py); cost, framework: directories
    outputs=("runs.csv", "checkpoints.csv", "ranks.csv", "cost_checkpoints.csv", "latency.csv", "timeseries",
             "inventory.json", "notes.json", "study.json", "mlperf", "logs", "notebook.ipynb"),
    brief_inputs=("runs.csv", "checkpoints.csv", "ranks.csv", "cost_checkpoints.csv", "latency.csv", "study.json",
                  "mlperf", "notes.json", "inventory.json"),
    # llama3-8b's 8 ranks, each file divided by 65536 (≈ 1.6 MiB a checkpoint): every path (saves,
    # retain's deletions, cold restores with a rank shift) in a second or two per target; the cost
    # sweep: baseline, sync and async at one interval, 6 steps of 20 ms;
    tiny={"models": ["llama3-8b"], "scale": 65536, "saves": 3, "restores": 2, "pause_s": 0.05,
          "retain": 2, "rank_shift": 1, "write_block_mib": 1, "read_block_mib": 1, "readers_per_rank": 2,
          "repeats": 2,
          "cost": {"modes": ["none", "sync", "async"], "intervals_steps": [2], "steps": 6, "compute_s": 0.02,
                   "files": 2},
          # the framework sweep: one TensorFlow job (its start-up is most of it), a 30 k-parameter BERT, 2 steps
          "framework": {"scenarios": ["default"], "steps": 2, "every_steps": 1, "default_every_steps": 2,
                        "layers": 1, "hidden": 32, "heads": 2, "ffn": 64, "seq_len": 16, "vocab": 512,
                        "predictions": 4, "batch_size": 2, "threads": 1}},
)
