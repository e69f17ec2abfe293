"""What `make gpu` needs to know, one answer per call (the Makefile does the installing):

  python -m storagebrief.studies.transfer_sweep.gpu_setup extra      -> gpu-cu12 | gpu-cu13 (the driver's CUDA major)
  python -m storagebrief.studies.transfer_sweep.gpu_setup cuda-root  -> a CUDA folder with cufile.h and libcufile

Exit 0 with the answer on stdout; exit 3 with the reason on stderr where there is nothing to do here
(no GPU, a CUDA major without wheels, no CUDA headers), so `make gpu` skips with that reason.
"""
from __future__ import annotations

import glob
import os
import sys
from pathlib import Path

from . import gpu

SKIP = 3


def extra() -> tuple[str | None, str]:
    facts = gpu.driver_facts()
    if not facts.get("gpus"):
        return None, "no CUDA GPU visible (nvidia-smi lists none): the GPU extra is not installed"
    major = gpu.cuda_major(facts)
    if gpu.gpu_packages(major) is None:
        return None, (f"the driver's CUDA version is {facts.get('driver_cuda_version') or 'unknown'}: kvikio and "
                      "cupy publish wheels for CUDA 12 and 13 only (kvikio-cu12/cupy-cuda12x, kvikio-cu13/cupy-cuda13x)")
    return f"gpu-cu{major}", ""


def cuda_roots() -> list[Path]:
    """Candidate CUDA folders ($CUDA_HOME first), each as <root>/include + <root>/lib(64)."""
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), *sorted(glob.glob("/usr/local/cuda*"),
                                                                               reverse=True)]
    out = []
    for h in filter(None, homes):
        out += [Path(h), *map(Path, sorted(glob.glob(f"{h}/targets/*")))]
    return out


def cuda_root() -> tuple[Path | None, str]:
    for r in cuda_roots():
        lib = next((d for d in (r / "lib", r / "lib64") if list(d.glob("libcufile.so*"))), None)
        if (r / "include" / "cufile.h").is_file() and lib is not None and list(lib.glob("libcudart.so*")):
            return r, ""
    return None, ("no CUDA folder with include/cufile.h, libcufile and libcudart (looked in $CUDA_HOME, "
                  "/usr/local/cuda*): fio's libcufile engine is not built (install CUDA's toolkit with GDS, "
                  "e.g. NVIDIA's cuda-toolkit and gds-tools packages, then run `make gpu` again)")


def main(argv: list[str]) -> int:
    what = argv[0] if argv else ""
    if what == "extra":
        ans, why = extra()
    elif what == "cuda-root":
        root, why = cuda_root()
        ans = str(root) if root else None
    else:
        print(f"gpu_setup: '{what}' is not a question; allowed: extra, cuda-root", file=sys.stderr)
        return 2
    if ans is None:
        print(why, file=sys.stderr)
        return SKIP
    print(ans)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
