"""stream_inference arithmetic on runs.csv: the study's columns, headline deltas and metrics.json."""
from __future__ import annotations

from ...core import columns
from ...core.columns import Column
from ...kit import latency, runs
from ...kit.runs import ok_runs
from ...report.headlines import versus_reference

KEYS = ["streams", "video", "topics", "partitions", "replication_factor"]

# Every column a run's row holds beyond the engine's and the monitor's (core.columns).
COLUMNS: tuple[Column, ...] = (
    Column("sweep", "", "which sweep the configuration belongs to: streams, video_topics, partitions, replication",
           "text"),
    Column("streams", "", "concurrent video streams (one producer process each)"),
    Column("video", "", "the streams' video, '<geometry>@<fps>'; 'own' for stream_inference.video_dir", "text"),
    Column("video_width", "px", "width of the generated video; empty for own videos"),
    Column("video_height", "px", "height of the generated video; empty for own videos"),
    Column("fps_target", "frames/s", "frame rate the streams play at (mean over streams)"),
    Column("topics", "", "Kafka topics the streams publish to (stream i -> topic i mod topics)"),
    Column("partitions", "", "partitions per topic"),
    Column("replication_factor", "", "replicas of every partition"),
    Column("brokers", "", "Kafka nodes (started here, or in the external cluster)"),
    Column("kafka", "", "started (brokers started by the study on the target) or external", "text"),
    Column("kafka_version", "", "Apache Kafka version of the started cluster; empty for an external one", "text"),
    Column("broker_disks", "", "where the brokers' log.dirs are (the target and its device)", "text"),
    Column("flush_messages", "", "the brokers' log.flush.interval.messages; empty: OS writeback or external"),
    Column("acks", "", "the producers' acks setting", "text"),
    Column("jpeg_quality", "", "JPEG quality of the published frames (1-100)"),
    Column("duration_s", "s", "seconds of video each stream plays"),
    Column("consumers", "", "processes in the consumer group"),
    Column("input_size", "px", "ResNet50 input size (square)"),
    Column("batch_size", "", "frames per ResNet50 batch"),
    Column("tf_device", "", "the device TensorFlow classified on (CPU or GPU)", "text"),
    Column("frames_target", "", "frames the streams were to play (duration x fps, all streams)"),
    Column("frames_sent", "", "frames the producers published"),
    Column("frames_produced", "", "frames Kafka acknowledged (delivered)"),
    Column("frames_failed", "", "frames whose delivery failed or was still queued at the end"),
    Column("frames_classified", "", "frames the consumer group classified"),
    Column("frames_unconsumed", "", "frames left in the topics after the drain"),
    Column("frames_dropped", "", "frames the streams were to play that were never classified"),
    Column("bytes_produced", "bytes", "JPEG bytes Kafka acknowledged"),
    Column("frame_kib_mean", "KiB", "mean JPEG frame size"),
    Column("fps_achieved_mean", "frames/s", "frame rate the streams achieved, mean over streams"),
    Column("fps_achieved_min", "frames/s", "frame rate of the slowest stream"),
    Column("streams_below_fps", "", "streams below 98 % of their frame rate"),
    Column("producer_late_frames", "", "frames published more than one frame slot late, all streams"),
    Column("producer_decode_s_total", "s", "producers' OpenCV decode time, all streams"),
    Column("producer_encode_s_total", "s", "producers' JPEG encode time, all streams"),
    Column("producer_publish_s_total", "s", "producers' time in produce(), all streams"),
    Column("produce_mb_per_s", "MB/s", "bytes produced per second of publishing"),
    Column("publish_s", "s", "from go to the last producer's end"),
    Column("drain_s", "s", "from the last producer's end to the last consumer's end"),
    Column("classified_frames_per_s", "frames/s", "frames classified per second, go to the consumers' end"),
    Column("consumer_infer_s_total", "s", "consumers' ResNet50 inference time"),
    Column("consumer_decode_s_total", "s", "consumers' JPEG decode and resize time"),
    Column("consumer_lag_frames_max", "", "most frames waiting in the topics at a once-a-second sample"),
    Column("consumer_lag_frames_end", "", "frames waiting in the topics at the end"),
    Column("drained", "", "True when the consumers classified every frame before the drain deadline", "bool"),
    *(Column(f"latency_ms_{k}", "ms", f"end-to-end frame latency (publish to class known), {k}")
      for k in latency.STATS),
    Column("broker_log_bytes", "bytes", "bytes of the run's partitions in the brokers' log.dirs"),
    Column("log_overhead_ratio", "", "broker_log_bytes / (bytes produced x RF)"),
    Column("cluster_startup_s", "s", "seconds the target's Kafka cluster took to start"),
    Column("consumer_startup_s", "s", "seconds the consumer group took to load TensorFlow and ResNet50"),
    Column("measured_s", "s", "seconds the monitor measured (the run's clock)"),
    Column("run_wall_s", "s", "wall seconds of the whole run (topics, producers, drain, clean-up)"),
    Column("device_iops_avg", "IO/s", "the brokers' device, reads + writes per second"),
    Column("device_mib_per_s_avg", "MiB/s", "the brokers' device, read + write throughput"),
    Column("device_response_time_us", "µs", "read and write latency weighted by their IOPS"),
    Column("device_read_percent", "%", "reads' share of the device bytes"),
    Column("write_amplification", "", "device write bytes / (bytes produced x RF)"),
    Column("monitor_seconds", "s", "seconds between the monitor's first and last sample"),
)
# The runs.csv columns this study's brief and arithmetic use unconditionally, and what they hold; the
# brief's gate (brief/inputs.py) refuses a runs.csv without them, so the code below may assume them.
RUNS_COLUMNS = columns.kinds((
    "sweep", "video", "streams", "topics", "partitions", "replication_factor", "classified_frames_per_s",
    "latency_ms_p99", "frames_dropped", "streams_below_fps", "produce_mb_per_s"), COLUMNS)


def headlines(frame, target_names: list[str]) -> list[dict]:
    """Reference target (first) vs each other, over matched configurations."""
    return versus_reference(ok_runs(frame), target_names, KEYS,
                            [("classified_frames_per_s", "higher", "Frames classified per second"),
                             ("latency_ms_p99", "lower", "End-to-end frame latency, p99"),
                             ("device_response_time_us", "lower", "Brokers' device response time")])


def _per_target(g) -> dict:
    return {"max_classified_frames_per_s": float(g.classified_frames_per_s.max()),
            "max_device_iops_avg": float(g.device_iops_avg.max()) if "device_iops_avg" in g else None,
            "max_produce_mb_per_s": float(g.produce_mb_per_s.max()),
            "latency_ms_p99_max": float(g.latency_ms_p99.max()),
            "frames_dropped": int(g.frames_dropped.sum()),
            "streams_below_fps": int(g.streams_below_fps.sum())}


def metrics(frame, target_names: list[str]) -> dict:
    """Headline figures for `dvc metrics show`."""
    return runs.metrics(frame, target_names, headlines, _per_target)
