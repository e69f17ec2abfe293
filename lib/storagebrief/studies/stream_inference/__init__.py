"""Streaming inference through a real Apache Kafka cluster: S video streams -> JPEG frames in Kafka
-> a ResNet50 consumer group, with the brokers' disk profile per target (Samsung SDC seed)."""
from ...core.study import Study

STUDY = Study(
    name="stream_inference",
    command="stream-inference",
    title="Streaming inference through Kafka",
    notebook="notebooks/05_stream_inference.py",
    outputs=("runs.csv", "streams.csv", "consumers.csv", "timeseries", "logs", "inventory.json", "study.json", "notes.json",
             "notebook.ipynb"),
    brief_inputs=("runs.csv", "streams.csv", "inventory.json", "study.json", "notes.json"),
    tiny={"videos": ["144p@12"], "duration_s": 2, "streams": [1], "topics": [1], "partitions": [2],
          "replication_factors": [3], "broker_heap_mib": 256, "drain_timeout_s": 10,
          "input_size": 32, "batch_size": 8},
)
