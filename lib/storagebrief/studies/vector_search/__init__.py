"""Vector search on SSD: a DiskANN (Vamana + PQ) disk index searched with direct I/O, recall@k beside QPS, per-query
tails, reads per query three ways, and QPS predicted from the target's own 4 KiB random-read IOPS (MLPerf
Storage v3.0's vector-database workload, measured so that its figures can be judged)."""
from ...core.study import Study

STUDY = Study(
    name="vector_search",
    command="vector-search",
    title="Vector search: QPS at a stated recall, reads per query, QPS predicted from the device's IOPS",
    notebook="notebooks/09_vector_search.py",
    outputs=("runs.csv", "points.csv", "study.json", "probes.csv", "mlperf", "logs", "timeseries", "inventory.json",
             "notes.json", "notebook.ipynb"),
    brief_inputs=("runs.csv", "points.csv", "study.json", "probes.csv", "notes.json", "inventory.json",
                  "mlperf"),
    tiny={"targets": [], "num_vectors": 2000, "dimension": 16, "clusters": 8, "queries": 20, "min_queries": 5,
          "search_list": [10, 20], "beam_width": [1], "threads": [1], "graph_degree": 16, "build_complexity": 32,
          "pq_chunks": 8, "max_point_s": 1.0, "probe_s": 0.3, "repeats": 1, "uniform_control": True},
)
