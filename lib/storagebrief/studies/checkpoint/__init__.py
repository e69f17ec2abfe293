"""Checkpointing: llama3 checkpoints saved and restored, MLPerf Storage v3.0 / DLIO style, with
MLPerf's own throughput (rank 0's clock) beside the honest one (the last rank's fsync)."""
from ...core.study import Study

STUDY = Study(
    name="checkpoint",
    command="checkpoint",
    title="Checkpointing: llama3 checkpoints saved and restored",
    notebook="notebooks/06_checkpoint.py",
    outputs=("runs.csv", "checkpoints.csv", "ranks.csv", "timeseries", "inventory.json", "notes.json",
             "study.json", "mlperf_summary.json", "notebook.ipynb"),
    brief_inputs=("runs.csv", "checkpoints.csv", "ranks.csv", "study.json", "mlperf_summary.json",
                  "notes.json", "inventory.json"),
    # llama3-8b's 8 ranks, each file divided by 65536 (≈ 1.6 MiB a checkpoint): every path (saves,
    # retain's deletions, cold restores with a rank shift) in a second or two per target
    tiny={"models": ["llama3-8b"], "scale": 65536, "saves": 3, "restores": 2, "pause_s": 0.05,
          "retain": 2, "rank_shift": 1, "write_block_mib": 1, "read_block_mib": 1, "readers_per_rank": 2,
          "repeats": 2},
)
