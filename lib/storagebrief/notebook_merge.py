"""How `make notebooks` (notebooks.refresh) brings a researcher's .ipynb up to its tracked script without losing an
edit (issue 48: a two-sided edit kept only the pulled cell; JupyterLab's next save of an open notebook put the
stale one back).

- Each .ipynb records the script cells it was made from (`metadata.storagebrief.made_from`), the base of a
  three-way merge per cell: a cell only you changed stays yours, a cell only the script changed takes the
  script's, and a cell both changed keeps both: the script's, then yours below it, marked (`MARK`, tag
  `kept-by-refresh`). A cell you added stays where you put it; a cell you deleted stays deleted unless the script
  changed it. A notebook without the record (made before it) keeps every cell of yours the script does not hold,
  marked, below its nearest script cell.
Whether a notebook is open in a running JupyterLab (refused: its next save would write its stale copy over the
refreshed file) is notebooks.open_in_jupyterlab's.
"""
from __future__ import annotations

import copy
import difflib

TAG = "kept-by-refresh"
MARK = ("kept by make notebooks ({when}): your version of the cell above, which the update to {script} changed "
        "too; merge the two and delete the other")


def is_parameters(cell) -> bool:
    return "parameters" in cell.get("metadata", {}).get("tags", [])


def key(cell) -> tuple[str, str]:
    """What the merge compares; the parameters cell is one fixed key (its values are the researcher's, kept apart)."""
    return ("parameters", "") if is_parameters(cell) else (cell["cell_type"], cell["source"].strip())


def record_base(nb, script_nb) -> None:
    """Remember the script's cells as `nb` now holds them: the next refresh's base."""
    nb.metadata.setdefault("storagebrief", {})["made_from"] = [list(key(c)) for c in script_nb.cells]


def base_of(nb) -> list[tuple[str, str]] | None:
    made = nb.get("metadata", {}).get("storagebrief", {}).get("made_from")
    return [tuple(k) for k in made] if isinstance(made, list) else None


def summary(cell) -> str:
    first = next((line.strip() for line in cell["source"].splitlines() if line.strip()), "(empty)")
    return f"{cell['cell_type']} cell “{first[:60]}{'…' if len(first) > 60 else ''}”"


def differing(old_cells, new_cells) -> list[str]:
    """The cells of `old_cells` (the .ipynb) whose code or text the script does not hold, and the script's cells it
    lacks, as short descriptions (the drift note names them)."""
    old_keys, new_keys = [key(c) for c in old_cells], [key(c) for c in new_cells]
    lines = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old_keys, b=new_keys, autojunk=False).get_opcodes():
        if tag != "equal":
            lines += [f"yours: {summary(c)}" for c in old_cells[i1:i2]]
            lines += [f"the .py's: {summary(c)}" for c in new_cells[j1:j2]]
    return lines


def _mark(cell, when: str, script: str):
    cell = copy.deepcopy(cell)
    text = MARK.format(when=when, script=script)
    cell["source"] = (f"# {text}\n" if cell["cell_type"] == "code" else f"*{text}*\n\n") + cell["source"]
    tags = cell.setdefault("metadata", {}).setdefault("tags", [])
    if TAG not in tags:
        tags.append(TAG)
    return cell


def _map(base: list, other: list) -> tuple[dict[int, int], dict[int, int]]:
    """base index -> other index: (unchanged cells, changed cells: the one that took its place, or the cell after
    which it stood when it is gone, -1 for the top)."""
    same, changed = {}, {}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=base, b=other, autojunk=False).get_opcodes():
        for k in range(i2 - i1):
            if tag == "equal":
                same[i1 + k] = j1 + k
            else:
                changed[i1 + k] = j1 + k if k < j2 - j1 else j2 - 1 if j2 > j1 else j1 - 1
    return same, changed


def merge(old_cells: list, new_cells: list, base: list | None, when: str, script: str) -> tuple[list, list[str]]:
    """The merged cells (parameters cell aside) and what happened to each cell of yours, for the log."""
    new_keys = [key(c) for c in new_cells]
    result: list = [copy.deepcopy(c) for c in new_cells]
    after: dict[int, list] = {}                  # new index (-1: the top) -> cells of yours to put after it
    dropped: set[int] = set()
    said: list[str] = []
    if base is None:                             # no record: every cell of yours the script lacks is kept, marked
        old_keys = [key(c) for c in old_cells]
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old_keys, b=new_keys, autojunk=False).get_opcodes():
            if tag in ("replace", "delete"):
                at = (j2 - 1) if j2 > j1 else j1 - 1
                after.setdefault(at, []).extend(_mark(c, when, script) for c in old_cells[i1:i2])
                said += [f"kept beside the .py's, marked: {summary(c)}" for c in old_cells[i1:i2]]
    else:
        base_to_new, base_changed = _map(base, new_keys)
        ops = difflib.SequenceMatcher(a=base, b=[key(c) for c in old_cells], autojunk=False).get_opcodes()
        for tag, i1, i2, j1, j2 in ops:
            if tag == "equal":
                continue
            for k in range(max(i2 - i1, j2 - j1)):
                b, mine = (i1 + k if k < i2 - i1 else None), (old_cells[j1 + k] if k < j2 - j1 else None)
                if b is None:                    # a cell you added: after the script's cell before it
                    prev = i1 - 1
                    at = base_to_new.get(prev, base_changed.get(prev, -1)) if prev >= 0 else -1
                    after.setdefault(at, []).append(copy.deepcopy(mine))
                    said.append(f"yours, kept: {summary(mine)}")
                elif b in base_to_new:           # the script left this cell alone: your edit (or deletion) stands
                    if mine is None:
                        dropped.add(base_to_new[b])
                    else:
                        result[base_to_new[b]] = copy.deepcopy(mine)
                        said.append(f"yours, kept: {summary(mine)}")
                elif mine is not None:           # both changed it: the script's, then yours, marked
                    after.setdefault(base_changed.get(b, -1), []).append(_mark(mine, when, script))
                    said.append(f"changed on both sides, yours kept below the .py's, marked: {summary(mine)}")
    merged = after.get(-1, [])
    for i, cell in enumerate(result):
        if i not in dropped:
            merged.append(cell)
        merged += after.get(i, [])
    return merged, said
