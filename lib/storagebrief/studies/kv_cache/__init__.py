"""KV-cache offload: MLPerf Storage v3.0's KV-cache workload measured both ways (MLPerf's bytes ÷ nominal
duration beside bytes ÷ the time I/O was in flight), and beyond how many tokens reloading a KV cache from
this storage beats recomputing it (the prefill FLOP model, its rate measured here and catalogued)."""
from ...core.study import Study

STUDY = Study(
    name="kv_cache",
    command="kv-cache",
    title="KV-cache offload: reload from storage or recompute",
    notebook="notebooks/07_kv_cache.py",
    outputs=("runs.csv", "latency.csv", "prefill.csv", "breakeven.csv", "timeseries", "inventory.json",
             "notes.json", "study.json", "mlperf", "notebook.ipynb"),
    brief_inputs=("runs.csv", "latency.csv", "prefill.csv", "breakeven.csv", "study.json",
                  "mlperf", "notes.json", "inventory.json"),
    # llama3.1-8b's real 128 KiB per token, 16-32 token contexts (2-4 MiB files), 2 clients × 2 users for
    # half a second; the prefill measurement off (TensorFlow's start-up is most of a tiny run)
    tiny={"run": ["tiny"], "workloads": {"tiny": {"model": "llama3.1-8b", "users_per_client": 2,
                                                  "concurrency": 2, "cpu_tier_gib": 0.005}},
          "clients": 2, "contexts": [{"tokens": 16, "weight": 1}, {"tokens": 32, "weight": 1}],
          "turns": [{"tokens": 3, "weight": 1}], "turn_tokens": 8, "duration_s": 0.5, "repeats": 2,
          "write_block_mib": 1, "prefill": {"measure": False}},
)
