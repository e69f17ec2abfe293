"""A stream_inference run's rows from what its producers and consumers reported: pure builders
(run.py orchestrates; these only do arithmetic on the reports and the configuration)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...kit import disk_metrics, latency
from .params import Config


@dataclass(frozen=True)
class Played:
    """What one run's producers and consumers reported (the row builders' input)."""
    jobs: list[dict]          # the streams' jobs (video, fps, frames, topic)
    streams: list[dict]       # each producer's 'done' message
    cons: list[dict]          # each consumer's 'done' message
    go: float                 # wall clock at go
    produced_at: float        # wall clock when the last producer was done
    lat: Any                  # every classified frame's end-to-end latency, ms (numpy array)
    consumer_lat: tuple = ()  # the same per consumer (lat is their concatenation: merged, not averaged)
    partitions: tuple = ()    # per consumer, the (topic, partition)s it was assigned


def disk_profile(s: dict, bytes_produced: int, rf: int) -> dict:
    """The Samsung SDC 2023 study's disk table from the monitor's summary, and bytes written per replicated byte."""
    base = disk_metrics.profile(s)
    if not base:
        return {}
    secs = s.get("monitor_seconds") or 0
    replicated = bytes_produced * rf
    return {**base, "write_amplification": s["device_write_bytes"] / replicated if replicated else None,
            **({"monitor_seconds": secs} if secs else {})}


def config_columns(run, c: Config, bootstrap: str, cl, jobs: list[dict]) -> dict:
    """What ran: the configuration, the cluster, the consumer group."""
    import numpy as np

    p, st, t = run.p, run.sweep.state, run.target
    v = st.videos[t.name]
    own = "own" in v
    return {
        "sweep": c.sweep, "streams": c.streams, "video": "own" if own else c.video,
        "video_width": None if own else v[c.video]["width"], "video_height": None if own else v[c.video]["height"],
        "fps_target": float(np.mean([j["fps"] for j in jobs])),
        "topics": c.topics, "partitions": c.partitions, "replication_factor": c.replication_factor,
        "brokers": st.brokers, "kafka": st.kafka["mode"], "kafka_version": st.kafka.get("version", ""),
        "broker_disks": (f"target '{t.name}' ({t.device.name if t.device else 'unknown device'})" if cl is not None
                         else f"external cluster {bootstrap} (device columns: this host's target '{t.name}')"),
        "flush_messages": p.flush_messages if cl is not None else None, "acks": p.acks,
        "jpeg_quality": p.jpeg_quality, "duration_s": p.duration_s, "consumers": len(st.consumers),
        "input_size": p.input_size, "batch_size": p.batch_size, "tf_device": st.tf_device}


def pipeline_columns(pl: Played) -> dict:
    """Frames and bytes through the pipeline, the streams' pace, the consumers' work and lag."""
    import numpy as np

    streams, cons = pl.streams, pl.cons
    frames_target = sum(j["frames"] for j in pl.jobs)
    delivered = sum(x["frames_delivered"] for x in streams)
    bytes_produced = sum(x["bytes_delivered"] for x in streams)
    classified = sum(x["frames_classified"] for x in cons)
    fps = [x["achieved_fps"] for x in streams]
    target_fps = [j["fps"] for j in pl.jobs]
    publish_s = max(x["end"] for x in streams) - pl.go
    end = max(x["end_t"] for x in cons)
    return {
        "frames_target": frames_target, "frames_sent": sum(x["frames_sent"] for x in streams),
        "frames_produced": delivered,
        "frames_failed": sum(x["frames_failed"] for x in streams), "frames_classified": classified,
        "frames_unconsumed": sum(x["lag_frames_end"] for x in cons),
        "frames_dropped": frames_target - classified,
        "bytes_produced": bytes_produced, "frame_kib_mean": bytes_produced / delivered / 1024 if delivered else None,
        "fps_achieved_mean": float(np.mean(fps)), "fps_achieved_min": float(np.min(fps)),
        "streams_below_fps": int(sum(f < 0.98 * tf for f, tf in zip(fps, target_fps))),
        "producer_late_frames": sum(x["late_frames"] for x in streams),
        "producer_decode_s_total": sum(x["decode_s"] for x in streams),
        "producer_encode_s_total": sum(x["encode_s"] for x in streams),
        "producer_publish_s_total": sum(x["produce_s"] for x in streams),
        "produce_mb_per_s": bytes_produced / publish_s / 1e6 if publish_s > 0 else None,
        "publish_s": publish_s, "drain_s": end - pl.produced_at,
        "classified_frames_per_s": classified / (end - pl.go) if end > pl.go else None,
        "consumer_infer_s_total": sum(x["infer_s"] for x in cons),
        "consumer_decode_s_total": sum(x["decode_s"] for x in cons),
        "consumer_lag_frames_max": max(x["lag_frames_max"] for x in cons),
        "consumer_lag_frames_end": sum(x["lag_frames_end"] for x in cons),
        "drained": all(x["drained"] for x in cons)}


def stream_rows(run, pl: Played) -> list[dict]:
    """streams.csv: one row per stream of the run."""
    return [{"run_id": run.run_id, "target": run.target.name, "stream": x["stream"], "topic": x["topic"],
             "fps_target": j["fps"], "fps_achieved": x["achieved_fps"], "frames_sent": x["frames_sent"],
             "frames_delivered": x["frames_delivered"], "frames_failed": x["frames_failed"],
             "late_frames": x["late_frames"], "lateness_ms_p99": x["lateness_ms_p99"],
             "decode_s": x["decode_s"], "encode_s": x["encode_s"], "produce_s": x["produce_s"],
             "errors": "; ".join(x["errors"])} for x, j in zip(pl.streams, pl.jobs)]


def consumer_rows(run, pl: Played) -> list[dict]:
    """consumers.csv: one row per consumer of the group in the run: its partitions, its frames and
    its own latency percentiles (the run's come from every consumer's latencies merged)."""
    return [{"run_id": run.run_id, "target": run.target.name, "consumer": i, "partitions": len(parts),
             "assigned": " ".join(f"{t.rsplit('-', 1)[-1]}:{k}" for t, k in parts),
             "frames_classified": x["frames_classified"], "drained": x["drained"],
             **latency.percentiles(lat, "latency", "ms")}
            for i, (x, parts, lat) in enumerate(zip(pl.cons, pl.partitions, pl.consumer_lat))]
