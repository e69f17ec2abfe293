"""Page 1 as a scorecard (issue 49): questions as rows, targets as columns, each cell a number with its unit and
a few words, one-line footnotes; every page-1 number printed by its study's chapter too; a chapter keeps one key
figure, one key table and five bullets (the rest in its appendix); answers a reader can use (a projection says its
assumption, a count the client check doubts says "uncertain")."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pandas as pd

from storagebrief.brief import accelerators, scorecard
from storagebrief.report import display, layout

ROWS = [
    {"question": "Accelerators supported (unet3d, AU ≥ 90 %)", "target": "local", "answer": "8 (range 8–15; client-limited beyond)",
     "short": "8 accelerators · client-bound beyond", "note": "fio's forecast, 24, is higher", "study": "emulate"},
    {"question": "Accelerators supported (unet3d, AU ≥ 90 %)", "target": "hdd", "answer": "1 (storage-limited beyond)",
     "basis": "long basis", "study": "emulate"},
    {"question": "Ingest bandwidth", "target": "hdd", "answer": "48.3 MB/s at P = 2", "basis": "b", "study": "preprocess"},
]


def test_questions_are_rows_targets_columns_with_short_cells_and_letter_footnotes():
    questions, columns, cells, notes = scorecard.grid(ROWS, ["local", "hdd"])
    assert questions == ["Accelerators supported (unet3d, AU ≥ 90 %)", "Ingest bandwidth"]
    assert columns == ["local", "hdd"]
    assert cells[(questions[0], "local")] == ("8 accelerators · client-bound beyond", (1,))
    # no short form: the first clause without its parentheses, what was left out is the footnote
    assert cells[(questions[0], "hdd")] == ("1", (2,)) and notes[1] == "storage-limited beyond"
    assert cells[(questions[1], "hdd")] == ("48.3 MB/s at P = 2", ())
    page = scorecard.table_html(ROWS, ["local", "hdd"], {q: "section-x" for q in questions})
    # a footnote mark is a letter: a digit after "8" read as "81" (pdftotext wrote "≥ 21" for "≥ 2" + mark 1)
    assert "<sup>a</sup>" in page and "<sup>b</sup>" in page and "<sup>1</sup>" not in page
    assert page.count("<li data-chapter") == 2 and "long basis" not in page        # the basis is the chapter's
    assert "<td>–</td>" in page                                  # ingest not measured on local


def _brief_html(cell: str, chapter: str) -> str:
    rows = [{"question": "Q", "target": "local", "answer": cell, "short": cell, "note": "needs 4.65 GiB/s"}]
    return ("<main>" + scorecard.table_html(rows, ["local"], {"Q": "section-a"})
            + f'<h2 class="section" id="section-a">A</h2><p>{chapter}</p><h2 id="b">B</h2><p>0.35 248 4.65</p></main>')


def test_a_page_one_number_its_chapter_does_not_print_is_found():
    ok = _brief_html("0.35 GiB/s per host · hourly needs 248 hosts", "Q local: 0.35 GiB/s, 248 hosts. Note: needs 4.65 GiB/s.")
    assert scorecard.numbers_not_in_chapters(ok) == []
    bad = _brief_html("0.35 GiB/s per host · hourly needs 248 hosts", "Q local: 0.35 GiB/s; 4.65")
    assert scorecard.numbers_not_in_chapters(bad) == ["Q (local): 248 not in its chapter"]   # another chapter's does not count
    assert scorecard.numbers("H200, 1,083 MB/s, 0.588 GiB/s") == ["200", "1,083", "0.588"]


def test_answers_that_run_past_page_one_are_found():
    page1 = "The answers\n Question   local\n Accelerators supported (unet3d,   8\n Ingest bandwidth (TIFF →  47\n"
    assert layout.answers_past_page_one([page1, "x"], ["Accelerators supported (unet3d, AU ≥ 90 %)",
                                                       "Ingest bandwidth (TIFF → OpenCV)"]) == []
    found = layout.answers_past_page_one([page1, "Checkpoint interval for"], ["Checkpoint interval for ≤ 5 %"])
    assert found == ["the answer to 'Checkpoint interval for ≤ 5 %' is not on page 1"]
    # targets are the scorecard's columns: each target's name heads page 1
    assert layout.missing_answers("Accelerators supported (unet3d)\n Question local hdd-emulated", ["local", "hdd-emulated"]) == []
    assert layout.missing_answers("Accelerators supported\n Question local", ["local", "hdd-emulated"]) == ["hdd-emulated"]


def test_a_chapter_keeps_one_paragraph_one_figure_one_table_and_five_bullets(monkeypatch):
    shown = []
    monkeypatch.setattr(display, "show_html", shown.append)
    monkeypatch.setattr(display, "figure_html", lambda fig, cap="", raster=False: f"<figure>{cap}</figure>")
    a = display.Appendix("D", "x", "appendix-x")
    with display.details_to(a):
        display.show_md("What ran: the first paragraph.")
        display.show_md("A second paragraph of detail.")
        display.show_figure(None, "first figure")
        display.show_figure(None, "second figure")
        display.show_table(pd.DataFrame({"a": [1]}), "key table", body=True)
        display.show_table(pd.DataFrame({"a": [2]}), "second key table", body=True)
        display.analysis([f"- bullet {i}" for i in range(7)], tail="closing")
        display.analysis(["- a later analysis"])
    body, appendix = "".join(shown), "".join(text for _, text in a.items)
    assert "What ran" in body and "second paragraph" not in body and "second paragraph" in appendix
    assert "first figure" in body and "second figure" in appendix and "second figure" not in body
    assert "key table" in body and "second key table" in appendix and "second key table" not in body
    assert "bullet 4" in body and "bullet 5" not in body and "bullet 5" in appendix and "closing" in appendix
    assert "a later analysis" in appendix
    shown.clear()
    display.analysis([f"- bullet {i}" for i in range(7)])          # a study's own notebook: everything inline
    assert "bullet 6" in "".join(shown)


def test_the_checkpoint_answer_says_what_was_measured_and_the_projections_assumption(tmp_path):
    from storagebrief.studies.checkpoint import brief
    (tmp_path / "study.json").write_text(json.dumps({"intervals": [
        {"target": "local", "model": "llama3-1t", "ranks": 1024, "checkpoint_bytes": 15427 << 30, "checkpoint_gib": 15427.0,
         "overhead_limit_percent": 5, "sync_interval_s": 891_720.0, "async_interval_s": 44_640.0, "restore_s": 9e4,
         "save_gib_per_s": 0.346}]}))
    runs = pd.DataFrame({"target": ["local"] * 3, "sweep": ["protocol"] * 3, "status": ["ok"] * 3,
                         "honest_save_gib_per_s": [0.301, 0.346, 0.391]})
    row, = brief.answers(tmp_path, runs, ["local"])
    # 15,427 GiB ÷ 0.346 GiB/s = 44,587 s a save; within 5 % of an hour (180 s): 248 hosts at this rate
    assert row["short"] == "0.346 GiB/s per host (0.301–0.391 over 3 runs) · hourly needs 248 hosts"
    assert "if it adds up across hosts" in row["note"]
    assert row["answer"] == ("this host saves at 0.346 GiB/s (3 runs 0.301–0.391); from this one host alone: sync every 10.3 d, async "
                             "every 12.4 h; saving every hour within 5 % needs 248 such hosts writing at once (if "
                             "their rates add up)")


def test_a_count_the_client_check_doubts_is_uncertain_on_page_one(tmp_path):
    d = tmp_path / "emulate"
    d.mkdir()
    (d / "mlperf_results.json").write_text(json.dumps({"accelerators_supported": [
        {"workload": "unet3d", "target": "local", "au_threshold_percent": 90.0, "accelerators_supported_at_least": 8,
         "first_failing_accelerators": 16, "supported_limited_by": "client"}]}))
    emu = SimpleNamespace(dir=d, frame=None)
    own = [{"question": "Accelerators supported, emulated (unet3d, AU ≥ 90 %)", "target": "local", "answer": "x",
            "basis": "limited by client; client check at N = 8 on 1 of 2 CPUs: client-sensitive (faster on half the CPUs)"}]
    row, = accelerators.answers(emu, None, own)
    assert row["short"] == "8 accelerators · client-bound beyond"
    assert row["note"].startswith("uncertain: a rerun on half the CPUs changed the result")
    for basis in ("limited by client", "client check at N = 8 on 1 of 2 CPUs: not client-sensitive (moved 0.1)"):
        plain, = accelerators.answers(emu, None, [{**own[0], "basis": basis}])
        assert plain["note"] == "", basis


def test_results_without_a_comparison_do_not_read_as_no_results(monkeypatch, tmp_path):
    """Issue 48, item 5: an external-endpoint-only run has answers and no comparison; its brief said "No study
    results yet" under its own answer."""
    from storagebrief.brief import assemble, inputs
    shown = []
    monkeypatch.setattr(assemble, "show_html", shown.append)
    monkeypatch.setattr(assemble, "show_md", shown.append)
    monkeypatch.setattr(assemble, "snapshot_headlines", lambda reports_dir: ([], []))
    monkeypatch.setattr(inputs, "readable", lambda reports_dir: [SimpleNamespace(key="object_sweep")])
    assemble.snapshot(tmp_path)
    assert "No study results yet" not in "".join(shown) and "No comparison between targets" in "".join(shown)
    monkeypatch.setattr(inputs, "readable", lambda reports_dir: [])
    shown.clear()
    assemble.snapshot(tmp_path)
    assert "No study results yet" in "".join(shown)


def test_an_appendix_table_a_reader_would_sort_goes_to_the_html_only(monkeypatch):
    """More than RAW_TABLE_ROWS rows (8), or rows × the page-wide parts it prints in: collapsed and sortable in the
    HTML, one line in print (the layout check then looks for none of its numbers in the PDF)."""
    a = display.Appendix("D", "x", "appendix-x")
    narrow = pd.DataFrame({"target": ["t"] * 8, "MB/s": [float(i) for i in range(8)]})
    long = pd.DataFrame({"target": ["t"] * 9, "MB/s": [float(i) for i in range(9)]})
    wide = pd.DataFrame({"target": ["t"] * 10, **{f"latency p{i} ms": [1234.5] * 10 for i in range(14)}})
    with display.details_to(a):
        for frame in (narrow, long, wide):
            display.show_table(frame, "caption")
    printed, raw_long, raw_wide = (text for _, text in a.items)
    assert "<details" not in printed and "print-only" not in printed
    for raw, n in ((raw_long, 9), (raw_wide, 10)):
        assert '<details class="raw html-only">' in raw and "sortable" in raw and f"({n} rows)" in raw
        assert layout.parse_html(raw).cells == []           # not printed: not looked for in the PDF


def test_the_resnet50_study_answers_on_page_one():
    """Every study with a headline has a row (issue 49): ResNet50's had none."""
    from storagebrief.studies.train_resnet50 import brief
    rows = [{"target": "t", "sweep": "memory", "memory_setting": s, "status": "ok", "images_per_s": ips,
             "job_read_bytes": rb, "training_time_s": tt, "reread_ratio": 1.0}
            for s, ips, rb, tt in (("none", 30.0, 100.0, 10.0), ("none", 34.0, 100.0, 10.0), ("2.5:1", 20.0, 260.0, 17.0))]
    row, = brief.answers(None, pd.DataFrame(rows), ["t", "absent"])
    assert row["short"] == "32.0 images/s (30.0–34.0 over 2 runs) · limited memory: reads ×2.6"
    assert row["answer"] == ("32.0 images/s with no memory limit (2 runs 30.0–34.0); memory limited to 2.5:1 made the job read ×2.6 as "
                             "much and changed its time by +70.0 %")


def test_snapshot_cards_keep_hyphenated_names_whole(monkeypatch, tmp_path):
    """The tiny chain's snapshot broke "hdd-" / "emulated" inside a card (the layout test's split check)."""
    from storagebrief.brief import assemble
    shown = []
    monkeypatch.setattr(assemble, "show_html", shown.append)
    card = {"study": "s", "study_title": "S", "id": "x", "label": "Time", "better": "lower", "delta_percent": -50.0,
            "text": "up to 2× lower", "ref": "local", "other": "hdd-emulated", "caveats": []}
    monkeypatch.setattr(assemble, "snapshot_headlines", lambda reports_dir: ([card], []))
    assemble.snapshot(tmp_path)
    assert 'local vs <span class="nw">hdd-emulated</span>' in "".join(shown)


def test_a_page_one_answer_shows_the_range_of_its_runs_and_which_other_choices_it_holds():
    """Issue 48: two studies of the same knobs gave 203 and 544 MB/s of ingest at P = 1 and P = 4, and page 1
    showed neither a range nor that P was unsettled. Now the cell carries the runs' range, and the footnote the
    other process counts whose runs reach into it."""
    from storagebrief.report.words import spread, spread_cell
    from storagebrief.studies.preprocess import brief as pre
    assert spread([449.5, 612.0, 520.0]) == "3 runs 449.5–612.0" and spread([3.0]) == "one run: no range"
    assert spread_cell([449.5, 612.0]) == "449.5–612.0 over 2 runs" and spread_cell([float("nan"), 2.0]) == "one run"
    rates = {1: [203.0, 420.0, 380.0], 2: [300.0, 500.0, 460.0], 4: [544.0, 430.0, 450.0], 8: [100.0, 120.0, 110.0]}
    frame = pd.DataFrame([{"target": "local", "sweep": "processes", "processes": p, "repeat": i + 1,
                           "input_mb_per_s": v, "status": "ok"} for p, vs in rates.items() for i, v in enumerate(vs)])
    (a,) = pre.answers(".", frame, ["local"])
    assert a["short"] == "474.7 MB/s at P = 4 (430.0–544.0 over 3 runs)", a
    assert "(3 runs 430.0–544.0)" in a["answer"] and a["note"] == "P = 2 within that range", a   # P = 1 tops at 420
    assert scorecard.numbers(a["short"]) == ["474.7", "4", "430.0", "544.0", "3"]


def test_the_vector_search_answer_shows_its_repeats_range_at_the_chosen_point(tmp_path):
    """The repeats behind page 1's point (points.csv's median) give its range; other points' runs do not."""
    from storagebrief.studies.vector_search import brief as vs
    runs = [{"target": "local", "data": "clustered", "search_list": L, "beam_width": 1, "threads": 1, "repeat": i,
             "qps": q, "status": "ok"} for L, qs in ((50, [240.0, 262.0, 255.0]), (100, [150.0, 170.0])) for i, q in
            enumerate(qs, 1)]
    pd.DataFrame([{"target": "local", "data": "clustered", "search_list": L, "beam_width": 1, "threads": 1,
                   "recall_at_k": rec, "qps": q, "reads_per_query_engine": 60.0, "qps_predicted": 261.0,
                   "regime": "io", "prediction_error": 0.0, "queries": n}
                  for L, rec, q, n in ((50.0, 0.951, 255.0, 200.0), (100.0, 0.999, 160.0, 160.0))]).to_csv(
        tmp_path / "points.csv")
    (tmp_path / "study.json").write_text(json.dumps({"recall_floor": 0.95}))
    (a,) = vs.answers(tmp_path, pd.DataFrame(runs), ["local"])
    assert a["short"] == "255 queries/s at L 50 (240–262 over 3 runs)", a
    assert "queries/s per client at L 50, 200 queries (3 runs 240–262)" in a["answer"], a
    assert a["note"].startswith("L 50, 200 queries; 60 reads per query"), a     # issue 61: its L and query count
    assert [n for n in scorecard.numbers(f"{a['short']} {a['note']}") if n not in a["answer"]] == [], a
