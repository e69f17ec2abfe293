"""The contract between a study and the package, typed once: what each of a study's rooms holds.

A study's rooms are modules found by name (core/study.py). These Protocols say what the engine
(core/sweep.py) and the brief (brief/) read from three of them:
  RunRoom      run.py      the hooks the engine calls, in order: prepare, plan, (skip,) (configure,)
                           run_id, run_one, finish, close
  MetricsRoom  metrics.py  the study's declared columns, what the brief's gate requires, headlines, metrics.json
  BriefRoom    brief.py    its section of the brief, its first-page answers, its traced workloads
A hook or part a study does not have is declared None in its room (`configure = skip = None`), so every
name is there and nobody probes a room with getattr. `problems(room, Protocol)` lists what a room lacks
or holds wrongly; the engine refuses a study whose run room has any (`checked`), and
tests/studies/test_contract.py holds every registered study to all three.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    from pandas import DataFrame

    from .columns import Column
    from .measured_run import Run
    from .targets import Target
# `Sweep` below is core.sweep.Sweep, not imported: core.sweep imports this module.


@dataclass(frozen=True)
class Point:
    """One configuration at one repeat; it runs on every target (or `targets` only)."""
    config: Any
    repeat: int
    label: str
    targets: tuple[str, ...] | None = None
    rerun: int = 0          # 0: the point's run; k: its k-th re-run after a disturbed run (core/reruns.py)


@dataclass
class Measurement:
    """What run_one returns: the study's columns and anything that goes beside runs.csv."""
    row: dict
    ok: bool = True                                    # False: a failed run
    failure_reason: str = ""                           # why it failed (the engine writes both columns)
    tables: dict[str, list[dict]] = field(default_factory=dict)   # file name -> rows to append
    series: dict[str, Any] = field(default_factory=dict)          # suffix -> rows of timeseries/<run_id><suffix>.csv


class ContractError(TypeError):
    """A study's room does not hold what the contract says (a programming error of the study)."""


class AdaptivePlan(Protocol):
    """What plan() may return instead of a list of Points (core/plans.py)."""
    kind: str

    def next(self) -> tuple[Point, str] | None: ...
    def done(self, point: Point, target: str, row: dict) -> None: ...
    def runs_left(self) -> int: ...


class RunRoom(Protocol):
    """run.py: the sweep hooks (core/sweep.py's docstring says when each runs)."""
    def prepare(self, sweep: Sweep) -> None: ...
    def plan(self, sweep: Sweep) -> list[Point] | AdaptivePlan: ...
    def run_id(self, config: Any, target: Target, repeat: int) -> str: ...
    def run_one(self, run: Run, config: Any) -> Measurement: ...
    # optional: None where the study has none
    configure: Callable[[Sweep, Any, Target], Any] | None      # settle a configuration just before it runs
    skip: Callable[[Sweep, Point, Target], bool] | None        # leave a run of a fixed plan out
    finish: Callable[[Sweep, DataFrame], None] | None          # study-wide outputs after the last run
    close: Callable[[Sweep], None] | None                      # always last: stop what outlives runs


class MetricsRoom(Protocol):
    """metrics.py: the study's runs.csv columns and the arithmetic on them."""
    COLUMNS: tuple[Column, ...]          # every column the study writes (unit, meaning, kind)
    RUNS_COLUMNS: dict[str, str]         # what the brief's gate requires: columns.kinds(REQUIRED, COLUMNS)
    def headlines(self, frame: DataFrame, target_names: list[str]) -> list[dict]: ...
    def metrics(self, frame: DataFrame, target_names: list[str]) -> dict: ...


class BriefRoom(Protocol):
    """brief.py: the study's section of the brief."""
    def section(self, study_dir: Path, frame: DataFrame, target_names: list[str]) -> None: ...
    # optional: None where the study has none
    answers: Callable[[Path, DataFrame, list[str]], list[dict]] | None      # first page: {question, target, ...}
    trace_workloads: Callable[[DataFrame, list[str]], list[tuple[str, str]]] | None   # (label, run_id) to trace


ROOMS: dict[str, type] = {"run": RunRoom, "metrics": MetricsRoom, "brief": BriefRoom}

# How many positional arguments each callable takes (the Protocols' methods and optional hooks alike).
_ARITY = {"prepare": 1, "plan": 1, "run_id": 3, "run_one": 2, "configure": 3, "skip": 3, "finish": 2, "close": 1,
          "headlines": 2, "metrics": 2, "section": 3, "answers": 3, "trace_workloads": 2}
_DATA = {"COLUMNS": tuple, "RUNS_COLUMNS": dict}


def members(protocol: type) -> tuple[str, ...]:
    """Every name a room of this kind holds: its methods, then its attributes."""
    methods = [n for n, v in vars(protocol).items() if inspect.isfunction(v) and not n.startswith("_")]
    return (*methods, *protocol.__annotations__)


def optional(protocol: type) -> tuple[str, ...]:
    """The callables a room may declare None."""
    return tuple(n for n in protocol.__annotations__ if n not in _DATA)


def _takes(fn, n: int) -> bool:
    try:
        inspect.signature(fn).bind(*[None] * n)
    except TypeError:
        return False
    except ValueError:      # no signature to read (a builtin): trusted
        return True
    return True


def problems(room, protocol: type) -> list[str]:
    """What `room` lacks or holds wrongly for `protocol` (empty: it keeps the contract)."""
    out, names, opt = [], vars(room) if hasattr(room, "__dict__") else {}, optional(protocol)
    for name in members(protocol):
        if name not in names:
            out.append(f"lacks `{name}`" + (" (None where the study has none)" if name in opt else ""))
            continue
        value = names[name]
        if name in _DATA:
            if not isinstance(value, _DATA[name]):
                out.append(f"`{name}` is a {type(value).__name__}, not a {_DATA[name].__name__}")
        elif value is None and name in opt:
            continue
        elif not callable(value):
            out.append(f"`{name}` is not callable")
        elif not _takes(value, _ARITY[name]):
            out.append(f"`{name}` does not take {_ARITY[name]} positional argument(s)")
    return out


def checked(room, protocol: type, where: str):
    """The room itself, once it keeps the contract; else ContractError naming every problem."""
    found = problems(room, protocol)
    if found:
        raise ContractError(f"{where} breaks the study contract (core/contract.py {protocol.__name__}): "
                            + "; ".join(found))
    return room
