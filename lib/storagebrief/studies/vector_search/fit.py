"""What the vector search needs of the machine and the target, before any work (kit.budget, kit.space): the
build's peak on the target, the memory of the largest phase, and the tasks of the largest phase.

Peak space of one build, in its staging folder: vectors.npy + queries + ground truth + the index DiskANN
writes (which holds its own copy of the vectors) + its temporaries, taken as TEMP_SHARE of the index (measured
at 100k x 64 on this machine: the folder's peak was vectors.npy + the finished index; the share is a margin).

Memory, the largest of three phases (each figure stated in the refusal):
- generation, in the study process: GEN_COPIES x the vectors (the cluster centres gathered, the noise, their
  sum and its float32 copy) + a ground-truth block (GT_BLOCK queries x num_vectors x 16 bytes: distances, ids);
- the build worker: the vectors handed to DiskANN + DiskANN's build RAM budget (`build_memory_gib`, passed to
  it as build_memory_maximum) + PROCESS_BYTES;
- the search: `threads` worker processes, each with the PQ codes (num_vectors x pq_chunks) + the queries +
  PROCESS_BYTES.

Tasks, the largest of three phases: the build worker (kit.budget's TASKS_PER_WORKER + build threads + 1), the
search (the most `threads` workers, each TASKS_PER_WORKER + ENGINE_THREADS) and fio's probe (FIO_TASKS).
"""
from __future__ import annotations

import os
import re

from ...kit import budget

TEMP_SHARE = 0.25            # DiskANN's temporaries beside its index, as a share of the index's bytes
GEN_COPIES = 4               # copies of the vectors alive at once while the clustered set is generated
GT_BLOCK = 64                # queries per ground-truth block (dataset.ground_truth)
PROCESS_BYTES = 64 * budget.MIB   # a worker's interpreter, numpy and the engine (measured peak 174 MiB at 100k x
                                  # 64 for a build with a 0.25 GiB budget: within vectors + budget + this)
ENGINE_THREADS = 3           # threads DiskANN starts in the search worker when it opens an index (measured: 3)
FIO_TASKS = 2                # fio's process and its helper thread
MIB, GIB = budget.MIB, budget.GIB


def vector_bytes(p) -> int:
    return p.num_vectors * p.dimension * 4


def build_memory_gib(p) -> float:
    """DiskANN's build RAM budget (build_memory_maximum): 4 x the vectors, at least 0.25 GiB."""
    return max(0.25, 4 * vector_bytes(p) / GIB)


def build_peak_bytes(p) -> tuple[int, str]:
    """(bytes, how they add up) of one set's staging folder at its build's peak."""
    side = p.queries * (p.dimension * 4 + p.k * 8)
    index = p.index_bytes()
    total = vector_bytes(p) + side + int(index * (1 + TEMP_SHARE))
    how = (f"vectors {p.num_vectors:,} x {p.dimension} x 4 B = {vector_bytes(p) / MIB:,.1f} MiB + queries and "
           f"ground truth {side / MIB:,.1f} MiB + the index {index / MIB:,.1f} MiB x {1 + TEMP_SHARE:g} for "
           "DiskANN's temporaries")
    return total, how


def memory_need(p) -> tuple[int, str]:
    """(bytes, how) of the phase that needs the most memory: generation, the build or the search."""
    vec = vector_bytes(p)
    gen = GEN_COPIES * vec + GT_BLOCK * p.num_vectors * 16
    build = vec + int(build_memory_gib(p) * GIB) + PROCESS_BYTES
    procs = max(p.threads)
    search = procs * (p.num_vectors * p.pq_chunks + p.queries * p.dimension * 4 + PROCESS_BYTES)
    phases = {
        "generation": (gen, f"{GEN_COPIES} x the vectors {p.num_vectors:,} x {p.dimension} x 4 B + a ground-truth "
                            f"block {GT_BLOCK} x {p.num_vectors:,} x 16 B"),
        "the build": (build, f"the vectors {vec / GIB:,.2f} GiB + DiskANN's build RAM {build_memory_gib(p):,.2f} GiB"
                             f" + {PROCESS_BYTES / MIB:.0f} MiB for the worker"),
        "the search": (search, f"{procs} search process(es) x (PQ codes {p.num_vectors:,} x {p.pq_chunks} B + the "
                               f"queries + {PROCESS_BYTES / MIB:.0f} MiB for the worker)"),
    }
    name, (need, how) = max(phases.items(), key=lambda kv: kv[1][0])
    return need, f"{name}: {how}"


def task_need(p) -> tuple[int, str]:
    """(tasks, how) of the phase that starts the most tasks at once."""
    w = budget.TASKS_PER_WORKER
    build_threads = p.build_threads or os.cpu_count() or 1
    phases = {
        "the build": (w + build_threads + 1, f"the build worker: {w} + {build_threads} build threads + 1"),
        "the search": (max(p.threads) * (w + ENGINE_THREADS),
                       f"{max(p.threads)} search process(es) x ({w} + {ENGINE_THREADS} DiskANN threads)"),
        "the probe": (FIO_TASKS, "fio"),
    }
    return max(phases.values(), key=lambda v: v[0])


def check_budget(p, room: budget.Room | None = None) -> None:
    """Refuse (ValueError, one line with the numbers) settings whose tasks or memory this machine cannot hold."""
    room = room or budget.Room.now()
    shape = f"vector_search.num_vectors = {p.num_vectors:,} x dimension {p.dimension:,}"
    tasks, how = task_need(p)
    budget.check(f"vector_search.threads = {p.threads}, build_threads = {p.build_threads}:", tasks=tasks, how=how,
                 room=room, lower="lower vector_search.threads or build_threads, or raise the limit")
    need, how = memory_need(p)
    budget.check(f"{shape}:", memory=need, how=how, room=room,
                 lower="lower vector_search.num_vectors or dimension, or run where more memory is free")


NO_SPACE = re.compile(r"No space left on device|os error 28|\[Errno 28\]|ENOSPC|Disk quota exceeded|os error 122")


def full_during_build(exc: BaseException) -> bool:
    """True when `exc` (a Python OSError, or the build worker's text: DiskANN's Rust error) is a full target."""
    seen, e = set(), exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in (28, 122):
            return True
        if NO_SPACE.search(str(e)):
            return True
        e = e.__cause__ or e.__context__
    return False
