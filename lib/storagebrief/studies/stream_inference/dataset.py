"""The videos the streams play: generated with cv2.VideoWriter, or the user's own folder.

Generated content moves (a scrolling noise texture over a drifting colour gradient and a moving
block), so consecutive frames differ and neither the video codec nor JPEG squeezes a frame to
nothing; a frame's JPEG size is measured and kept in the manifest (it sizes the free-space check).
"""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ...core import results
from .params import Video

VIDEO_EXTENSIONS = {".mp4", ".avi", ".mkv", ".mov", ".webm", ".m4v", ".mpg", ".mpeg", ".ts"}
CODECS = (("mp4v", ".mp4"), ("MJPG", ".avi"))   # first one OpenCV can write here wins


def frame_at(i: int, w: int, h: int, texture: np.ndarray, fps: float) -> np.ndarray:
    """Frame i (BGR uint8): gradient drifting with time + scrolling noise + a moving block."""
    t = i / fps
    x = np.linspace(0, 1, w, dtype=np.float32)[None, :]
    y = np.linspace(0, 1, h, dtype=np.float32)[:, None]
    base = np.stack([(x + 0.15 * t) % 1.0 * np.ones_like(y), (y + 0.1 * t) % 1.0 * np.ones_like(x),
                     0.5 + 0.5 * np.sin(2 * np.pi * (x + y + 0.2 * t))], axis=-1) * 200
    th, tw = texture.shape[:2]
    dy, dx = int(3 * i) % (th - h), int(5 * i) % (tw - w)
    img = base + texture[dy:dy + h, dx:dx + w]
    bw, bh = max(4, w // 6), max(4, h // 6)
    bx, by = int((w - bw) * (0.5 + 0.5 * np.sin(t))), int((h - bh) * (0.5 + 0.5 * np.cos(0.7 * t)))
    img[by:by + bh, bx:bx + bw] = (30, 220, 240)
    return np.clip(img, 0, 255).astype(np.uint8)


def _write(path_stem: Path, video: Video, frames: int, rng) -> Path:
    import cv2

    texture = rng.normal(0, 28, size=(video.height * 2, video.width * 2, 3)).astype(np.float32)
    for fourcc, ext in CODECS:
        path = path_stem.with_suffix(ext)
        writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), video.fps, (video.width, video.height))
        if not writer.isOpened():
            path.unlink(missing_ok=True)
            continue
        try:
            for i in range(frames):
                writer.write(frame_at(i, video.width, video.height, texture, video.fps))
        finally:
            writer.release()
        return path
    raise OSError(f"OpenCV cannot write a video here (tried {', '.join(c for c, _ in CODECS)})")


def sample_jpeg_bytes(video: Video, quality: int, seed: int) -> float:
    """JPEG bytes of one generated frame (sizes the free-space check before any video is written)."""
    import cv2

    rng = np.random.default_rng(seed)
    texture = rng.normal(0, 28, size=(video.height * 2, video.width * 2, 3)).astype(np.float32)
    ok, buf = cv2.imencode(".jpg", frame_at(0, video.width, video.height, texture, video.fps),
                           [cv2.IMWRITE_JPEG_QUALITY, quality])
    return float(len(buf))


def jpeg_bytes(path: Path, quality: int, samples: int = 8) -> tuple[float, int]:
    """(mean JPEG bytes per frame at `quality`, frames) of a video, from `samples` decoded frames."""
    import cv2

    cap = cv2.VideoCapture(str(path))
    try:
        if not cap.isOpened():
            raise OSError(f"OpenCV cannot open video {path}")
        count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
        sizes = []
        while len(sizes) < samples:
            ok, frame = cap.read()
            if not ok:
                break
            ok, buf = cv2.imencode(".jpg", frame, [cv2.IMWRITE_JPEG_QUALITY, quality])
            sizes.append(len(buf))
    finally:
        cap.release()
    if not sizes:
        raise OSError(f"video {path}: no frame could be decoded")
    return float(np.mean(sizes)), count


def generate_videos(directory: Path, videos: list[Video], duration_s: float, quality: int, seed: int,
                    log=print) -> dict[str, dict]:
    """One file per video spec (reused when the manifest matches); returns text -> info."""
    spec = {"videos": [v.text for v in videos], "duration_s": duration_s, "quality": quality, "seed": seed,
            "version": 1}
    manifest = directory / "manifest.json"
    if manifest.exists():
        try:
            old = json.loads(manifest.read_text())
            if old.get("spec") == spec and all((directory / i["file"]).exists() for i in old["videos"].values()):
                return {k: {**i, "path": str(directory / i["file"])} for k, i in old["videos"].items()}
        except (ValueError, KeyError, TypeError):
            pass
    rng = np.random.default_rng(seed)
    info = {}
    with results.staged_dir(directory) as tmp:
        for v in videos:
            frames = max(1, int(round(duration_s * v.fps)))
            path = _write(tmp / v.slug, v, frames, rng)
            jpeg, count = jpeg_bytes(path, quality)
            info[v.text] = {"file": path.name, "frames": frames, "width": v.width, "height": v.height, "fps": v.fps,
                            "video_bytes": path.stat().st_size, "jpeg_bytes_mean": jpeg}
            log(f"generated video {v.text}: {frames} frames, {path.stat().st_size / 1e6:.1f} MB, "
                f"JPEG q{quality} ~{jpeg / 1e3:.0f} kB/frame")
        results.write_json(tmp / "manifest.json", {"spec": spec, "videos": info})
    return {k: {**i, "path": str(directory / i["file"])} for k, i in info.items()}


def list_videos(directory: Path, quality: int) -> tuple[list[dict], list[tuple[str, str]]]:
    """The user's own videos (sorted; stream i plays video i mod n), each probed with OpenCV, and the
    files skipped with the reason: (usable, [(name, why), ...]). One bad file never ends the study."""
    out, skipped = [], []
    for f in sorted(p for p in Path(directory).rglob("*") if p.is_file() and p.suffix.lower() in VIDEO_EXTENSIONS):
        with _ffmpeg_messages() as said:
            info, why = _probe(f, quality)
        if info is None:
            skipped.append((str(f.relative_to(directory)), why + _first_message(said)))
        else:
            out.append(info)
    return out, skipped


def _probe(f: Path, quality: int) -> tuple[dict | None, str]:
    import cv2

    cap = cv2.VideoCapture(str(f))
    opened = cap.isOpened()
    fps = cap.get(cv2.CAP_PROP_FPS) if opened else 0
    w, h = (int(cap.get(cv2.CAP_PROP_FRAME_WIDTH) or 0), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT) or 0)) if opened else (0, 0)
    cap.release()
    if not opened:
        return None, "OpenCV cannot open it"
    if not fps or fps <= 0 or not w:
        return None, "OpenCV finds no frame rate or frame size in it"
    try:
        jpeg, count = jpeg_bytes(f, quality)
    except OSError:
        return None, "it opens but no frame could be decoded"
    return {"file": f.name, "path": str(f), "frames": count, "width": w, "height": h, "fps": float(fps),
            "video_bytes": f.stat().st_size, "jpeg_bytes_mean": jpeg}, ""


@contextmanager
def _ffmpeg_messages():
    """FFmpeg inside OpenCV writes its complaints to file descriptor 2: keep them off the user's
    terminal (an expected error is one line) and keep them as the reason a file was skipped."""
    said: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield said
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            said.append(tmp.read(65536).decode(errors="replace"))


def _first_message(said: list[str]) -> str:
    """' (FFmpeg: moov atom not found)' from '[mov,mp4,... @ 0x55] moov atom not found', or ''."""
    for line in "".join(said).splitlines():
        text = re.sub(r"^(\[[^\]]*\]\s*)+", "", line).strip()
        if text:
            return f" (FFmpeg: {text[:120]})"
    return ""
