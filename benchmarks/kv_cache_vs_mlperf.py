"""The kv_cache study's MLPerf-family workload beside MLPerf Storage's own KV-cache tool, on one target, alternating.

    make mlpstorage            # once: MLPerf's code, vendored (third_party/mlperf-storage/), into .mlpstorage/
    flock /work/notes/cpu.lock .venv/bin/python benchmarks/kv_cache_vs_mlperf.py [--mlperf-dir DIR] \
        --target data/targets/local [--work data/benchmarks/kv_cache_vs_mlperf] [--rounds 4] [--max-context 8192] \
        [--model llama3.1-8b] [--draw-seed N] [--dry-run]

Settings are drawn at random every round, so no single setting can be tuned for (an invocation's draws come from a
fresh random source unless --draw-seed repeats one, printed at the start), from these ranges:
  users                  4-24
  contexts               per template of the tool's config.yaml (chatbot, coding, document) its own range:
                         LOW drawn from 256-2,048 tokens, HIGH from LOW-min(4 x LOW, --max-context); each
                         template keeps the tool's generation and think-time ranges
  duration               20-60 s
  CPU tier               every round a coin: without (--cpu-mem-gb 0; the study's cpu_tier_bytes 0), or with a
                         budget drawn from 0.5-4.0 GiB (the tool's --cpu-mem-gb; the study's one client's tier)
  max_concurrent_allocs  1-8
  seeds                  each side its own, drawn from 1-2^31 every round
  order                  which side runs first: drawn for round 1, then alternating every round
Every round is printed with its drawn settings, both sides' figures and the study / tool ratios.

MLPerf's tool is not part of this project's code: --mlperf-dir is the `kv_cache_benchmark/` folder that `make
mlpstorage` extracts into .mlpstorage/ from the vendored archive (third_party/mlperf-storage/: russfellows/mlc-storage
at the commit the Makefile pins; the default), or of a checkout you name (upstream mlcommons/storage from commit
284ce72, or the public fork idevasena/storage_mlcommons). Its own virtual
environment is made under --work from the "Core dependencies (required)" section of its requirements.txt (numpy,
pyyaml; PyPI must be reachable once). A round runs the tool (`kv-cache.py --gpu-mem-gb 0 --cpu-mem-gb C
--generation-mode none`, its templates' contexts set through a config file written under --work) and the study's
clients (mlperf family, one client process, the same users, allocs, templates and tier), each side in a cgroup of
its own whose blkio counters give the bytes it moved on the target's device; the page cache is dropped before each
side (root). Printed per round and side: read / write GiB/s as each computes them under MLPerf's keys (the tool's
summary.cache_stats; the study's MLPerf arithmetic, which like the tool counts no CPU-tier demotion), the bytes each
counted (to its stats snapshot) beside its cgroup's (all it moved), requests, the device P95s, MiB per storage read
and write, the earlier-turn reload miss rate (the tool's multi_turn_stats; the study's turn_reload_*), and the
study / the tool. --dry-run prints the drawn rounds and runs nothing. --tool-vs-tool is the control: the study's side
runs the tool again with the study's seed, so a round prints the tool with a second seed ÷ the tool with the first
(the spread one seed to the next gives at the same drawn settings).
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


USERS, LOW, DURATION_S, CPU_GIB, ALLOCS = (4, 24), (256, 2048), (20, 60), (0.5, 4.0), (1, 8)
SIDES = ("mlperf", "study")


def tool_templates(mlperf: Path | None) -> list[dict]:
    """The tool's templates (config.yaml's user_templates) as the study writes them; the study's copy of them
    (workload.MLPERF_TEMPLATES) where no tool folder is given (a dry run)."""
    if mlperf is None:
        from storagebrief.studies.kv_cache.workload import MLPERF_TEMPLATES
        return [dict(t) for t in MLPERF_TEMPLATES]
    import yaml

    cfg = yaml.safe_load((mlperf / "config.yaml").read_text())
    return [{"name": n, "context_tokens": list(t["context_range"]), "generate_tokens": list(t["generation_range"]),
             "think_s": list(t["think_time_range"])} for n, t in cfg["user_templates"].items()]


def draw_round(rng, templates: list[dict], max_context: int) -> dict:
    """One round's settings, drawn from the ranges the module's doc states."""
    contexts = {}
    for t in templates:
        low = rng.randint(*LOW)
        contexts[t["name"]] = [low, rng.randint(low, max(low, min(4 * low, max_context)))]
    with_tier = rng.random() < 0.5
    return {"users": rng.randint(*USERS), "contexts": contexts, "duration_s": rng.randint(*DURATION_S),
            "cpu_gib": round(rng.uniform(*CPU_GIB), 1) if with_tier else 0.0, "allocs": rng.randint(*ALLOCS),
            "seeds": {side: rng.randint(1, 2 ** 31) for side in SIDES}}


def draw_rounds(rng, templates: list[dict], rounds: int, max_context: int) -> list[dict]:
    """Every round drawn afresh; which side goes first drawn once and alternated every round."""
    first = rng.randrange(2)
    return [{"round": i + 1, **draw_round(rng, templates, max_context),
             "order": [SIDES[(first + i) % 2], SIDES[(first + i + 1) % 2]]} for i in range(rounds)]


def describe(r: dict) -> str:
    ctx = ", ".join(f"{n} {lo}-{hi}" for n, (lo, hi) in r["contexts"].items())
    tier = f"CPU tier {r['cpu_gib']:g} GiB" if r["cpu_gib"] else "no CPU tier"
    return (f"round {r['round']}: {r['users']} users, {r['duration_s']} s, {tier}, allocs {r['allocs']}, contexts "
            f"{ctx} tokens; seeds mlperf {r['seeds']['mlperf']}, study {r['seeds']['study']}; "
            f"first: {r['order'][0]}")


def round_templates(templates: list[dict], r: dict) -> list[dict]:
    return [{**t, "context_tokens": list(r["contexts"][t["name"]])} for t in templates]


def tool_config(mlperf: Path, work: Path, r: dict) -> Path:
    """The tool's config.yaml with each template's context range set to the round's."""
    import yaml

    cfg = yaml.safe_load((mlperf / "config.yaml").read_text())
    for name, t in cfg["user_templates"].items():
        t["context_range"] = list(r["contexts"][name])
    path = work / f"mlperf-config-r{r['round']}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


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


def _per(nbytes: float, count, tier: bool) -> float | None:
    """MiB per storage call, where the counts allow it: with a CPU tier neither side counts its storage calls
    apart (the tool's read_iops holds CPU-tier reads, its offloads_storage the demotions)."""
    return None if tier or not count else nbytes / count / (1 << 20)


def run_tool(py: Path, a, r: dict, cfg: Path, cache: Path, out: Path, device) -> dict:
    cmd = [str(py), str(a.mlperf_dir / "kv-cache.py"), "--config", str(cfg), "--model", a.model, "--num-users",
           str(r["users"]), "--duration", str(r["duration_s"]), "--gpu-mem-gb", "0", "--cpu-mem-gb", str(r["cpu_gib"]),
           "--max-concurrent-allocs", str(r["allocs"]), "--generation-mode", "none", "--cache-dir", str(cache),
           "--seed", str(r["seeds"]["mlperf"]), "--output", str(out)]
    _, acct = side("mlperf", cmd, device, out.parent, r["duration_s"] * 10 + 300)   # cwd: --work, not the tool's
    return {**acct, **tool_figures(json.loads(out.read_text()), bool(r["cpu_gib"]))}


def tool_figures(results: dict, tier: bool) -> dict:
    """The figures compared, from the tool's output file as it writes it (cli.py:499-500)."""
    s = results["summary"]
    c, mt = s["cache_stats"], s["multi_turn_stats"]
    return {"read_gib_per_s": c["tier_storage_read_bandwidth_gbps"],
            "write_gib_per_s": c["tier_storage_write_bandwidth_gbps"], "requests": s["total_requests"],
            "read_p95_ms": c.get("storage_read_device_p95_ms"), "write_p95_ms": c.get("storage_write_device_p95_ms"),
            "bytes_read": c["tier_storage_kv_bytes_read_gb"] * GIB, "bytes_written": c["tier_storage_kv_bytes_written_gb"] * GIB,
            "elapsed_s": s["elapsed_time"],
            "read_mib_each": _per(c["tier_storage_kv_bytes_read_gb"] * GIB, c["read_iops"], tier),
            "write_mib_each": _per(c["tier_storage_kv_bytes_written_gb"] * GIB, c["offloads_storage"], tier),
            "turn_miss_percent": 100 * mt["cache_misses"] / max(1, mt["cache_hits"] + mt["cache_misses"])}


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


def run_ours(a, r: dict, templates: list[dict], folder: Path, work: Path, device) -> dict:
    from storagebrief.studies.kv_cache.workload import MODELS

    bpt, tier = MODELS[a.model].kv_bytes_per_token, bool(r["cpu_gib"])
    longest = max(hi for _, hi in r["contexts"].values())
    spec = {"folder": str(folder), "family": "mlperf", "seed": r["seeds"]["study"], "users": r["users"],
            "concurrency": r["users"], "cpu_tier_bytes": int(r["cpu_gib"] * GIB), "bytes_per_token": bpt,
            "contexts": [(longest, 1)], "turns": [(1, 1)], "turn_tokens": 1, "decode_reads": 0,
            "prefill_only_tokens": 10000, "duration_s": r["duration_s"], "write_block": 16 << 20,
            "largest_entry_bytes": longest * bpt, "max_concurrent_allocs": r["allocs"],
            "templates": round_templates(templates, r), "decode_batch_tokens": 32,
            "end_conversation_probability": 0.2, "max_turns": 50, "storage_capacity_bytes": 0}
    f = work / "ours-spec.json"
    f.write_text(json.dumps(spec))
    res, acct = side("ours", [sys.executable, __file__, "--ours-once", str(f)], device, REPO, r["duration_s"] * 10 + 300)
    return {**acct, **study_figures(json.loads(res.stdout.strip().splitlines()[-1]), tier)}


def study_figures(row: dict, tier: bool) -> dict:
    """The same figures from the study's run row (metrics.run_row)."""
    return {"read_gib_per_s": row["mlperf_read_gib_per_s"], "write_gib_per_s": row["mlperf_write_gib_per_s"],
            "requests": row["requests"], "read_p95_ms": row["mlperf_device_read_p95_ms"],
            "write_p95_ms": row["mlperf_device_write_p95_ms"], "bytes_read": row["mlperf_read_bytes"],
            "bytes_written": row["mlperf_write_bytes"], "elapsed_s": row["elapsed_time_s"],
            "all_read_bytes": row["storage_read_bytes"], "all_write_bytes": row["storage_write_bytes"],
            "honest_read_gib_per_s": row["honest_read_gib_per_s"], "queued_at_end": row.get("requests_queued_at_end"),
            "with_demotions_gib_per_s": row.get("storage_write_gib_per_elapsed_s"),
            "read_mib_each": _per(row["storage_read_bytes"], row["storage_reads"], tier),
            "write_mib_each": _per(row["storage_write_bytes"], row["storage_writes"], tier),
            "turn_miss_percent": 100 * row.get("turn_reload_misses", 0) / max(1, row.get("turn_reload_lookups", 0))}


def _f(x, width: int, fmt: str = ".2f") -> str:
    return f"{'-':>{width}}" if x is None else f"{x:>{width}{fmt}}"


def line(rnd: int, name: str, r: dict) -> str:
    return (f"{rnd:>5} {name:<7} {r['read_gib_per_s']:>8.3f} {r['write_gib_per_s']:>8.3f} "
            f"{r['bytes_read'] / GIB:>8.2f} {r['cgroup_read_bytes'] / GIB:>8.2f} {r['bytes_written'] / GIB:>8.2f} "
            f"{r['cgroup_write_bytes'] / GIB:>8.2f} {r['requests']:>6} {r['read_p95_ms'] or 0:>9.1f} "
            f"{r['write_p95_ms'] or 0:>9.1f} {r['elapsed_s']:>7.2f} {_f(r['read_mib_each'], 8)} "
            f"{_f(r['write_mib_each'], 8)} {r['turn_miss_percent']:>7.1f}")


def ratios(m: dict, o: dict) -> dict:
    """study ÷ the tool per figure (nan where the tool's is 0 or absent); the miss rates' difference in points."""
    def q(k):
        return o[k] / m[k] if m.get(k) and o.get(k) is not None else float("nan")
    return {"read": q("read_gib_per_s"), "write": q("write_gib_per_s"), "mib_per_read": q("read_mib_each"),
            "mib_per_write": q("write_mib_each"), "miss_points": o["turn_miss_percent"] - m["turn_miss_percent"]}


def arguments(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog="ranges: users %d-%d, template context LOW %d-%d, duration %d-%d s, CPU tier "
                                        "none or %.1f-%.1f GiB, allocs %d-%d (the module's doc)"
                                        % (*USERS, *LOW, *DURATION_S, *CPU_GIB, *ALLOCS))
    ap.add_argument("--ours-once", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--mlperf-dir", type=Path, help="the tool's kv_cache_benchmark folder (default: "
                                                     ".mlpstorage/kv_cache_benchmark where it exists)")
    ap.add_argument("--target", type=Path)
    ap.add_argument("--work", type=Path, default=REPO / "data" / "benchmarks" / "kv_cache_vs_mlperf")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--max-context", type=int, default=8192, help="the most tokens a template's HIGH may reach")
    ap.add_argument("--draw-seed", type=int, help="repeat an invocation's draws (printed at its start)")
    ap.add_argument("--dry-run", action="store_true", help="print the drawn rounds; run nothing")
    ap.add_argument("--tool-vs-tool", action="store_true",
                    help="a control: the study's side runs MLPerf's tool again with the study's seed, so each round "
                         "shows how far the tool moves from itself with another seed at the same settings")
    ap.add_argument("--model", default="llama3.1-8b", choices=["llama3.1-8b", "llama3.1-70b"])
    a = ap.parse_args(argv)
    if a.ours_once:
        return a
    for k, lo in (("rounds", 1),):
        if getattr(a, k) < lo:
            raise SystemExit(f"--{k} {getattr(a, k)}: not allowed: at least {lo}")
    if not LOW[1] <= a.max_context < 10000:
        raise SystemExit(f"--max-context {a.max_context}: not allowed: {LOW[1]}-9999 tokens")
    default = MLPERF_DIR
    a.mlperf_dir = a.mlperf_dir or (default if default.is_dir() else None)
    if a.mlperf_dir is not None and not (a.mlperf_dir / "kv-cache.py").is_file():
        raise SystemExit(f"--mlperf-dir {a.mlperf_dir}: not allowed: a kv_cache_benchmark folder holding kv-cache.py")
    if a.dry_run:
        return a
    if a.mlperf_dir is None:
        raise SystemExit(f"--mlperf-dir: not given and {default} does not exist: run `make mlpstorage`, or name a "
                         "kv_cache_benchmark folder")
    if not a.target or not a.target.is_dir():
        raise SystemExit(f"--target {a.target}: not allowed: an existing directory on the disk to measure")
    return a


def main(argv=None) -> None:
    import random

    a = arguments(argv)
    if a.ours_once:
        return ours_once(a.ours_once)
    draw_seed = a.draw_seed if a.draw_seed is not None else random.SystemRandom().randrange(2 ** 32)
    templates = tool_templates(a.mlperf_dir.resolve() if a.mlperf_dir else None)
    plan = draw_rounds(random.Random(draw_seed), templates, a.rounds, a.max_context)
    print(f"{a.model}, {a.rounds} rounds drawn with --draw-seed {draw_seed}")
    if a.dry_run:
        for r in plan:
            print(describe(r))
        return
    from storagebrief.core.targets import resolve_device

    dev = resolve_device(a.target.resolve())
    if dev.major is None:
        raise SystemExit(f"--target {a.target}: its block device is unknown ({dev.reason}): no per-side byte counts")
    a.mlperf_dir, work = a.mlperf_dir.resolve(), a.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    py = tool_venv(a.mlperf_dir, work)
    caches = {"mlperf": a.target.resolve() / "kvbench-mlperf", "study": a.target.resolve() / "kvbench-ours"}
    for d in caches.values():
        if d.exists():                         # not ours to empty: a folder this benchmark did not make
            raise SystemExit(f"--target {a.target}: {d} exists; remove it (a killed run's) or choose another target")
    print(f"device {dev.name} ({dev.major}:{dev.minor})")
    rows = []
    try:
        for r in plan:
            print(describe(r), flush=True)
            print("round side    read/s   write/s  rd GiB  cg rd    wr GiB  cg wr    reqs  rd p95 ms  wr p95 ms  "
                  "elapsed MiB/read MiB/wri  miss %", flush=True)
            got = {}
            for name in r["order"]:
                caches[name].mkdir(exist_ok=True)
                if name == "mlperf":
                    got[name] = run_tool(py, a, r, tool_config(a.mlperf_dir, work, r), caches[name],
                                         work / f"mlperf-r{r['round']}.json", (dev.major, dev.minor))
                elif a.tool_vs_tool:                     # the control: the tool again, with the study's seed
                    got[name] = run_tool(py, a, {**r, "seeds": {"mlperf": r["seeds"]["study"]}},
                                         tool_config(a.mlperf_dir, work, r), caches[name],
                                         work / f"mlperf-control-r{r['round']}.json", (dev.major, dev.minor))
                else:
                    got[name] = run_ours(a, r, templates, caches[name], work, (dev.major, dev.minor))
                _clear(caches[name])
                print(line(r["round"], "tool-2" if a.tool_vs_tool and name == "study" else name, got[name]),
                      flush=True)
            m, o = got["mlperf"], got["study"]
            q = ratios(m, o)
            if a.tool_vs_tool:
                print(f"{r['round']:>5} ratio   {q['read']:>8.2f} {q['write']:>8.2f}   (the tool with the second seed ÷ "
                      f"with the first; MiB per read {q['mib_per_read']:.2f}, per write {q['mib_per_write']:.2f}; "
                      f"reload misses {q['miss_points']:+.1f} points)", flush=True)
                rows.append({**r, "mlperf": m, "tool-2": o, "ratios": q})
                continue
            print(f"{r['round']:>5} ratio   {q['read']:>8.2f} {q['write']:>8.2f}   (study ÷ MLPerf's tool; MiB per read "
                  f"{q['mib_per_read']:.2f}, per write {q['mib_per_write']:.2f}; reload misses "
                  f"{q['miss_points']:+.1f} points; the study's honest read {o['honest_read_gib_per_s'] or 0:.3f} "
                  f"GiB/s, writes with its demotions {o['with_demotions_gib_per_s'] or 0:.3f} GiB/s; it moved "
                  f"{o['all_read_bytes'] / GIB:.2f} / {o['all_write_bytes'] / GIB:.2f} GiB in all; "
                  f"{o['queued_at_end']} requests queued at its end)", flush=True)
            rows.append({**r, "mlperf": m, "study": o, "ratios": q})
    finally:
        for d in caches.values():
            _clear(d)
            if d.is_dir():
                d.rmdir()
    (work / "rounds.json").write_text(json.dumps({"draw_seed": draw_seed, "rounds": rows}, indent=1))


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
