# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 — Streaming inference through Kafka: the brokers' disk profile
#
# Reproduces the inference half of *Benchmarking Storage with AI Workloads* (Samsung, SDC): S concurrent video streams are decoded with OpenCV at their frame rate, every frame is JPEG-encoded and published to a real Apache Kafka cluster (KRaft, 3 combined broker+controller nodes whose `log.dirs` live on the target under test, replication factor 3), and a consumer group classifies the frames with `tf.keras.applications.ResNet50(weights=None)`. Per run: frames produced, classified and dropped, achieved FPS per stream, consumer lag, end-to-end latency percentiles, and the brokers' device profile (IOPS, MiB/s, request KiB, response time, CPU).
#
# **Run All** runs it with `params.yaml`'s knobs (needs `make kafka` once); change any of them in the parameters cell below. Your edits stay in this notebook's `.ipynb` (git ignores it); the tracked `.py` beside it keeps params.yaml's values (docs/notebooks.md). Results go to a new folder `reports/runs/<time>/stream_inference/` (the pipeline's `reports/stream_inference/` belongs to `dvc repro`). The same study runs without Jupyter: `storagebrief stream-inference -S stream_inference.streams=[2,4] --out DIR`.

# %% tags=["parameters"]
# This study's knobs: params.yaml's `stream_inference:` section. A value changed here applies to this notebook's
# runs (merged over params.yaml, validated before any work) and is saved in this .ipynb only, never in
# the tracked .py; change params.yaml for `dvc repro` too.
stream_inference = {
    'targets': [],  # subset of target names; []: every target
    'bootstrap_servers': [],  # host:port of an existing cluster: then no brokers are started
    'kafka_lib': None,  # folder of Kafka jars; None: .kafka/lib (make kafka)
    'brokers': 3,  # combined broker+controller nodes per target (log.dirs under the target)
    'broker_heap_mib': 320,  # -Xmx of each broker JVM
    'base_port': None,  # None: free loopback ports; N: ports N..N+2*brokers-1 (must be free)
    'startup_timeout_s': 120,
    'flush_messages': 24,  # Kafka log.flush.interval.messages: brokers fsync a partition every N messages
    # (1 s of a 24 FPS stream), so a run's frames reach the device within it (None =
    # OS writeback, Kafka's default). 1 under hdd_7200: 66-72 s per run (fsync-bound)
    'videos': ['240p@24'],  # <geometry>@<fps>: 144p 240p 360p 480p 720p 1080p 1440p 2160p
    'video_dir': None,  # a folder of your own videos (stream i plays video i mod n); None: generate
    'duration_s': 4,  # seconds of video each stream plays (paper: 300)
    'streams': [2, 4],  # concurrent streams (paper 30, 100, 300)
    'topics': [1, 3],  # topics the streams spread over (stream i -> topic i mod T)
    'partitions': [6],
    'replication_factors': [3],
    'jpeg_quality': 90,
    'acks': 'all',
    'consumers': 1,  # processes in the consumer group (static partition split)
    'input_size': 32,  # ResNet50 input (paper 224)
    'batch_size': 16,
    'drain_timeout_s': 20,  # after the last frame: time for the consumers to classify what is queued
    'repeats': 1,
    'keep_data': False,  # keep the brokers' data under the target after the study
    'seed': 0,
}
targets = None     # None: params.yaml's targets; or a list like params.yaml's (name, path, profile)
out_dir = None     # None: a new reports/runs/<time>/stream_inference/ (dvc repro passes reports/stream_inference)
progress = "auto"  # a bar in JupyterLab; "lines": one line per run

# %%
from storagebrief import brief, notebook

runs = notebook.run_study("stream_inference", stream_inference, targets=targets, out_dir=out_dir, progress=progress)

# %% [markdown]
# ## Runs
# One row per measured run (`runs.csv`; per-stream rows in `streams.csv`, per-second consumer flow in `timeseries/<run_id>-flow.csv`, broker logs in `logs/`); units are in the column headers.

# %%
notebook.show_runs(runs, ["target", "sweep", "streams", "video", "topics", "partitions",
                       "replication_factor", "frames_produced", "frames_classified", "frames_dropped",
                       "fps_achieved_min", "classified_frames_per_s", "latency_ms_p50", "latency_ms_p99",
                       "device_iops_avg", "device_mib_per_s_avg", "device_avg_write_kib",
                       "device_response_time_us", "write_amplification", "cpu_iowait_percent"])

# %% [markdown]
# ## Results
# The same tables, figures and analysis that the brief shows.

# %%
brief.study_section("stream_inference", runs.attrs["out_dir"])
