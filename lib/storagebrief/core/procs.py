"""Children never outlive the run that started them, even after kill -9 of the parent."""
from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send `sig` to this process when its parent dies (Linux prctl).

    Call first thing in a forked child, or as a subprocess preexec_fn. Returns False where
    prctl is unavailable (the run's cgroup sweep still catches leftovers). If the parent is
    already gone when this runs, exit at once."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        ok = libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
    if ok and os.getppid() != parent:   # the parent died before prctl took effect
        os._exit(128 + int(sig))
    return ok


def reap(procs, timeout_s: float) -> None:
    """Join every multiprocessing child, killing any that outlive `timeout_s`."""
    for pr in procs:
        pr.join(timeout=timeout_s)
        if pr.is_alive():
            pr.kill()
            pr.join()
