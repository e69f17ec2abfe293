"""Do two training-job start-ups side by side cost less than two in a row? Ratios measured side by side.

    python benchmarks/train_startup.py [--params params.yaml] [--target local] [--rounds 2]

The train_resnet50 study pairs start-ups (prestart.py): a run whose jobs start cold also
starts the next run's jobs. Each job here is the study's own (jobs.Job running worker.py:
TensorFlow import, ResNet50 build, tracing the train step, warm-up, ready), without a cgroup,
on the study's quick spec; it is killed at ready. Rounds interleave the variants so drift
hits both alike:
  in a row     job A to ready, then job B to ready
  paired       jobs A and B started together, both to ready
Prints the wall seconds of each and paired ÷ in a row (goal <= 0.7 on an idle 2-core machine:
start-up is mostly one core's work). Not a test: numbers depend on the machine and its load.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2, help="rounds of (in a row, paired)")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("-S", "--set", dest="overrides", action="append", default=[])
    ap.add_argument("--target", default=None, help="target name (default: the first)")
    args = ap.parse_args()

    from storagebrief.core import config, targets as targets_mod
    from storagebrief.studies.train_resnet50.dataset import generate_dataset
    from storagebrief.studies.train_resnet50.jobs import Job, _poll
    from storagebrief.studies.train_resnet50.run import cpu_split

    params = config.load(args.params, args.overrides)
    name = args.target or params.targets[0].name
    try:
        params.target(name)
    except config.ParamsError as exc:   # names the allowed ones
        raise SystemExit(str(exc)) from None
    target = {t.name: t for t in targets_mod.resolve_all(params)}[name]
    p = params.section("train_resnet50")
    ds = generate_dataset(target, p.model_copy(update={"dataset_images": p.batch_size, "shards": 1}),
                          name="benchmark-startup-dataset")
    work = Path(tempfile.mkdtemp(prefix="train-startup-"))

    def job(i: int) -> Job:
        spec = {"job": i, "files": ds.files, "input_size": p.input_size, "batch_size": p.batch_size,
                "num_classes": p.num_classes, "epochs": 1, "steps_per_epoch": 1, "learning_rate": p.learning_rate,
                "shuffle_buffer": p.shuffle_buffer, "read_parallelism": p.read_parallelism,
                "warmup_steps": p.warmup_steps, "seed": p.seed, "threads": len(os.sched_getaffinity(0)),
                "cpus": cpu_split(1)[0], "checkpoint_dir": str(work / "ckpt"), "checkpoint_every_steps": 0,
                "checkpoint_interval_s": p.checkpoint_default_interval_s}
        return Job(i, spec, None, work / f"job{i}.log")

    def to_ready(jobs: list[Job]) -> float:
        t0 = time.perf_counter()
        try:
            for j in jobs:
                j.start(work / f"job{j.index}.json")
            _poll(jobs, "ready", p.stall_timeout_s, p.stall_timeout_s * 2)
            return time.perf_counter() - t0
        finally:
            for j in jobs:
                j.kill()

    out = {"in a row": [], "paired": []}
    try:
        for _ in range(args.rounds):
            out["in a row"].append(to_ready([job(0)]) + to_ready([job(1)]))
            out["paired"].append(to_ready([job(0), job(1)]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in out.items()}
    print(f"two train_resnet50 job start-ups to ready (ResNet50 {p.input_size}x{p.input_size}, batch "
          f"{p.batch_size}, {p.warmup_steps} warm-up steps), {len(os.sched_getaffinity(0))} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}, {args.rounds} rounds (medians)")
    for k, v in out.items():
        print(f"{k:<10}{med[k]:>8.1f} s   per round: " + ", ".join(f"{x:.1f}" for x in v))
    print(f"paired ÷ in a row = {med['paired'] / med['in a row']:.3f}   (goal <= 0.7 on an idle 2-core machine)")


if __name__ == "__main__":
    main()
