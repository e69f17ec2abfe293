"""The kv_cache study's MLPerf-family workload beside MLPerf Storage's own KV-cache tool, on one target, alternating.

    make mlpstorage            # once: MLPerf's code, vendored (third_party/mlperf-storage/), into .mlpstorage/
    flock /work/notes/cpu.lock .venv/bin/python benchmarks/kv_cache_vs_mlperf.py [--mlperf-dir DIR] \
        --target data/targets/local [--work data/benchmarks/kv_cache_vs_mlperf] [--rounds 3] [--duration 20] \
        [--users 8] [--allocs 8] [--context 256 2048] [--seed 42] [--reseed]

MLPerf's tool is not part of this project's code: --mlperf-dir is the `kv_cache_benchmark/` folder that `make
mlpstorage` extracts into .mlpstorage/ from the vendored archive (russfellows/mlc-storage at the commit the Makefile
pins), or of a checkout you name (upstream mlcommons/storage from commit 284ce72, or the public fork
idevasena/storage_mlcommons). Its own virtual environment is made under --work from the "Core dependencies (required)"
section of its requirements.txt (numpy, pyyaml; PyPI must be reachable once). Each round runs the tool
(`kv-cache.py --gpu-mem-gb 0 --cpu-mem-gb 0 --generation-mode none`, its templates' contexts set to --context
through a config file written under --work) and then the study's clients (mlperf family, one client process, the
same users, allocs, templates and seed), each side in a cgroup of its own whose blkio counters give the bytes it
moved on the target's device; the page cache is dropped before each side (root). Printed per round and side:
read / write GiB/s as each tool computes them (the tool's summary.cache_stats; the study's MLPerf arithmetic),
the bytes each counted (to its stats snapshot) beside its cgroup's read / write bytes (all it moved, the overrun
after the snapshot included), requests, the device P95s, and the study ÷ the tool.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "lib"))
GIB = 1 << 30
MLPERF_DIR = REPO / ".mlpstorage" / "kv_cache_benchmark"         # what `make mlpstorage` extracts


def core_requirements(req: Path) -> list[str]:
    """The lines of the tool's requirements.txt under its "Core dependencies (required)" heading."""
    out, inside = [], False
    for line in req.read_text().splitlines():
        s = line.strip()
        if s.startswith("#"):
            if "Core dependencies" in s:
                inside = True
            elif inside and out:
                break
            continue
        if inside and s:
            out.append(s.split("#", 1)[0].strip())
    if not out:
        raise SystemExit(f"--mlperf-dir: {req} has no 'Core dependencies (required)' section")
    return out


def tool_venv(mlperf: Path, work: Path) -> Path:
    py = work / "mlperf-venv" / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(work / "mlperf-venv")], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *core_requirements(mlperf / "requirements.txt")],
                       check=True)
    return py


def tool_config(mlperf: Path, work: Path, context: tuple[int, int]) -> tuple[Path, list[dict]]:
    """The tool's config.yaml with every template's context range set to `context`; the templates as the study's."""
    import yaml

    cfg = yaml.safe_load((mlperf / "config.yaml").read_text())
    templates = []
    for name, t in cfg["user_templates"].items():
        t["context_range"] = list(context)
        templates.append({"name": name, "context_tokens": list(context), "generate_tokens": list(t["generation_range"]),
                          "think_s": list(t["think_time_range"])})
    path = work / "mlperf-config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path, templates


def drop_caches() -> None:
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3")
    except OSError:
        pass                                   # not root: both sides start from whatever the cache holds


def in_group(cmd: list[str], group, **kw) -> subprocess.CompletedProcess:
    from storagebrief.core import cgroups

    return subprocess.run(cmd, preexec_fn=lambda: cgroups.join(group.procs_files), capture_output=True, text=True,
                          **kw)


def side(name: str, cmd: list[str], device, cwd: Path, timeout: float) -> tuple[subprocess.CompletedProcess, dict]:
    """Run one side in a fresh accounting cgroup: its result and the bytes its processes moved on the device."""
    from storagebrief.core import cgroups

    drop_caches()
    with cgroups.Cgroup(f"kvbench-{name}", io=cgroups.IoLimits(device=device)) as group:
        t0 = time.monotonic()
        res = in_group(cmd, group, cwd=cwd, timeout=timeout)
        wall = time.monotonic() - t0
        (rb, _), (wb, _) = group.io_stats(device, "Read") or (0, 0), group.io_stats(device, "Write") or (0, 0)
    if res.returncode:
        raise SystemExit(f"{name} failed ({res.returncode}): {res.stderr[-2000:]}")
    return res, {"cgroup_read_bytes": rb, "cgroup_write_bytes": wb, "wall_s": wall}


def run_tool(py: Path, a, cfg: Path, cache: Path, out: Path, device, seed: int) -> dict:
    cmd = [str(py), str(a.mlperf_dir / "kv-cache.py"), "--config", str(cfg), "--model", a.model, "--num-users", str(a.users),
           "--duration", str(a.duration), "--gpu-mem-gb", "0", "--cpu-mem-gb", "0", "--max-concurrent-allocs",
           str(a.allocs), "--generation-mode", "none", "--cache-dir", str(cache), "--seed", str(seed), "--output", str(out)]
    _, acct = side("mlperf", cmd, device, out.parent, a.duration * 10 + 300)   # cwd: --work, not the tool's folder
    s = json.loads(out.read_text())["summary"]
    c = s["cache_stats"]
    return {**acct, "read_gib_per_s": c["tier_storage_read_bandwidth_gbps"],
            "write_gib_per_s": c["tier_storage_write_bandwidth_gbps"], "requests": s["total_requests"],
            "read_p95_ms": c.get("storage_read_device_p95_ms"), "write_p95_ms": c.get("storage_write_device_p95_ms"),
            "bytes_read": c["tier_storage_kv_bytes_read_gb"] * GIB, "bytes_written": c["tier_storage_kv_bytes_written_gb"] * GIB,
            "elapsed_s": s["elapsed_time"], "writes": c["offloads_storage"],
            "write_mib_each": c["tier_storage_kv_bytes_written_gb"] * 1024 / max(1, c["offloads_storage"])}


def ours_once(spec_file: Path) -> None:
    """(in the child) One client of the study's mlperf family, in this process; its row as JSON on stdout."""
    from storagebrief.studies.kv_cache import clients, metrics

    spec = json.loads(spec_file.read_text())
    c = clients._setup(0, 1, spec)
    try:
        t0 = time.monotonic()
        r = clients._work(c, 0, None, None)
    finally:
        c.clear()
    print(json.dumps(metrics.run_row(spec, {"t_start": t0, "ranks": [r]})))


def run_ours(a, templates: list[dict], folder: Path, work: Path, device, seed: int) -> dict:
    from storagebrief.studies.kv_cache.workload import MODELS

    bpt = MODELS[a.model].kv_bytes_per_token
    spec = {"folder": str(folder), "family": "mlperf", "seed": seed, "users": a.users, "concurrency": a.users,
            "cpu_tier_bytes": 0, "bytes_per_token": bpt, "contexts": [(a.context[1], 1)], "turns": [(1, 1)],
            "turn_tokens": 1, "decode_reads": 0, "prefill_only_tokens": 10000, "duration_s": a.duration,
            "write_block": 16 << 20, "largest_entry_bytes": a.context[1] * bpt, "max_concurrent_allocs": a.allocs,
            "templates": templates, "decode_batch_tokens": 32, "end_conversation_probability": 0.2, "max_turns": 50,
            "storage_capacity_bytes": 0}
    f = work / "ours-spec.json"
    f.write_text(json.dumps(spec))
    res, acct = side("ours", [sys.executable, __file__, "--ours-once", str(f)], device, REPO, a.duration * 10 + 300)
    row = json.loads(res.stdout.strip().splitlines()[-1])
    return {**acct, "read_gib_per_s": row["mlperf_read_gib_per_s"], "write_gib_per_s": row["mlperf_write_gib_per_s"],
            "requests": row["requests"], "read_p95_ms": row["mlperf_device_read_p95_ms"],
            "write_p95_ms": row["mlperf_device_write_p95_ms"], "bytes_read": row["mlperf_read_bytes"],
            "bytes_written": row["mlperf_write_bytes"], "elapsed_s": row["elapsed_time_s"],
            "all_read_bytes": row["storage_read_bytes"], "all_write_bytes": row["storage_write_bytes"],
            "honest_read_gib_per_s": row["honest_read_gib_per_s"], "queued_at_end": row.get("requests_queued_at_end"),
            "writes": row["storage_writes"], "write_mib_each": row["storage_write_bytes"] / max(1, row["storage_writes"]) / (1 << 20)}


def line(rnd: int, name: str, r: dict) -> str:
    return (f"{rnd:>5} {name:<7} {r['read_gib_per_s']:>8.3f} {r['write_gib_per_s']:>8.3f} "
            f"{r['bytes_read'] / GIB:>8.2f} {r['cgroup_read_bytes'] / GIB:>8.2f} {r['bytes_written'] / GIB:>8.2f} "
            f"{r['cgroup_write_bytes'] / GIB:>8.2f} {r['requests']:>6} {r['read_p95_ms'] or 0:>9.1f} "
            f"{r['write_p95_ms'] or 0:>9.1f} {r['elapsed_s']:>7.2f} {r['writes']:>6} {r['write_mib_each']:>8.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ours-once", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--mlperf-dir", type=Path, default=MLPERF_DIR,
                    help="MLPerf's kv_cache_benchmark folder (default: %(default)s, from `make mlpstorage`)")
    ap.add_argument("--target", type=Path)
    ap.add_argument("--work", type=Path, default=REPO / "data" / "benchmarks" / "kv_cache_vs_mlperf")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=20)
    ap.add_argument("--users", type=int, default=8)
    ap.add_argument("--allocs", type=int, default=8)
    ap.add_argument("--context", type=int, nargs=2, default=[256, 2048])
    ap.add_argument("--seed", type=int, default=42, help="both sides' seed in round 1")
    ap.add_argument("--reseed", action="store_true",
                    help="seed + round - 1 in each round (both sides): a new population of users every round, so a "
                         "difference that comes from which users one fixed seed drew averages out")
    ap.add_argument("--model", default="llama3.1-8b", choices=["llama3.1-8b", "llama3.1-70b"])
    a = ap.parse_args()
    if a.ours_once:
        return ours_once(a.ours_once)
    if not (a.mlperf_dir / "kv-cache.py").is_file():
        hint = ": run `make mlpstorage`" if a.mlperf_dir == MLPERF_DIR else ""
        raise SystemExit(f"--mlperf-dir {a.mlperf_dir}: not allowed: a kv_cache_benchmark folder holding kv-cache.py"
                         + hint)
    if not a.target or not a.target.is_dir():
        raise SystemExit(f"--target {a.target}: not allowed: an existing directory on the disk to measure")
    for k, lo in (("rounds", 1), ("duration", 1), ("users", 1), ("allocs", 0)):
        if getattr(a, k) < lo:
            raise SystemExit(f"--{k} {getattr(a, k)}: not allowed: at least {lo}")
    if not 1 <= a.context[0] <= a.context[1] < 10000:
        raise SystemExit(f"--context {a.context}: not allowed: LOW HIGH with 1 <= LOW <= HIGH < 10000")
    from storagebrief.core.targets import resolve_device

    dev = resolve_device(a.target.resolve())
    if dev.major is None:
        raise SystemExit(f"--target {a.target}: its block device is unknown ({dev.reason}): no per-side byte counts")
    a.mlperf_dir, work = a.mlperf_dir.resolve(), a.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    py = tool_venv(a.mlperf_dir, work)
    cfg, templates = tool_config(a.mlperf_dir, work, tuple(a.context))
    mcache, ocache = a.target.resolve() / "kvbench-mlperf", a.target.resolve() / "kvbench-ours"
    for d in (mcache, ocache):
        if d.exists():                         # not ours to empty: a folder this benchmark did not make
            raise SystemExit(f"--target {a.target}: {d} exists; remove it (a killed run's) or choose another target")
    print(f"{a.model}, {a.users} users, allocs {a.allocs}, contexts {a.context[0]}-{a.context[1]} tokens, "
          f"{a.duration} s, device {dev.name} ({dev.major}:{dev.minor})")
    print("round side    read/s   write/s  rd GiB  cg rd    wr GiB  cg wr    reqs  rd p95 ms  wr p95 ms  elapsed "
          "writes  MiB/write")
    rows = []
    try:
        for rnd in range(1, a.rounds + 1):
            seed = a.seed + (rnd - 1 if a.reseed else 0)
            mcache.mkdir(exist_ok=True)
            m = run_tool(py, a, cfg, mcache, work / f"mlperf-r{rnd}.json", (dev.major, dev.minor), seed)
            _clear(mcache)
            print(line(rnd, "mlperf", m), flush=True)
            ocache.mkdir(exist_ok=True)
            o = run_ours(a, templates, ocache, work, (dev.major, dev.minor), seed)
            _clear(ocache)
            print(line(rnd, "study", o), flush=True)
            ratio = (o["read_gib_per_s"] / m["read_gib_per_s"] if m["read_gib_per_s"] else float("nan"),
                     o["write_gib_per_s"] / m["write_gib_per_s"] if m["write_gib_per_s"] else float("nan"))
            print(f"{rnd:>5} ratio   {ratio[0]:>8.2f} {ratio[1]:>8.2f}   (study ÷ MLPerf's tool; the study's honest "
                  f"read {o['honest_read_gib_per_s']:.3f} GiB/s; it moved {o['all_read_bytes'] / GIB:.2f} / "
                  f"{o['all_write_bytes'] / GIB:.2f} GiB in all; {o['queued_at_end']} requests queued at its end)",
                  flush=True)
            rows.append({"round": rnd, "seed": seed, "mlperf": m, "study": o, "ratio_read": ratio[0], "ratio_write": ratio[1]})
    finally:
        for d in (mcache, ocache):
            _clear(d)
            if d.is_dir():
                d.rmdir()
    (work / "rounds.json").write_text(json.dumps(rows, indent=1))


def _clear(d: Path) -> None:
    """The files each side left in its cache folder (ours: .kv; the tool's: .npy)."""
    if d.is_dir():
        for f in d.rglob("*"):
            if f.is_file() and f.suffix in (".kv", ".npy"):
                f.unlink()
        for sub in sorted((p for p in d.rglob("*") if p.is_dir()), reverse=True):
            sub.rmdir()


if __name__ == "__main__":
    main()
