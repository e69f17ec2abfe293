"""What this machine says about itself and its block devices, for the raw trace's header (written
by core.blocktrace) and its decoder (characterize: may a device number be looked up here?). A leaf:
stdlib only, imports nothing of the package."""
from __future__ import annotations

import os
from pathlib import Path


def host_identity() -> dict:
    """Who records a trace. A device number names a disk only on the machine and in the boot that
    handed it out, so a decoder may look the number up in sysfs only when all three match."""
    def first_line(path: str) -> str:
        try:
            return Path(path).read_text().strip()[:64]
        except OSError:
            return ""
    return {"hostname": os.uname().nodename, "machine_id": first_line("/etc/machine-id"),
            "boot_id": first_line("/proc/sys/kernel/random/boot_id")}


def same_host(recorded: dict) -> bool:
    """Whether a trace's recorded host identity is this machine in this boot."""
    here = host_identity()
    return bool(here["boot_id"]) and isinstance(recorded, dict) and all(recorded.get(k) == v for k, v in here.items())


def device_capacity_sectors(device: tuple[int, int]) -> int | None:
    """A block device's capacity in 512-byte sectors (sysfs: /sys/dev/block/MAJ:MIN/size); None
    when unknown."""
    try:
        return int(Path(f"/sys/dev/block/{device[0]}:{device[1]}/size").read_text()) or None
    except (OSError, ValueError):
        return None
