"""Every registered study keeps the contract typed once in core/contract.py: its run, metrics and brief rooms
hold every name the engine and the brief read (optional hooks declared None), callables that take the
arguments they are called with, and the metrics room's declared columns."""
from __future__ import annotations

import types

import pytest

from storagebrief import studies
from storagebrief.core import columns, contract

STUDIES = list(studies.REGISTRY.values())


@pytest.mark.parametrize("room", sorted(contract.ROOMS))
@pytest.mark.parametrize("study", STUDIES, ids=lambda s: s.name)
def test_every_study_keeps_the_contract(study, room):
    assert contract.problems(study.room(room), contract.ROOMS[room]) == []


@pytest.mark.parametrize("study", STUDIES, ids=lambda s: s.name)
def test_runs_columns_are_declared_columns(study):
    """What the brief's gate requires is a subset of the study's declared columns, with their kinds."""
    m = study.room("metrics")
    assert m.RUNS_COLUMNS == columns.kinds([n for n, k in m.RUNS_COLUMNS.items() if not k.endswith("?")], m.COLUMNS,
                                           [n for n, k in m.RUNS_COLUMNS.items() if k.endswith("?")])


def test_the_contract_names_what_a_room_lacks_or_holds_wrongly():
    room = types.SimpleNamespace(prepare=lambda sweep: None, plan=lambda: [], run_id="r", configure=None,
                                 skip=None, finish=None)
    assert contract.problems(room, contract.RunRoom) == [
        "`plan` does not take 1 positional argument(s)", "`run_id` is not callable", "lacks `run_one`",
        "lacks `close` (None where the study has none)"]
    with pytest.raises(contract.ContractError, match="fake.run breaks the study contract.*lacks `run_one`"):
        contract.checked(room, contract.RunRoom, "fake.run")
    metrics = types.SimpleNamespace(COLUMNS=[], RUNS_COLUMNS={}, headlines=lambda f, n: [], metrics=lambda f, n: {})
    assert contract.problems(metrics, contract.MetricsRoom) == ["`COLUMNS` is a list, not a tuple"]
