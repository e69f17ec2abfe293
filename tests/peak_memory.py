"""The peak memory of a fresh Python running some code, for the object sweep's payload (issue 44: it was three
copies, now one). Shared by the tests of kit/s3ops.py and of the object sweep's worker."""
from __future__ import annotations

import subprocess
import sys

from child_cgroup import ENV
from conftest import REPO


MIB = 1 << 20
OBJECT = 256 * MIB


def _peak_kib(code: str, stdin: str = "") -> int:
    """The peak RSS (KiB) of a fresh Python running `code`: VmHWM, its own address space's high-water mark.
    ru_maxrss survives exec on Linux, so it carried this pytest process's RSS at the fork (281 MiB late in the
    whole suite) into the child's figure."""
    probe = code + ("\nimport sys; print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')][0], "
                    "file=sys.stderr)")
    res = subprocess.run([sys.executable, "-c", probe], input=stdin, capture_output=True, text=True, env=ENV,
                         cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stderr
    return int(res.stderr.strip().splitlines()[-1])
