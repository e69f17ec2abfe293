"""Storage targets: a name, a directory, and optionally an emulated device profile.

A target resolves to the block device behind its directory (st_dev ->
/sys/dev/block/MAJ:MIN -> whole disk), its filesystem and mount options. An
emulated profile caps the device's read/write bandwidth and IOPS for the
processes of a run with cgroup blkio throttling (v1 blkio.throttle.*, v2
io.max), so an A-vs-B comparison runs on one disk.

What the throttle can and cannot emulate: it enforces bandwidth and request-rate
ceilings on everything the run reads (buffered or direct); it does not emulate
seek-distance effects or device latency below the ceiling, and with cgroup v1
it cannot attribute buffered (page-cache) writeback to the run, so buffered
writes are throttled only under cgroup v2.
"""
from __future__ import annotations

import math
import mmap
import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, field_validator

from .folders import study_folder

# Directories a target may never be, nor lie under (a study writes there).
FORBIDDEN_TREES = ("/dev", "/proc", "/sys", "/boot", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64")
FORBIDDEN_EXACT = ("/", "/home", "/root", "/tmp", "/var", "/mnt", "/media", "/opt", "/srv", "/run")


class TargetError(ValueError):
    pass


# What the kernel's throttle files hold, measured on this VM (kernel 6.18, cgroup v1) by writing and
# reading back blkio.throttle.*_device: bytes/s are u64, and 2^64-1 means "no limit" (nothing is stored);
# IOPS are stored as a 32-bit unsigned int, 2^32-1 means "no limit", and larger values wrap silently
# (4294967296 is stored as 0, 4294967297 as 1: a 1-IOPS device). 0 removes a limit. v2 io.max uses the
# same fields. A profile outside these bounds is refused before any work.
MAX_BYTES_PER_S = 2**64 - 2
MAX_IOPS = 2**32 - 2
MB = 1_000_000


def bytes_per_s(mb_per_s: float) -> int:
    """A profile's MB/s (10^6 bytes) as the integer bytes/s written to the kernel."""
    return int(round(mb_per_s * MB))


class DeviceProfile(BaseModel):
    """Ceilings of an emulated device; None means not capped. Every value must be one the kernel's
    throttle can hold (cgroups.py also reads each limit back after writing it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    description: str = ""
    read_mb_per_s: float | None = None
    write_mb_per_s: float | None = None
    read_iops: int | None = None
    write_iops: int | None = None

    @field_validator("read_mb_per_s", "write_mb_per_s")
    @classmethod
    def _bandwidth_fits(cls, v: float | None) -> float | None:
        if v is not None and not (math.isfinite(v) and 1 <= bytes_per_s(v) <= MAX_BYTES_PER_S):
            raise ValueError(f"outside what the kernel's blkio/io.max throttle holds: allowed "
                             f"{1 / MB:g}..{MAX_BYTES_PER_S / MB:.2f} MB/s (1..{MAX_BYTES_PER_S} bytes/s)")
        return v

    @field_validator("read_iops", "write_iops")
    @classmethod
    def _iops_fits(cls, v: int | None) -> int | None:
        if v is not None and not 1 <= v <= MAX_IOPS:
            raise ValueError(f"outside what the kernel's blkio/io.max throttle holds: allowed 1..{MAX_IOPS} IOPS "
                             "(stored as a 32-bit number; larger values wrap around)")
        return v


# Figures are typical datasheet ceilings of each class (MB = 10^6 bytes), documented
# in docs/targets.md. They cap bandwidth and request rate, nothing else.
DEVICE_PROFILES: dict[str, DeviceProfile] = {
    "hdd_7200": DeviceProfile(
        description="7200 rpm SATA HDD: ~150 MB/s sequential, ~150 random IOPS",
        read_mb_per_s=150, write_mb_per_s=150, read_iops=150, write_iops=150),
    "sata_ssd": DeviceProfile(
        description="SATA 6 Gb/s SSD (e.g. QLC 5210 ION class): 540/520 MB/s, 90k/30k IOPS",
        read_mb_per_s=540, write_mb_per_s=520, read_iops=90_000, write_iops=30_000),
    "nvme_gen3": DeviceProfile(
        description="PCIe 3.0 x4 NVMe SSD: 3,500/3,000 MB/s, 600k/300k IOPS",
        read_mb_per_s=3500, write_mb_per_s=3000, read_iops=600_000, write_iops=300_000),
    "nvme_gen4": DeviceProfile(
        description="PCIe 4.0 x4 NVMe SSD: 7,000/5,000 MB/s, 1M/500k IOPS",
        read_mb_per_s=7000, write_mb_per_s=5000, read_iops=1_000_000, write_iops=500_000),
    "nvme_gen5": DeviceProfile(
        description="PCIe 5.0 x4 NVMe SSD (e.g. CM7-R class): 14,000/7,000 MB/s, 2.7M/600k IOPS",
        read_mb_per_s=14000, write_mb_per_s=7000, read_iops=2_700_000, write_iops=600_000),
}


def check_target_path(value: str) -> Path:
    """Refuse '/', /dev/* and other system trees, also through symlinks; return the absolute path."""
    if not value or not str(value).strip():
        raise ValueError("target path is empty")
    path = Path(os.path.abspath(os.path.expanduser(str(value))))
    real = os.path.realpath(path)      # a symlink to /etc is /etc
    for text in dict.fromkeys((str(path), real)):
        via = "" if text == str(path) else f" (through a symlink: it resolves to {real})"
        if text in FORBIDDEN_EXACT:
            raise ValueError(f"target path '{value}' is {text}{via}: refusing a system directory; "
                             "use a dedicated directory such as data/targets/<name>")
        for tree in FORBIDDEN_TREES:
            if text == tree or text.startswith(tree + "/"):
                raise ValueError(f"target path '{value}' lies under {tree}{via}: refused "
                                 "(targets must be ordinary directories on a filesystem)")
    return path


def _read_only(path: Path) -> bool:
    return bool(os.statvfs(path).f_flag & os.ST_RDONLY)


def check_target_usable(value: str, create: bool = False) -> Path:
    """Refuse a target that cannot hold a study, before any work (validate does this too).

    The target must be a directory (or not exist yet, with an existing parent: only the last
    component is ever created), on a writable filesystem, writable by this user (a probe file
    is created and deleted). create=True makes the missing last component."""
    path = check_target_path(value)
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            kind = "a broken symlink" if not path.exists() else "a file" if path.is_file() else "not a directory"
            raise TargetError(f"target path '{value}' is {kind}, not a directory")
    else:
        parent = path.parent
        if not parent.is_dir():
            raise TargetError(f"target path '{value}': its parent {parent} does not exist; create it first "
                              "(storagebrief creates only the last component of a target path)")
        if parent == Path(parent.anchor):
            raise TargetError(f"target path '{value}': refusing to create a new directory at the "
                              "filesystem root; create it yourself or choose a path below an existing folder")
        if _read_only(parent):
            raise TargetError(f"target path '{value}': {parent} is on a read-only filesystem")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise TargetError(f"target path '{value}': {parent} is not writable by this user, so the "
                              "target directory cannot be created")
        if not create:
            return path
        path.mkdir()
    if _read_only(path):
        raise TargetError(f"target path '{value}' is on a read-only filesystem")
    probe = path / f".storagebrief-probe-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise TargetError(f"target path '{value}' is not writable by this user: {exc.strerror}") from None
    return path


def fmt_bytes(n: float) -> str:
    """Sizes in the unit that fits (MB = 10^6 bytes, as everywhere in the brief)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}" if unit in ("TB", "GB") else f"{n / scale:.1f} {unit}"
    return f"{int(n)} bytes"


@dataclass
class BlockDevice:
    name: str | None            # whole-disk kernel name, e.g. 'vda', 'nvme0n1'
    major: int | None
    minor: int | None
    partition: str | None = None
    model: str = "unknown"
    rotational: bool | None = None
    interface: str = "unknown"
    size_bytes: int | None = None
    scheduler: str = "unknown"
    reason: str = ""            # why the device could not be resolved, if so

    @property
    def majmin(self) -> str | None:
        return None if self.major is None else f"{self.major}:{self.minor}"


@dataclass
class Target:
    name: str
    path: Path
    profile_name: str | None = None
    profile: DeviceProfile | None = None
    device: BlockDevice | None = None
    filesystem: str = "unknown"
    mount_point: str = "unknown"
    mount_options: str = ""
    warnings: list[str] = field(default_factory=list)
    s3: object | None = None    # core.s3target.S3TargetParams of an object-storage target; None: a directory

    @property
    def emulated(self) -> bool:
        return self.profile is not None

    @property
    def kind(self) -> str:
        return "directory" if self.s3 is None else "s3"

    @property
    def on_this_machine(self) -> bool:
        """Its data sits on this machine's disk (a directory, or a local S3 gateway's files): space is checked here."""
        return self.s3 is None or not self.s3.external

    def study_dir(self, study: str) -> Path:
        """Everything a study writes on this target lives below here: <path>/storagebrief/<study>, refused in one
        line (core.folders.UnsafeFolder) when it or storagebrief/ is a symlink; a run's own folders below it come
        from folders.folder_below."""
        return study_folder(self.path, study)

    def describe(self) -> dict:
        d = asdict(self)
        d["path"] = str(self.path)
        d["profile"] = self.profile.model_dump() if self.profile else None
        d["kind"] = self.kind
        d["s3"] = self.s3.describe() if self.s3 is not None else None
        return d


def _read(path: Path, default: str = "") -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return default


def _mountinfo_for(path: Path) -> tuple[str, str, str, str]:
    """(mount point, fs type, mount options, source) of the mount holding path."""
    best = ("unknown", "unknown", "", "")
    best_len = -1
    text = str(path)
    for line in _read(Path("/proc/self/mountinfo")).splitlines():
        left, _, right = line.partition(" - ")
        parts, rparts = left.split(), right.split()
        if len(parts) < 6 or len(rparts) < 2:
            continue
        mnt = parts[4].replace("\\040", " ")
        if (text == mnt or text.startswith(mnt.rstrip("/") + "/")) and len(mnt) > best_len:
            opts = parts[5] + ("," + rparts[2] if len(rparts) > 2 else "")
            best, best_len = (mnt, rparts[0], opts, rparts[1]), len(mnt)
    return best


def resolve_device(path: Path) -> BlockDevice:
    """The whole-disk block device that backs path (partition -> parent disk)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    st_dev = os.stat(probe).st_dev
    major, minor = os.major(st_dev), os.minor(st_dev)
    sysdir = Path(f"/sys/dev/block/{major}:{minor}")
    if major == 0 or not sysdir.exists():
        # overlay/tmpfs/btrfs subvolumes: try the mount source instead.
        _, _, _, source = _mountinfo_for(path.resolve() if path.exists() else probe.resolve())
        if source.startswith("/dev/") and os.path.exists(source):
            rdev = os.stat(source).st_rdev
            major, minor = os.major(rdev), os.minor(rdev)
            sysdir = Path(f"/sys/dev/block/{major}:{minor}")
    if not sysdir.exists():
        return BlockDevice(None, None, None, reason=f"st_dev {major}:{minor} is not a block device "
                           "(tmpfs, overlay or network filesystem): device counters and emulated "
                           "profiles are unavailable for this target")
    real = sysdir.resolve()
    partition = None
    if (real / "partition").exists():
        partition = real.name
        real = real.parent
    name = real.name
    dev = _read(real / "dev", f"{major}:{minor}")
    dmaj, dmin = (int(x) for x in dev.split(":"))
    model = " ".join(filter(None, [_read(real / "device" / "vendor"), _read(real / "device" / "model")]))
    text = str(real)
    interface = next((k for k in ("nvme", "virtio", "ata", "usb", "scsi", "mmc", "loop", "zram")
                      if f"/{k}" in text or name.startswith(k)), "unknown")
    rot = _read(real / "queue" / "rotational")
    sched = _read(real / "queue" / "scheduler", "unknown")
    size = _read(real / "size")
    return BlockDevice(
        name=name, major=dmaj, minor=dmin, partition=partition,
        model=model or (f"{interface} disk" if interface != "unknown" else "unknown"),
        rotational=(rot == "1") if rot in ("0", "1") else None, interface=interface,
        size_bytes=int(size) * 512 if size.isdigit() else None,
        scheduler=(sched.split("[")[1].split("]")[0] if "[" in sched else sched),
    )


MEMORY_FILESYSTEMS = ("tmpfs", "ramfs")


def resolve(params_target, catalogue: dict[str, DeviceProfile], create: bool = False) -> Target:
    """Turn a validated TargetParams into a Target with device and mount details.

    create=True (a run, not validate) makes the target directory if only it is missing."""
    path = check_target_usable(params_target.path, create=create) if create else check_target_path(params_target.path)
    device = resolve_device(path)
    mnt, fstype, opts, _ = _mountinfo_for(path if path.exists() else path.parent)
    profile = catalogue[params_target.profile] if params_target.profile else None
    s3 = getattr(params_target, "s3", None)
    if s3 is not None and s3.external:
        device = BlockDevice(None, None, None, reason=f"an external S3 endpoint ({s3.endpoint}): its storage is "
                             "not on this machine, so no device counters are read")
    target = Target(name=params_target.name, path=path, profile_name=params_target.profile,
                    profile=profile, device=device, filesystem=fstype, mount_point=mnt,
                    mount_options=opts, s3=s3)
    if fstype in MEMORY_FILESYSTEMS:
        target.warnings.append(
            f"target '{target.name}' is on {fstype}, a filesystem in memory: its reads and writes run at memory "
            "speed, so its figures describe RAM, not a storage device")
    if profile is not None and device.major is None:
        target.warnings.append(f"target '{target.name}': profile '{params_target.profile}' cannot be "
                               f"emulated: {device.reason}")
    return target


def resolve_all(params, create: bool = False) -> list[Target]:
    catalogue = params.profile_catalogue()
    return [resolve(t, catalogue, create=create) for t in params.targets]


def free_space_reserve(total_bytes: int) -> int:
    """Space left free after a dataset: 5 % + 1 GiB, but never more than 10 % of the filesystem,
    so a small filesystem can hold a small dataset."""
    return min(int(0.05 * total_bytes) + (1 << 30), int(0.10 * total_bytes))


def check_free_space(target: Target, needed_bytes: int, what: str) -> None:
    """Refuse before work starts when the dataset will not fit (keeping free_space_reserve spare)."""
    probe = target.path
    while not probe.exists():
        probe = probe.parent
    st = os.statvfs(probe)
    if st.f_blocks == 0:
        # ramfs (and some virtual filesystems) report no size at all: "0 bytes free" would mislead
        raise TargetError(
            f"target '{target.name}' ({target.path}) is on a filesystem that reports no size "
            f"({target.filesystem}; ramfs does this): its free space cannot be checked and it is memory, "
            "not storage; choose a folder on a storage device")
    free = st.f_bavail * st.f_frsize
    spare = free_space_reserve(st.f_blocks * st.f_frsize)
    if needed_bytes + spare > free:
        raise TargetError(
            f"target '{target.name}' ({target.path}): {what} needs {fmt_bytes(needed_bytes)} "
            f"but only {fmt_bytes(free)} is free (keeping {fmt_bytes(spare)} spare); "
            "reduce the dataset or choose another target path")


def probe_read_mb_per_s(files: list[Path], max_bytes: int = 256 << 20, block: int = 1 << 20) -> float | None:
    """Sequential O_DIRECT read rate of the given files (bypasses page cache)."""
    buf = mmap.mmap(-1, block)  # page-aligned, as O_DIRECT requires
    total, start = 0, time.perf_counter()
    for f in files:
        try:
            fd = os.open(f, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
        except OSError:
            return None
        try:
            while total < max_bytes:
                try:
                    n = os.readv(fd, [buf])
                except OSError:
                    return None
                if n <= 0:
                    break
                total += n
        finally:
            os.close(fd)
        if total >= max_bytes:
            break
    elapsed = time.perf_counter() - start
    return total / elapsed / 1e6 if total and elapsed > 0 else None


def check_profile_speed(target: Target, sample_files: list[Path]) -> str | None:
    """Warn when the emulated profile is faster than the device itself measures."""
    if not target.emulated or not target.profile.read_mb_per_s or not sample_files:
        return None
    measured = probe_read_mb_per_s(sample_files)
    if measured and target.profile.read_mb_per_s > measured:
        msg = (f"target '{target.name}': profile '{target.profile_name}' allows "
               f"{target.profile.read_mb_per_s:.0f} MB/s reads but the device measured "
               f"{measured:.0f} MB/s (O_DIRECT, sequential): the emulation cannot be faster "
               "than the disk it runs on")
        target.warnings.append(msg)
        return msg
    return None


def io_limits(target: Target, accounting: bool = False):
    """The target's emulated profile as cgroup io limits.

    Unthrottled targets give None, or with accounting=True limits of None on the
    device: a cgroup that only counts what the run's own processes read from it.
    """
    from . import cgroups

    if target.device is None or target.device.major is None:
        return None
    dev = (target.device.major, target.device.minor)
    if not target.emulated:
        return cgroups.IoLimits(device=dev) if accounting else None
    p = target.profile
    return cgroups.IoLimits(device=dev,
                            read_bps=bytes_per_s(p.read_mb_per_s) if p.read_mb_per_s else None,
                            write_bps=bytes_per_s(p.write_mb_per_s) if p.write_mb_per_s else None,
                            read_iops=p.read_iops, write_iops=p.write_iops)


def throttle_or_count(target: Target, make, unthrottled, counting: bool = True):
    """The one way a cgroup for the target's device I/O is made: `make(io)` with the target's emulated profile,
    or (`counting`, unthrottled target) with limits that only count its device reads; None where the target
    has no device here, or no cgroup can be had: then, for an emulated target, `unthrottled(reason)` (its
    warning or the sweep's note) says the profile was not applied."""
    from . import cgroups

    io = io_limits(target, accounting=counting)
    if io is None:
        return None
    try:
        return make(io)
    except cgroups.CgroupUnavailable as exc:
        if target.emulated:
            unthrottled(exc)
        return None


@contextmanager
def emulation(target: Target, run_name: str):
    """Yield a cgroup that throttles the target's device to its profile, or None.

    Processes that must be throttled join it (cgroups.join). When the capability
    is missing the reason is appended to target.warnings and None is yielded, so
    the caller records that the run was not emulated instead of crashing.
    """
    from . import cgroups

    limits = io_limits(target)
    if limits is None:
        yield None
        return
    try:
        group = cgroups.Cgroup(f"{target.name}-{run_name}", io=limits)
        group.create()
    except cgroups.CgroupUnavailable as exc:
        msg = f"target '{target.name}': emulated profile not applied: {exc}"
        if msg not in target.warnings:
            target.warnings.append(msg)
        yield None
        return
    try:
        yield group
    finally:
        group.remove()


def same_device_pairs(targets) -> list[tuple[str, str]]:
    """(directory target, local-gateway S3 target) on one block device with one profile: the pairs whose
    difference is the object path's cost alone."""
    dirs = [t for t in targets if t.s3 is None and t.device and t.device.major is not None]
    out = []
    for s in targets:
        if s.s3 is None or s.s3.external or not s.device or s.device.major is None:
            continue
        for d in dirs:
            if d.device.majmin == s.device.majmin and d.profile_name == s.profile_name:
                out.append((d.name, s.name))
                break
    return out
