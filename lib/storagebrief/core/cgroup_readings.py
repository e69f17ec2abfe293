"""What a cgroup measured: its processes' reads from a device and its memory (usage, breakdown, peak,
failcnt, OOM kills), for cgroup v1 and v2. Mixed into core.cgroups.Cgroup, which creates, limits and
removes the group; this half only reads (and reclaims) through `self.dirs` (controller -> (version, dir)).
"""
from __future__ import annotations

from pathlib import Path


class CgroupReadings:
    dirs: dict[str, tuple[int, Path]]

    def io_read_stats(self, device: tuple[int, int]) -> tuple[int, int] | None:
        """(bytes, requests) this group's processes read from the device.

        v1 blkio.throttle.io_service_bytes/io_serviced, v2 io.stat. Unlike the
        device-wide counters this excludes every other process on the disk.
        """
        return self.io_stats(device, "Read")

    def io_stats(self, device: tuple[int, int], op: str) -> tuple[int, int] | None:
        """(bytes, requests) of `op` ("Read" or "Write") this group's processes issued to the device (writes:
        those submitted in their own context, e.g. by fsync; the kernel's flusher threads count elsewhere)."""
        if "blkio" not in self.dirs:
            return None
        version, d = self.dirs["blkio"]
        key = f"{device[0]}:{device[1]}"

        def v1(fname: str) -> int:
            for line in (d / fname).read_text().splitlines():
                f = line.split()
                if len(f) == 3 and f[0] == key and f[1] == op:
                    return int(f[2])
            return 0
        try:
            if version == 1:
                return v1("blkio.throttle.io_service_bytes"), v1("blkio.throttle.io_serviced")
            letter = "r" if op == "Read" else "w"
            for line in (d / "io.stat").read_text().splitlines():
                f = line.split()
                if f and f[0] == key:
                    kv = dict(x.split("=", 1) for x in f[1:])
                    return int(kv.get(f"{letter}bytes", 0)), int(kv.get(f"{letter}ios", 0))
            return 0, 0
        except OSError:
            return None

    def _memory_file(self, v1: str, v2: str) -> Path | None:
        if "memory" not in self.dirs:
            return None
        version, d = self.dirs["memory"]
        return d / (v1 if version == 1 else v2)

    def reclaim(self, nbytes: int) -> None:
        """Make the kernel reclaim about nbytes from this group now, coldest pages first (proactive reclaim).

        v2 memory.reclaim where the kernel has it (>= 5.19); otherwise the limit is lowered to
        usage - nbytes, which reclaims synchronously in this call, and then restored: v1
        memory.limit_in_bytes, older v2 memory.high (memory.max would OOM-kill if reclaim fell short).
        OSError (EBUSY/EAGAIN) when the kernel could not reclaim that much.
        """
        version, d = self.dirs["memory"]
        if version == 2 and (d / "memory.reclaim").exists():
            (d / "memory.reclaim").write_text(str(nbytes))
            return
        limit_file = d / ("memory.limit_in_bytes" if version == 1 else "memory.high")
        usage = self.memory_usage() or 0
        if usage <= nbytes:
            return
        previous = limit_file.read_text().strip()
        try:
            limit_file.write_text(str(usage - nbytes))
        finally:
            limit_file.write_text(previous)

    def memory_usage(self) -> int | None:
        f = self._memory_file("memory.usage_in_bytes", "memory.current")
        return int(f.read_text()) if f is not None else None

    def memory_breakdown(self) -> dict[str, int]:
        """Anonymous, page-cache and mapped-file bytes charged to the group now."""
        f = self._memory_file("memory.stat", "memory.stat")
        if f is None:
            return {}
        stat = dict(line.split() for line in f.read_text().splitlines() if len(line.split()) == 2)
        if self.dirs["memory"][0] == 1:
            return {"anon_bytes": int(stat.get("total_rss", stat.get("rss", 0))),
                    "cache_bytes": int(stat.get("total_cache", stat.get("cache", 0))),
                    "mapped_file_bytes": int(stat.get("total_mapped_file", stat.get("mapped_file", 0)))}
        return {"anon_bytes": int(stat.get("anon", 0)), "cache_bytes": int(stat.get("file", 0)),
                "mapped_file_bytes": int(stat.get("file_mapped", 0))}

    def reset_memory_peak(self) -> None:
        """Start the peak over (v1 allows it; v2 kernels >= 6.12 too; otherwise a no-op)."""
        f = self._memory_file("memory.max_usage_in_bytes", "memory.peak")
        if f is not None:
            try:
                f.write_text("0")
            except OSError:
                pass

    def memory_limit_applied(self) -> int | None:
        if "memory" not in self.dirs:
            return None
        version, d = self.dirs["memory"]
        text = (d / ("memory.limit_in_bytes" if version == 1 else "memory.max")).read_text().strip()
        return None if text == "max" else int(text)

    def memory_stats(self) -> dict[str, int]:
        """peak bytes, failcnt and OOM kills (only what the kernel exposes)."""
        if "memory" not in self.dirs:
            return {}
        version, d = self.dirs["memory"]
        out: dict[str, int] = {}
        if version == 1:
            out["memory_peak_bytes"] = int((d / "memory.max_usage_in_bytes").read_text())
            out["memory_failcnt"] = int((d / "memory.failcnt").read_text())
            for line in (d / "memory.oom_control").read_text().splitlines():
                k, _, v = line.partition(" ")
                if k == "oom_kill":
                    out["oom_kills"] = int(v)
        else:
            peak = d / "memory.peak"
            if peak.exists():
                out["memory_peak_bytes"] = int(peak.read_text())
            for line in (d / "memory.events").read_text().splitlines():
                k, _, v = line.partition(" ")
                if k == "max":
                    out["memory_failcnt"] = int(v)
                elif k == "oom_kill":
                    out["oom_kills"] = int(v)
        return out
