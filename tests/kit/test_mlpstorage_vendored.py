"""Issue 60: MLPerf's code comes from the archive vendored in third_party/mlperf-storage/ (GitHub is not reachable
everywhere this project is built): the archive is the pinned commit's, holds what storagebrief runs and matches its
SHA256SUMS, and `make mlpstorage` refuses, in one line and before extracting anything, an archive that does not."""
from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tarfile

from conftest import REPO

VENDORED = REPO / "third_party" / "mlperf-storage"


def _pinned() -> str:
    return re.search(r"^MLPSTORAGE_COMMIT := (\w+)$", (REPO / "Makefile").read_text(), flags=re.M).group(1)


def test_the_vendored_archive_is_the_pinned_commits_and_its_sum_is_right():
    commit = _pinned()
    archive = VENDORED / f"mlc-storage-{commit}.tar.gz"
    (line,) = (VENDORED / "SHA256SUMS").read_text().splitlines()
    assert line.split() == [hashlib.sha256(archive.read_bytes()).hexdigest(), archive.name]
    with tarfile.open(archive) as tar:
        assert tar.pax_headers.get("comment") == commit        # git archive's record of the commit
        names = set(tar.getnames())
    for path in ("mlpstorage_py/report_generator.py", "mlpstorage_py/submission_checker/main.py",
                 "configs/dlio/workload", "kv_cache_benchmark/kv-cache.py", "kv_cache_benchmark/requirements.txt",
                 "LICENSE.md"):
        assert path in names, path
    assert {n.split("/")[0] for n in names} == {"mlpstorage_py", "configs", "kv_cache_benchmark", "LICENSE.md"}
    assert commit in (VENDORED / "README.md").read_text()


def test_make_mlpstorage_refuses_an_archive_whose_sum_differs(tmp_path):
    vendored = tmp_path / "vendored"
    shutil.copytree(VENDORED, vendored)
    archive = vendored / f"mlc-storage-{_pinned()}.tar.gz"
    archive.write_bytes(archive.read_bytes()[:-1] + b"x")
    p = subprocess.run(["make", "-s", "--no-print-directory", "-C", str(REPO), "mlpstorage",
                        f"MLPSTORAGE={tmp_path / 'out'}", f"MLPSTORAGE_DIR={vendored}", "MLPSTORAGE_GIT="],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    # make's own "*** ... Error 1" line aside (make[1] when the suite itself runs under `make test`)
    said = [line for line in p.stderr.splitlines() if not line.startswith(("make: ***", "make[1]: ***"))]
    assert len(said) == 1 and "SHA256SUMS says" in said[0] and "not extracted" in said[0], p.stderr
    assert not (tmp_path / "out").exists()
