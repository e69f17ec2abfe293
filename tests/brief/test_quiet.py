"""Issue 61: a disturbed run never answers page 1 silently (the cell it rests on gets a footnote saying so, kept
when the other caveats fold into one), and each chapter says how quiet the machine was (brief/quiet.py)."""
from __future__ import annotations

import pandas as pd

from storagebrief.brief import quiet, scorecard
from storagebrief.brief.pageone import page_one_rows
from test_brief_faults import preprocess_rows, write_study


def _frame(disturbed: dict[str, list[bool]], other=0.05) -> pd.DataFrame:
    rows = [{"target": t, "status": "ok", "disturbed": d, "other_cpu_cores_avg": other,
             "disturbed_reason": "other work used 1.10 cores on average (> 0.25)" if d else ""}
            for t, flags in disturbed.items() for d in flags]
    return pd.DataFrame(rows + [{"target": "slow", "status": "failed", "disturbed": True}])   # a failed run: no answer


def test_a_cell_resting_on_disturbed_runs_says_so():
    f = _frame({"fast": [False, True, True], "slow": [False, False]})
    assert quiet.cell_note(f, "fast") == ("disturbed: this answer rests on runs that ran beside other work and were "
                                          "not re-run quietly (its chapter says how many, and how much)")
    assert quiet.cell_note(f, "slow") == ""                                 # its failed run does not answer
    assert quiet.cell_note(f.drop(columns="disturbed"), "fast") == ""      # results from before the columns
    assert quiet.cell_note(f.astype({"disturbed": str}), "fast") == quiet.NOTE     # as read from runs.csv


def test_the_chapter_says_how_quiet_the_machine_was():
    assert quiet.sentence(_frame({"fast": [False, False]}, other=0.03)) == (
        "How quiet the machine was: other work used 3 % of a core on average (at most 3 % of a core in one run); no run "
        "disturbed.")
    words = quiet.sentence(_frame({"fast": [True, False], "slow": [True]}, other=1.1))
    assert words.startswith("How quiet the machine was: other work used 1.10 cores on average (at most 1.10 cores") \
        and \
        "2 of 3 runs disturbed (fast: 1, slow: 1), e.g. other work used 1.10 cores" in words
    assert quiet.sentence(pd.DataFrame({"target": ["fast"], "status": ["ok"]})) == ""


def test_a_disturbed_run_re_run_quietly_answers_nothing_and_the_chapter_counts_it():
    f = _frame({"fast": [True, False, True]}).assign(run_id=["f1", "f1-rerun1", "f2", "s1"],
                                                      rerun_of=["", "f1", "", ""])
    assert quiet.cell_note(f, "fast") == quiet.NOTE              # f2 was disturbed and not re-run: it answers
    quiet_again = f[f.run_id != "f2"]
    assert quiet.cell_note(quiet_again, "fast") == ""            # f1's quiet re-run answers instead
    assert "1 disturbed run re-run, the re-run counted instead; no run counted was disturbed." in \
        quiet.sentence(quiet_again)
    assert "; 1 disturbed run re-run, the re-run counted instead; 1 of 2 runs disturbed (fast: 1)" in quiet.sentence(f)


def test_a_disturbed_footnote_is_kept_when_the_other_caveats_fold_into_one():
    rows = [{"question": f"Q{i}", "target": "fast", "answer": f"{i} MB/s", "short": f"{i} MB/s",
             "note": f"caveat number {i}"} for i in range(6)]
    rows[5]["disturbed"] = quiet.cell_note(_frame({"fast": [True]}), "fast")
    _, _, cells, notes = scorecard.grid(rows, ["fast"], max_notes=3)
    assert len(notes) == 3 and notes[-1] == scorecard.MORE and rows[5]["disturbed"] in notes
    assert notes.index(rows[5]["disturbed"]) + 1 in cells[("Q5", "fast")][1]     # the cell carries its mark
    assert scorecard.cell_notes(rows[5])[-1] == rows[5]["disturbed"]    # and its chapter prints it (chapter_answer)


def test_page_one_rows_carry_the_disturbed_note_of_their_studys_runs_on_their_target(tmp_path):
    rows = preprocess_rows()
    for r in rows:
        r["disturbed"] = r["target"] == "slow" and r["repeat"] == 2
        r["disturbed_reason"] = "other work used 0.90 cores on average (> 0.25)" if r["disturbed"] else ""
    d = write_study(tmp_path / "reports", "preprocess", rows, tmp_path)
    answers = {a["target"]: a for a in page_one_rows(d.parent) if a.get("study") == "preprocess"}
    assert answers["slow"]["disturbed"] == quiet.NOTE
    assert answers["fast"]["disturbed"] == ""
