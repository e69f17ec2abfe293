"""System inventory for the brief's configuration appendix, and `doctor`."""
from __future__ import annotations

import contextlib
import contextvars
import os
import platform
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

from . import blocktrace, cache, cgroup_tree

PACKAGES = ("storagebrief", "tensorflow-cpu", "tensorflow", "opencv-python-headless", "numpy",
            "pandas", "scikit-learn", "seaborn", "matplotlib", "dvc", "papermill", "nbconvert",
            "jupyterlab", "pydantic", "psutil", "weasyprint")


def _cpuinfo() -> dict:
    model, sockets, flags = "unknown", set(), ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            k, _, v = line.partition(":")
            k, v = k.strip(), v.strip()
            if k == "model name" and model == "unknown":
                model = v
            elif k == "physical id":
                sockets.add(v)
            elif k == "flags" and not flags:
                flags = v
    except OSError:
        pass
    try:
        import psutil
        physical = psutil.cpu_count(logical=False)
    except Exception:
        physical = None
    return {"cpu_model": model, "cpu_sockets": max(1, len(sockets)),
            "cpu_cores_physical": physical, "cpu_threads": os.cpu_count(),
            "cpu_avx2": "avx2" in flags.split()}


def _os_release() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.platform()


PACKAGE_DIR = Path(__file__).resolve().parents[1]


def _git(*args: str, cwd: Path | str | None = None) -> str:
    # in the project's checkout (params.yaml's folder) or this package's, never the working directory's
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, timeout=10,
                              cwd=cwd or PACKAGE_DIR, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


# What a study run itself rewrites: a change there does not make the code that ran "dirty".
RUN_OUTPUTS = ("dvc.lock", "reports/")


def changed_files(cwd: Path | str | None = None) -> tuple[list[str], list[str]]:
    """Tracked files that differ from the commit: (code, params, notebooks...) and (run outputs)."""
    names = _git("diff", "--name-only", "HEAD", cwd=cwd).splitlines()   # paths from the checkout's top
    run = [n for n in names if n == RUN_OUTPUTS[0] or n.startswith(RUN_OUTPUTS[1])]
    return [n for n in names if n not in run], run


def packages() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def host_facts() -> dict:
    """This host's hardware and system: what every client host of a multi-host run reports (each
    rank host gathers its own over MPI; the launching host's are in collect())."""
    return {"hostname": platform.node(), **_cpuinfo(),
            "memory_total_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
            "os": _os_release(), "kernel": platform.release(), "python": platform.python_version()}


# How a run was started (kit/history counts a range's studies by it): the front doors set it for their run.
ENTRY: contextvars.ContextVar[str] = contextvars.ContextVar("storagebrief_entry", default="")


@contextlib.contextmanager
def entered(how: str):
    """A run started from `how` ('notebook': notebook.run_study; 'CLI': `storagebrief <study>`)."""
    token = ENTRY.set(how)
    try:
        yield
    finally:
        ENTRY.reset(token)


def entry_point() -> str:
    """'pipeline' under `dvc repro` or `make study` (DVC sets DVC_STAGE for every stage's command, the papermill
    kernel inherits it), else the front door's (entered), '' for a library call."""
    return "pipeline" if os.environ.get("DVC_STAGE") else ENTRY.get()


def collect(params=None, targets=None) -> dict:
    """Everything a reader needs to judge where the numbers came from."""
    # The project (params.yaml's folder: params, notebooks, dvc.lock) names the commit; when the package
    # that ran comes from another checkout, its commit is recorded beside it.
    project = getattr(params, "root", "") or None
    commit = _git("rev-parse", "HEAD", cwd=project)
    code_changed, run_changed = changed_files(project) if commit else ([], [])
    package_top, project_top = _git("rev-parse", "--show-toplevel"), _git("rev-parse", "--show-toplevel", cwd=project)
    inv = {
        **host_facts(),
        "packages": packages(),
        "git_commit": (commit[:12] + ("-dirty" if code_changed else "")) if commit else "not a git checkout",
        "git_changed_files": code_changed,
        "run_updated_files": run_changed,
        "package_git_commit": (_git("rev-parse", "HEAD")[:12] or "not a git checkout")
        if package_top != project_top else "same checkout",
        "params_hash": getattr(params, "source_hash", ""),
        "entry": entry_point(),
        "privileges": privileges(),
        "targets": [t.describe() for t in (targets or [])],
    }
    return inv


def privileges() -> dict[str, str]:
    ok, why = cache.drop_caches_possible()
    caps = cgroup_tree.capabilities()
    return {
        "root": "yes" if os.geteuid() == 0 else "no",
        "drop_caches": "yes" if ok else f"no: {why} (fadvise DONTNEED used instead)",
        "cgroup_memory": caps["memory"],
        "cgroup_blkio": caps["blkio"],
        "tracefs_block_events": _tracefs_state(),
    }


def _tracefs_state() -> str:
    ok, why = blocktrace.availability()
    return why if ok else (f"no: {why} -> block-level I/O characterization falls back to diskstats "
                           "(no per-request statistics)")


def doctor_lines() -> list[str]:
    """What this machine allows, and what each missing piece disables."""
    lines = []
    p = privileges()
    root = p["root"] == "yes"
    lines.append(f"{'root ':.<23} {p['root']}" + ("" if root else
                 "  -> drop_caches, cgroups and tracing need root or delegation"))
    lines.append(f"{'drop_caches ':.<23} {p['drop_caches']}")
    for key, what in (("cgroup_memory", "memory-limited training runs and page-cache capping are skipped"),
                      ("cgroup_blkio", "emulated device profiles are not applied (targets run unthrottled)")):
        val = p[key]
        bad = val.startswith("unavailable") or "not writable" in val
        lines.append(f"{key + ' ':.<23} {val}" + (f"  -> {what}" if bad else ""))
    lines.append(f"{'tracefs block events ':.<23} {p['tracefs_block_events']}")
    from .memory_state import free_page_reporting
    lines.append(f"{'free-page reporting ':.<23} {free_page_reporting().line()}")
    from .monitor import standing_load
    lines.append(f"{'standing load ':.<23} {standing_load()}")
    for tool, what in (("fio", "fio comparisons in benchmarks are skipped"),
                       ("stress-ng", "busy-system scenarios are skipped"),
                       ("pdftoppm", "none (only used to look at PDF pages)"),
                       ("mpirun", "emulate.launcher = mpi is refused (forked accelerators still run)")):
        path = shutil.which(tool)
        lines.append(f"{tool + ' ':.<23} {path or 'missing'}" + ("" if path else f"  -> {what}"))
    from . import s3gateway
    try:
        lines.append(f"{'versitygw (S3) ':.<23} {s3gateway.binary()}")
    except s3gateway.GatewaySetupError:
        lines.append(f"{'versitygw (S3) ':.<23} missing  -> S3 targets with the local gateway are refused (make s3)")
    from . import nethosts
    why = nethosts.unavailable()
    held = sorted(nethosts.owners()) if why is None else []
    lines.append(f"{'test hosts (netns) ':.<23} " + (f"unavailable: {why}  -> the multi-host tests are skipped" if why
                 else "yes" + (f"; existing now, made by PID {', '.join(map(str, held))} (doctor --clean removes "
                               "those of dead PIDs)" if held else "")))
    try:
        import weasyprint  # noqa: F401
        lines.append(f"{'weasyprint (PDF) ':.<23} yes")
    except Exception as exc:  # missing pango libs raise OSError
        lines.append(f"{'weasyprint (PDF) ':.<23} no: {exc}  -> brief.pdf is not rendered")
    return lines
