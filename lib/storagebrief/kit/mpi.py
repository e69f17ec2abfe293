"""mpirun for any study: find it, check the hosts before any work, start N ranks of a module (mpirun's arguments,
Open MPI's folders, the environment), read their lines, and say why mpirun failed in one line. kit.ranks runs a
study's workers as such ranks through kit.mpi_session (one request per operation, replies gathered to rank 0).

A rank that fails aborts the job (MPI_Abort); mpirun exits non-zero and the run fails with the
ranks' own messages (`mpi_cause`). mpirun dies with the study (SIGTERM on the study's death: Open MPI
then stops every rank), so kill -9 of the study leaves no rank behind; mpirun starts through a
procs.Scope (a cgroup that holds it and its ranks where the machine allows, the owner marker, its own
session), which kills whatever is left when the run ends, and after a kill -9 the leftovers sweep.

Open MPI's files stay out of the system folders: its session directory (by default
/tmp/ompi.<host>.<uid>/pid.<mpirun>, ~8 MB of PMIx segments; a killed mpirun leaves it) goes in a
scratch folder of the work folder (`orte_tmpdir_base`, Open MPI 4.x, verified with 4.1.4;
`prte_tmpdir_base` for 5.x; the local/remote variants are refused by 4.1's ranks), and its
shared-memory segments (vader_segment.*, by default loose in /dev/shm) in a folder of ours in
/dev/shm (kept in memory: on the target's disk their writeback would add writes to the measured
device), when every rank is on this host. Both are removed when the run ends, and after a kill -9 by
the next run (scratch folders named with their owner's PID; leftovers.remove_leftovers sweeps
/dev/shm).

Messages name the study's params section (`section`, e.g. "emulate": `emulate.mpi.hosts`).
"""
from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from pydantic import Field, model_validator

from ..core import procs
from ..core.causes import SEPARATOR, EnvironmentFailure, first_paragraph, known_cause, one_line
from ..core.config import ProjectPath, Strict

READY = "storagebrief-mpi-ready"
REQUEST, REPLY = "storagebrief-mpi-request", "storagebrief-mpi-reply"


class MpiParams(Strict):
    """A study's `mpi:` params section (`launcher: mpi`): how mpirun (Open MPI) is called."""

    mpirun: str = "mpirun"
    hostfile: ProjectPath | None = None          # Open MPI hostfile ("node1 slots=8" per line)
    hosts: list[str] = Field(default_factory=list)   # or --host entries, e.g. ["node1:8", "node2:8"]
    oversubscribe: bool = True           # more ranks than cores on a host (needed on small clients)
    extra_args: list[str] = Field(default_factory=list)   # e.g. ["--mca", "btl_tcp_if_include", "eth0"]

    @model_validator(mode="after")
    def _one_host_list(self):
        if self.hostfile and self.hosts:
            raise ValueError("give mpi.hostfile or mpi.hosts, not both")
        return self


class MpiUnavailable(RuntimeError):
    pass


class MpiStartupError(ValueError):
    """mpirun cannot start the ranks with these hosts / arguments (found before any dataset work)."""


def check_available(mpirun: str, section: str) -> str:
    """The mpirun path and a working mpi4py, or MpiUnavailable saying what to install."""
    path = shutil.which(mpirun)
    if path is None:
        raise MpiUnavailable(f"{section}.mpi.mpirun = '{mpirun}' is not on PATH: install Open MPI "
                             "(Debian: apt-get install openmpi-bin libopenmpi-dev; `make env` does it as root) "
                             f"or set {section}.launcher = fork")
    probe = subprocess.run([sys.executable, "-c", "from mpi4py import MPI"], capture_output=True, text=True)
    if probe.returncode != 0:
        tail = (probe.stderr.strip().splitlines() or ["?"])[-1]
        raise MpiUnavailable(f"{section}.launcher = mpi needs mpi4py in this environment ({tail}); "
                             f"pip install 'storagebrief[mpi]' (or `make env`), or set {section}.launcher = fork")
    return path


def launcher_args(mpirun: str, n: int, mpi) -> list[str]:
    """mpirun and its options for n ranks (the program follows); the preflight uses the same."""
    cmd = [mpirun, "-np", str(n)]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if mpi.oversubscribe:
        cmd.append("--oversubscribe")
    if mpi.hostfile:
        cmd += ["--hostfile", str(mpi.hostfile)]
    if mpi.hosts:
        cmd += ["--host", ",".join(mpi.hosts)]
    for var in ("PYTHONPATH", "TF_CPP_MIN_LOG_LEVEL"):
        if var in os.environ:
            cmd += ["-x", var]
    return cmd + list(mpi.extra_args)


SHM = Path("/dev/shm")
SHM_PARAMS = ("btl_vader_backing_directory", "btl_sm_backing_directory", "osc_sm_backing_directory",
              "osc_rdma_backing_directory", "shmem_mmap_backing_file_base_dir")


def mpi_env(session_base: Path, shm_dir: Path | None) -> dict[str, str]:
    """MCA settings (environment) that keep Open MPI's session directory and shared-memory files in
    folders of the run. Names a version does not know are ignored by it (verified with 4.1.4)."""
    env = {"OMPI_MCA_orte_tmpdir_base": str(session_base),     # Open MPI 4.x (ORTE)
           "PRTE_MCA_prte_tmpdir_base": str(session_base)}     # Open MPI 5.x (PRRTE)
    if shm_dir is not None:
        env.update({f"OMPI_MCA_{k}": str(shm_dir) for k in SHM_PARAMS})
    return env


def _all_local(mpi) -> bool:
    return not mpi.hostfile and not mpi.hosts


def _lines(stream, q: queue.Queue) -> None:
    for line in stream:
        q.put(line.rstrip("\n"))
    q.put(None)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()          # Open MPI forwards it to every rank and exits
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def open_mpi_folders(work_dir: Path, mpi):
    """(session folder base, shared-memory folder or None) for one mpirun, removed afterwards."""
    work_dir.mkdir(parents=True, exist_ok=True)
    procs.remove_dead_scratch(work_dir)              # a killed run's session directory
    scratch = procs.scratch_dir(work_dir, "mpi")
    # Shared memory only where every rank can reach the folder: a remote host has no such folder,
    # and there Open MPI's own default (/dev/shm, cleaned by Open MPI when it ends) stays.
    shm = None
    if _all_local(mpi):
        shm = procs.scratch_dir(SHM, "mpi") if SHM.is_dir() and os.access(SHM, os.W_OK) else scratch / "shm"
        shm.mkdir(exist_ok=True)
    try:
        yield scratch, shm
    finally:
        procs.remove_scratch(shm)
        procs.remove_scratch(scratch)


def _start(scope, cmd: list[str], config: dict, work_dir: Path, env: dict) -> tuple:
    """mpirun started in `scope` with the config file; (proc, cmd, result file, stderr file, launch host)."""
    config_file, result_file, err_file = (work_dir / "mpi-config.json", work_dir / "mpi-result.pickle",
                                          work_dir / "mpi-stderr.txt")
    result_file.unlink(missing_ok=True)
    launch_host = socket.gethostname()
    config_file.write_text(json.dumps({**config, "launch_host": launch_host}))
    cmd = cmd + [str(config_file), str(result_file)]
    with open(err_file, "w") as err:
        # SIGTERM on our death: Open MPI then stops every rank itself.
        proc = scope.popen(cmd, pdeathsig=signal.SIGTERM, env={**os.environ, **env},
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
    return proc, cmd, result_file, err_file, launch_host


def _wait_for(lines: queue.Queue, proc, word: str, timeout_s: float | None, err_file: Path, when: str) -> str:
    """The next line that is `word` or starts with `word` and a space; EnvironmentFailure with the ranks'
    cause when mpirun ends first (or the timeout passes)."""
    deadline = time.monotonic() + timeout_s if timeout_s else None
    while True:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            line = ""
        if line is None or (line == "" and proc.poll() is not None):
            proc.wait()
            raise EnvironmentFailure(f"MPI ranks failed {when} (mpirun exited with status {proc.returncode}): "
                               f"{_cause(err_file)}")
        if line == word or line.startswith(word + " "):
            return line
        if deadline and time.monotonic() > deadline:
            raise EnvironmentFailure(f"MPI ranks not ready after {timeout_s:.0f} s: {_cause(err_file)}")


def _cause(err_file: Path) -> str:
    """The cause in the ranks' and Open MPI's output, and where the whole of it is."""
    try:
        text = err_file.read_text(errors="replace")
    except OSError:
        return "(no output from mpirun)"
    return f"{mpi_cause(text) or '(no output from mpirun)'} (all of mpirun's output: {err_file})"


# --------------------------------------------------------------------------- why mpirun failed
RANK_FAILED = re.compile(r"^rank \d+ on \S+ failed")
# Lines that name a cause, in priority order; Open MPI's help text around them is generic.
MPI_CAUSES = [re.compile(p) for p in (
    r"Could not resolve hostname", r"Host key verification failed", r"Permission denied",
    r"Connection (refused|timed out|closed)", r"No route to host", r"^ssh: ",
    r"mpirun: Error", r"unknown option", r"exited on signal \d+",
    r"was unable to find the specified executable",
)]
# Open MPI's own bookkeeping, interleaved with the help text: never the cause.
MPI_NOISE = re.compile(r"ORTE_ERROR_LOG|orte_base_help_aggregate|more process(es)? ha(s|ve) sent help message")
# Paragraphs that only say that something failed; a later one says what.
MPI_GENERIC = re.compile(r"^Primary job +terminated normally|^It looks like (MPI_INIT|orte_init|opal_init) failed|^\[[^\]]+\] \*\*\* ")
OMPI_EXIT = re.compile(r"Process name:\s*\[\[\d+,\d+\],(\d+)\].*?Exit code:\s*(-?\d+)", re.S)


def mpi_cause(text: str) -> str | None:
    """One line saying why mpirun failed: a rank's own exception, else the line naming a known cause
    (ssh, options, signals), else Open MPI's first paragraph (plus which rank exited, when it says)."""
    text = "\n".join(ln for ln in text.splitlines() if not MPI_NOISE.search(ln))
    found = _rank_exception(text.splitlines()) or known_cause(text, MPI_CAUSES)
    if found:
        return found
    head = first_paragraph(text, MPI_GENERIC)
    m = OMPI_EXIT.search(text)
    if m:                                            # Open MPI's process name, said as the rank
        head = re.sub(r" \(Process name:.*\)$", "", head or "a rank failed")
        head = f"{head} (rank {m.group(1)} exited with code {m.group(2)} without a message)"
    return head


def _rank_exception(lines: list[str]) -> str | None:
    """'rank 1 on host failed …: ValueError: why' from a rank's traceback (its last unindented line)."""
    for i, line in enumerate(lines):
        if not RANK_FAILED.match(line):
            continue
        exc = None
        for nxt in lines[i + 1:]:
            if SEPARATOR.match(nxt) or RANK_FAILED.match(nxt):
                break
            if nxt.strip() and not nxt[0].isspace() and not nxt.startswith(
                    ("Traceback", "During handling", "The above exception")):
                exc = nxt
        return one_line(f"{line.rstrip().rstrip(':')}: {exc}" if exc else line)
    return None


# --------------------------------------------------------------------------- preflight
PROBE = "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()"   # ranks start, initialise MPI and meet
HOSTFILE_OPTION = re.compile(r"^[A-Za-z_-]+=\d+$")


def check_hostfile(path: str, section: str) -> None:
    """The hostfile exists and every line is 'host [key=N ...]' (Open MPI's syntax), or MpiStartupError."""
    f = Path(path)
    if not f.is_file():
        raise MpiStartupError(f"{section}.mpi.hostfile '{path}' does not exist or is not a file; give an Open MPI "
                              f"hostfile ('node1 slots=8' per line) or {section}.mpi.hosts")
    hosts = 0
    for no, raw in enumerate(f.read_text(errors="replace").splitlines(), 1):
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        bad = [w for w in words[1:] if not HOSTFILE_OPTION.match(w)]
        if bad:
            raise MpiStartupError(f"{section}.mpi.hostfile '{path}' line {no}: '{one_line(bad[0], 60)}' is not "
                                  "key=number (lines are 'host [slots=N] [max_slots=N]')")
        hosts += 1
    if not hosts:
        raise MpiStartupError(f"{section}.mpi.hostfile '{path}' lists no host")


def preflight(mpi, ranks: int, work_dir: Path, section: str, timeout_s: float = 60.0, ranks_knob: str = "") -> None:
    """mpirun starts `ranks` ranks with the study's hosts, arguments and oversubscription and they meet in
    a barrier; else MpiStartupError quoting Open MPI's cause and what to do. Without it a wrong host or
    option shows at the first run, after the datasets were built, as a page of Open MPI's generic help."""
    mpirun = check_available(mpi.mpirun, section)
    if mpi.hostfile:
        check_hostfile(mpi.hostfile, section)
    cmd = launcher_args(mpirun, ranks, mpi)
    with open_mpi_folders(work_dir, mpi) as (scratch, shm):
        rc, out = _probe(cmd + [sys.executable, "-c", PROBE], mpi_env(scratch / "session", shm), timeout_s)
    if rc == 0:
        return
    what = f"did not finish within {timeout_s:.0f} s" if rc is None else f"exited with status {rc}"
    cause = mpi_cause(out) or "(no output)"
    raise MpiStartupError(f"{section}.launcher = mpi: the start-up check `{' '.join(cmd)} python -c <MPI barrier>` "
                          f"{what}: {cause}; {_advice(cause, mpi, ranks, section, ranks_knob)}")


def _probe(cmd: list[str], env: dict, timeout_s: float) -> tuple[int | None, str]:
    """(exit status, or None after the timeout; output) of one mpirun; nothing it started outlives it."""
    scope = procs.Scope.tracked("mpi-preflight")
    try:
        # No stdin and a session of its own: ssh cannot stop to ask for a password; it fails instead.
        proc = scope.popen(cmd, pdeathsig=signal.SIGTERM, env={**os.environ, **env}, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        try:
            out = proc.communicate(timeout=timeout_s)[0] or ""
            return proc.returncode, out
        except subprocess.TimeoutExpired:
            scope.kill()                             # mpirun, its daemons and ranks: then the pipe ends
            return None, proc.communicate(timeout=10)[0] or ""
    finally:
        scope.close()


def _advice(cause: str, mpi, ranks: int, section: str, ranks_knob: str) -> str:
    """What to change, by the kind of cause."""
    if "slots" in cause:
        return (f"set {section}.mpi.oversubscribe = true, give the hosts more slots, or ask for fewer than "
                f"{ranks} ranks ({ranks_knob or section})")
    if "hostfile" in cause:
        return f"check {section}.mpi.hostfile"
    if re.search(r"unknown option|mpirun: Error|MCA|Component:", cause):
        return f"check {section}.mpi.extra_args {list(mpi.extra_args)}"
    if re.search(r"resolve|ssh|Host key|Permission denied|Connection|route|daemons", cause):
        return (f"check {section}.mpi.hosts / hostfile: every host must resolve, accept ssh without a password "
                f"and have Open MPI and {sys.executable} (with storagebrief and mpi4py) at the same paths")
    return f"check {section}.mpi (hosts, hostfile, extra_args, oversubscribe) or set {section}.launcher = fork"


# --------------------------------------------------------------------------- one rank
POLL_S = 100e-6


def polite_barrier(comm):
    """An MPI barrier that sleeps while it waits.

    Open MPI's blocking barrier spins: a rank waiting for a slow peer burns a core, which
    would show up as client CPU (and starve the loaders on a small client) where the
    forked accelerators sleep in their barrier. Polling a non-blocking barrier every
    100 us costs at most that much release latency per step (measured, in
    `barrier_release_s_total`)."""
    def wait():
        req = comm.Ibarrier()
        while not req.Test():
            time.sleep(POLL_S)
    return wait
