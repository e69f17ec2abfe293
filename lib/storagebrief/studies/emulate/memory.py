"""What the accelerators need of the page-cache cap (`dataset_sizing: memory_cap`), and when it thrashed.

Under the cap the accelerators run in one memory cgroup of `memory_limit_mib`. Besides the cached dataset
it must hold, at every instant, what the readers have in flight: each read thread's current read (up to
`read_block_kib`, a sample's size on average; readahead is off under the cap) in the page cache until it is
copied out, plus each accelerator's own memory charged after it joins (its step times, latencies, thread
stacks, the pages its interpreter copies on write). When those take most of the cap, the kernel reclaims
pages still being read and reads them again: the device reads several times what the loaders asked for and
AU falls — a figure of the cap, a client setting, not of the storage.

Measured on the 2-core development VM (unet3d, quick profile: 0.5 MB samples, 4 read threads, 32 MiB cap,
`local` target), need as a share of the cap and device bytes per loader byte: 8 accelerators (0.61) 0.98 in
all of 6 runs; 10 (0.76) 1.00 in 3 runs and 2.56 in 1 (AU 49 %); 12 (0.91) 2.6 and 2.9 (AU 43 %, labelled
storage-limited before this rule); 16 (1.2) 6.7; 32 thrashed for minutes until the OOM killer took an
accelerator. An accelerator's own memory: 16.8 MB for 32 of them (memory.stat rss).

So
  budget     a count whose need exceeds USABLE_SHARE of the cap is not run: a fixed list naming it is refused
             by validate, a search stops below it ("≥ N (page-cache cap)");
  thrash     a capped run whose device read >= THRASH_RATIO × the loaders' bytes is client-limited
             (limits.py): the cap, not the storage, set its AU.
"""
from __future__ import annotations

OWN_BYTES = 512 << 10          # an accelerator's own memory charged in the cgroup (measured above: 16.8 MB / 32)
USABLE_SHARE = 0.65            # of the cap; the rest is the kernel's room to reclaim (measured above)
THRASH_RATIO = 1.25            # device bytes per loader byte at or above this, under the cap: the cap thrashed
PAGE = 4096


def read_bytes(block: int, record_bytes: int) -> int:
    """One read thread's read in flight: a block, or a whole sample when samples are smaller (page-rounded)."""
    return -(-min(block, record_bytes) // PAGE) * PAGE


def need_bytes(n: int, threads: int, block: int, record_bytes: int) -> int:
    """What n accelerators hold in the cgroup besides the cached dataset."""
    return n * (threads * read_bytes(block, record_bytes) + OWN_BYTES)


def max_accelerators(cap: int, threads: int, block: int, record_bytes: int) -> int:
    """The largest n whose need fits USABLE_SHARE of the cap (0: not even one)."""
    return int(USABLE_SHARE * cap // (threads * read_bytes(block, record_bytes) + OWN_BYTES))


def explain(n: int, cap: int, threads: int, block: int, record_bytes: int) -> str:
    """Why n accelerators do not fit the cap, in numbers."""
    per = threads * read_bytes(block, record_bytes) + OWN_BYTES
    return (f"{n} accelerators need {n} × ({threads} read threads × {read_bytes(block, record_bytes) / 2**20:.2f} MiB in "
            f"flight + {OWN_BYTES / 2**20:.1f} MiB own) = {n * per / 2**20:.0f} MiB, over {USABLE_SHARE:.0%} of the "
            f"{cap / 2**20:.0f} MiB page-cache cap (the cache would thrash); at most "
            f"{max_accelerators(cap, threads, block, record_bytes)} fit")


def thrashed(row: dict) -> str | None:
    """The evidence that a capped run's page cache thrashed, in words; None when it did not (or no cap)."""
    ratio, cap = row.get("device_bytes_per_loader_byte"), row.get("memory_limit_bytes")
    if not _known(ratio) or not _known(cap) or ratio < THRASH_RATIO:
        return None
    return (f"page cache thrashed under the {float(cap) / 2**20:.0f} MiB cap (emulate.memory_limit_mib): the device "
            f"read {ratio:.1f} × the bytes the loaders asked for")


def _known(x) -> bool:
    return x is not None and x == x
