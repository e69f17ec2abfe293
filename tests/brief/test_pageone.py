"""Page 1 a vendor can quote (issue 62): the devices named from the inventory, no CPU-vs-storage rows, an answer
that is not settled says so in plain words, and the page never spills whatever the footnotes (brief/pageone.py,
brief/scorecard.py, report/layout.page_one_pt)."""
import html
import json
import re
from types import SimpleNamespace

import pandas as pd

from storagebrief.brief import accelerators, pageone, quotes, scorecard
from storagebrief.report import layout


def _target(name, device, fs="ext4", **more):
    return {"name": name, "path": f"/srv/{name}", "device": device, "filesystem": fs, "profile": None,
            "profile_name": None, "s3": None, **more}


QEMU = {"name": "sda", "major": 8, "minor": 0, "model": "ATA QEMU HARDDISK", "rotational": True, "interface": "ata"}
VIRTIO = {"name": "vda", "major": 254, "minor": 0, "model": "0x1af4", "rotational": True, "interface": "virtio"}
NVME = {"name": "nvme0n1", "major": 259, "minor": 0, "model": "Samsung SSD 990 PRO 2TB", "rotational": False,
        "interface": "nvme"}
HDD = {"name": "sdb", "major": 8, "minor": 16, "model": "ATA ST4000DM004-2CV1", "rotational": True, "interface": "ata"}


def test_the_cover_names_each_targets_device_kind_and_model_without_its_path_or_id():
    words = {t["name"]: pageone._target_words(t, {}) for t in (
        _target("local", QEMU), _target("vm", VIRTIO), _target("fast", NVME), _target("slow", HDD),
        _target("ram", {"name": None, "reason": "tmpfs"}, fs="tmpfs"),
        _target("s3", VIRTIO, kind="s3", s3={"kind": "local gateway (versitygw posix)"}),
        _target("far", {}, kind="s3", s3={"kind": "external endpoint"}),
        _target("hdd-emulated", VIRTIO, profile_name="hdd_7200", profile={"read_mb_per_s": 150.0}))}
    assert words["local"] == "local (a directory on a virtual disk, QEMU HARDDISK)"   # QEMU's: virtual, not "hard disk"
    assert words["vm"] == "vm (a directory on a virtual disk, virtio)"                   # 0x1af4: a vendor id, no model
    assert words["fast"] == "fast (a directory on an NVMe SSD, Samsung SSD 990 PRO 2TB)"
    assert words["slow"] == "slow (a directory on a hard disk, ST4000DM004-2CV1)"
    assert words["ram"] == "ram (a directory in memory (tmpfs))"
    assert words["s3"] == "s3 (S3 objects through a local gateway, on a virtual disk, virtio)"
    assert words["far"] == "far (S3 objects through an endpoint)"
    assert words["hdd-emulated"].endswith("read ≤ 150 MB/s, on a virtual disk, virtio)")
    text = " ".join(words.values())
    assert "/srv/" not in text and "vda" not in text and "nvme0n1" not in text and "254:0" not in text


def _kv_breakeven(tmp_path, stable_h200=True):
    rows = [{"target": "local", "model": "llama3.1-8b", "accelerator": a, "how": how, "answer": ans,
             "read_gib_per_s_needed": need, "need_at_tokens": 8192, "reload_read_gib_per_s": 0.5,
             "reload_latency_s": 0.002, "stable": stable}
            for a, how, ans, need, stable in (
                ("this-cpu", "measured here", "reloading beats recomputing from the first token", 0.001, True),
                ("h200", "measured", "reloading beats recomputing beyond 4,096 tokens" if stable_h200 else
                 "fit unstable: the break-even ran from 1 to 3 tokens over 2 runs", 9.0, stable_h200),
                ("h100-sxm", "datasheet × utilisation", "reloading beats recomputing beyond 2,048 tokens", 7.0, True))]
    pd.DataFrame(rows).to_csv(tmp_path / "breakeven.csv", index=False)
    return pd.DataFrame({"target": ["local"], "model": ["llama3.1-8b"], "workload": ["w"]})


def test_the_machines_cpu_is_the_chapters_answer_not_page_ones(tmp_path):
    from storagebrief.studies.kv_cache import brief as kv
    frame = _kv_breakeven(tmp_path)
    row, = kv.answers(tmp_path, frame, ["local"])
    assert "this-cpu: from the first token" in row["answer"]                   # the chapter prints it
    assert row["short"] == "H200: beyond 4,096 tokens; H100 SXM: beyond 2,048 tokens"
    assert "CPU" not in row["short"] and "unsettled" not in row and row.get("page_one", True)
    # a model answered on this machine's CPU alone: the chapter's row, not page 1's
    only = pd.read_csv(tmp_path / "breakeven.csv").head(1)
    only.to_csv(tmp_path / "breakeven.csv", index=False)
    cpu_row, = kv.answers(tmp_path, frame, ["local"])
    assert cpu_row["page_one"] is False and not scorecard.on_page_one(cpu_row)
    page = scorecard.table_html([row, {**cpu_row, "question": "KV cache (tiny): CPU only?"}], ["local"])
    assert "KV cache (llama3.1-8b)" in page and "CPU only" not in page


def test_an_unsettled_answer_says_not_settled_with_one_plain_footnote(tmp_path):
    from storagebrief.studies.kv_cache import brief as kv
    row, = kv.answers(tmp_path, _kv_breakeven(tmp_path, stable_h200=False), ["local"])
    assert row["short"] == "H200: not settled; H100 SXM: beyond 2,048 tokens"
    assert row["unsettled"] == kv.UNSETTLED and "fit unstable" in row["answer"]     # the chapter keeps the reason
    d = tmp_path / "emulate"
    d.mkdir()
    recs = [{"workload": "unet3d", "target": t, "au_threshold_percent": 90.0, "accelerators_supported_at_least": 8,
             "first_failing_accelerators": None, "supported_limited_by": by} for t, by in (("a", "memory"), ("b", "budget"))]
    recs.append({**recs[0], "target": "c", "first_failing_accelerators": 16, "supported_limited_by": "storage"})
    (d / "mlperf_results.json").write_text(json.dumps({"accelerators_supported": recs}))
    acc = {r["target"]: r for r in accelerators.answers(SimpleNamespace(dir=d, frame=None), None)}
    assert acc["a"]["answer"] == "≥ 8 (page-cache cap reached)" and acc["a"]["short"] == "≥ 8 accelerators · not settled"
    assert "page-cache" not in acc["a"]["unsettled"] and "search budget" not in acc["b"]["unsettled"]
    assert "unsettled" not in acc["c"] and acc["c"]["short"] == "8 accelerators · storage-bound beyond"
    rows = [row, *acc.values()]
    page = scorecard.table_html(rows, ["local", "a", "b", "c"], {r["question"]: "section-x" for r in rows})
    for internal in ("page-cache cap", "search budget", "fit unstable", "1 to 3 tokens"):
        assert internal not in page, internal
    assert page.count("not settled: ") == 3                           # one footnote per plain reason
    assert "not settled: " + accelerators.UNSETTLED["memory"] in html.unescape(page)


def _long_rows(targets: list[str], questions: int) -> list[dict]:
    return [{"question": f"Question {q} about storage with a long name ({q})", "target": t,
             "answer": f"{q}.{i} MB/s", "short": f"{q}.{i} MB/s at P = 4 (1.0–9.9)",
             "note": f"caveat {q}-{i}: " + "a long caveat in many words that runs far past one line " * 4}
            for q in range(9) for i, t in enumerate(targets)]


def test_page_one_never_spills_whatever_the_footnotes():
    targets = [f"target-{i}" for i in range(6)]
    rows = _long_rows(targets, 9)
    rows[0] = {**rows[0], "unsettled": "the search stopped before a count fell short " * 3}      # kept whatever
    found = [f"<b>Finding {i}</b> — " + "a finding long enough to wrap onto more lines of page 1 " * 4
             for i in range(6)]
    cover = ('<div class="cover"><h1>Storage performance brief</h1><p class="summary">'
             + "Nine studies ran the quick profile against six targets on one machine. " * 7 + "</p>"
             + '<p class="setup"><b>Set-up:</b> ' + "the quick profile, scaled-down data, one machine."
             + "</p></div>")
    chapters = {r["question"]: "section-x" for r in rows}
    for n in (10_000, scorecard.MAX_NOTES):           # 54 long footnotes, or as many as page 1 prints at most: spill
        whole = '<h2 class="answers">The answers</h2>' + scorecard.table_html(rows, targets, chapters, n)
        assert layout.page_one_pt(cover + quotes.block(found) + whole) > layout.PAGE_ONE_PT, n
    page = pageone.fitted(rows, targets, chapters, cover, found)
    assert layout.page_one_pt(cover + page) <= layout.PAGE_ONE_PT
    text = html.unescape(page)
    assert scorecard.MORE in text                                                # the rest: in their chapters
    assert "not settled: the search stopped" in text                             # its own footnote, first
    assert 1 <= text.count('<li class="quote">') < len(found)                   # the findings that fit, in order
    assert page.index("Finding 0") < page.index("The answers")
    notes = [layout._plain(n.split(">", 1)[1]) for n in text.split("<li ")[1:] if not n.startswith(('class="glossary"', 'class="quote"'))]
    assert '<li class="glossary"><b>Terms:</b> P: processes at once.</li><li class="basis">' in text
    assert 1 <= len(notes) - 2 < scorecard.MAX_NOTES                          # the not-settled one at least
    assert all(len(n) <= scorecard.NOTE_CHARS + 2 and n.endswith("(in full in its chapter)") for n in notes[:-2])
    cells = re.sub(r"</?span[^>]*>", "", page)
    assert all(f"<td>{scorecard.short(r)}" in cells for r in rows)                     # every answer still on page 1


def test_a_real_page_ones_footnotes_are_kept_when_they_fit():
    rows = [{"question": "Q", "target": "local", "answer": "1 MB/s", "short": "1 MB/s", "note": "a short caveat"}]
    page = pageone.fitted(rows, ["local"], {"Q": "section-x"}, '<div class="cover"><h1>B</h1></div>')
    assert "a short caveat" in page and scorecard.MORE not in html.unescape(page)


def test_the_height_estimate_grows_with_the_text_and_finds_footnotes_past_page_one():
    assert layout.text_lines("word " * 10, 10, 1000) == 1
    assert layout.text_lines("word " * 200, 10, 300) > layout.text_lines("word " * 100, 10, 300) > 1
    short = '<p class="summary">one line</p>'
    assert layout.page_one_pt(short * 2) > layout.page_one_pt(short)
    assert layout.page_one_pt(short + '<h2 class="snapshot">S</h2>' + short * 50) == layout.page_one_pt(short)
    html = '<ol class="footnotes"><li class="basis">Each answer\'s basis; "–": not measured on that target.</li></ol>'
    assert layout.scorecard_end_past_page_one(["The answers\n not measured on that\n target.\n"], html) == []
    assert layout.scorecard_end_past_page_one(["The answers\n not measured on", "that target."], html) == [
        "page 1's footnotes run onto page 2 ('… on that target.' is not on page 1)"]


def test_the_chapter_keeps_what_page_one_leaves_out(monkeypatch):
    """The CPU's row and a floor's internal reason: not on page 1, in full in the study's chapter."""
    rows = [{"question": "KV cache (tiny): beyond how many tokens?", "target": "local", "study": "kv_cache",
             "answer": "this-cpu: from the first token", "short": "this machine's CPU: from the first token",
             "page_one": False},
            {"question": "Accelerators supported (unet3d, AU ≥ 90 %)", "target": "local", "study": "kv_cache",
             "answer": "≥ 8 (page-cache cap reached)", "short": "≥ 8 accelerators · not settled",
             "unsettled": accelerators.UNSETTLED["memory"], "note": ""}]
    shown = []
    monkeypatch.setattr(pageone, "page_one_rows", lambda reports_dir: rows)
    monkeypatch.setattr(pageone, "show_html", shown.append)
    monkeypatch.setattr(pageone, "show_table", lambda frame, caption: shown.append(frame.to_string()))
    pageone.chapter_answer("kv_cache", ".")
    chapter = html.unescape("".join(shown))
    assert "this-cpu: from the first token" in chapter and "page-cache cap reached" in chapter
    assert "Note: not settled: " + accelerators.UNSETTLED["memory"] in chapter
    page = html.unescape(scorecard.table_html(rows, ["local"]))
    assert "KV cache (tiny)" not in page and "page-cache" not in page and "≥ 8 accelerators · not settled" in page


def test_page_one_states_the_set_up_and_defines_the_terms_it_uses(tmp_path):
    """Issue 62: a vendor's quote carries its context (the profile, the data's sizes against the papers', the
    machine), and "AU ≥ 90 %", "unet3d" are defined where a reader meets them."""
    emulate, vector = tmp_path / "emulate", tmp_path / "vector_search"
    for d in (emulate, vector):
        d.mkdir()
    (emulate / "study.json").write_text(json.dumps({"accelerator_type": "v100", "workloads": {"unet3d": {
        "spec": {"record_bytes": 500_000, "compute_s": {"v100": 0.04}},
        "reference": {"record_bytes": 146_600_628, "compute_s": {"v100": 1.3604}}}}}))
    (vector / "study.json").write_text(json.dumps({"num_vectors": 2000, "dimension": 16}))
    studies = [SimpleNamespace(key=d.name, dir=d, ok=True) for d in (emulate, vector)]
    inv = {"cpu_model": "Intel(R) Xeon(R) Processor @ 2.80GHz", "cpu_threads": 2, "memory_total_bytes": 25276194816}
    assert pageone.setup_words("quick", studies, inv) == (
        "the quick profile, short runs on data scaled down to finish in minutes (unet3d samples of 0.50 MB and 0.04 s "
        "of compute per batch, against MLPerf's 146.6 MB and 1.36 s on a V100; vector search over 2,000 vectors of 16 "
        "dimensions), on one machine (Intel(R) Xeon(R) Processor @ 2.80GHz, 2 CPU threads, 23.5 GiB memory): "
        "numbers for this machine, not a cluster (the paper profile runs the papers' sizes).")
    (emulate / "study.json").write_text(json.dumps({"accelerator_type": "v100", "workloads": {"unet3d": {
        "spec": {"record_bytes": 146_600_628, "compute_s": {"v100": 1.3604}},
        "reference": {"record_bytes": 146_600_628, "compute_s": {"v100": 1.3604}}}}}))
    paper = pageone.setup_words("paper", studies[:1], {})
    assert paper == "the paper profile (unet3d samples of 146.6 MB and 1.36 s of compute per batch), on one machine " \
                    "(a CPU not recorded)."
    rows = [{"question": "Accelerators supported (unet3d, AU ≥ 90 %)", "target": "local", "answer": "8",
             "short": "8 accelerators · storage-bound beyond"},
            {"question": "Vector search: queries/s at recall ≥ 0.95", "target": "local", "answer": "175 queries/s"}]
    page = html.unescape(scorecard.table_html(rows, ["local"]))
    terms = re.search(r'<li class="glossary"><b>Terms:</b> (.*?)</li><li class="basis">', page).group(1)
    assert terms.startswith("AU: accelerator utilisation") and "accelerators supported: the most" in terms
    assert "unet3d: MLPerf Storage's 3D U-Net" in terms and "recall: the share" in terms
    assert "p99" not in terms and "KV cache" not in terms and "GET" not in terms        # only the terms page 1 uses
    assert "Terms" not in scorecard.table_html([{"question": "Q", "target": "t", "answer": "1 MB/s"}], ["t"])


def test_the_snapshot_defines_the_terms_its_cards_use_that_page_one_did_not(tmp_path, monkeypatch):
    """p99 and QD are met first on the snapshot's cards (page 2): defined there, once."""
    from test_brief_faults import preprocess_rows, stream_rows, write_study

    from storagebrief.brief import assemble
    reports = tmp_path / "reports"
    write_study(reports, "preprocess", preprocess_rows(), tmp_path)
    write_study(reports, "stream_inference", stream_rows(), tmp_path)        # its cards: p99 latency
    shown = []
    monkeypatch.setattr(assemble, "show_html", shown.append)
    monkeypatch.setattr(pageone, "DEFINED", [])
    monkeypatch.setattr(pageone, "USED", [])
    assemble.snapshot(reports)
    intro = html.unescape(re.search(r"<p>(.*?)</p>", shown[-1]).group(1))
    assert intro.endswith("all of them are in Appendix C. Terms: p99: the latency 99 % of requests beat."), intro
    monkeypatch.setattr(pageone, "DEFINED", ["p99: the latency 99 % of requests beat"])    # page 1 defined it
    assemble.snapshot(reports)
    assert "Terms:" not in re.search(r"<p>(.*?)</p>", shown[-1]).group(1)
    au = scorecard.GLOSSARY[0][1]           # page 1 used AU but had no room for its terms' line (issue 62)
    monkeypatch.setattr(pageone, "USED", [au])
    assemble.snapshot(reports)
    assert html.unescape(re.search(r"<p>(.*?)</p>", shown[-1]).group(1)).endswith(f"Terms: {au}.")


def test_a_cold_cache_of_the_runs_own_files_is_a_short_caveat_naming_how_it_was_chosen():
    from storagebrief.brief import assemble
    from storagebrief.core import cache
    assert assemble.cache_caveats([]) == []
    assert assemble.cache_caveats([cache.BY_FILES_ENV]) == ["cold cache of its own files only "
                                                            "(set in the environment)"]
    assert assemble.cache_caveats([cache.BY_FILES_PARAM, "fadvise_dontneed"]) == [
        "cold cache of its own files only (set in the parameters)", "cold cache by fadvise_dontneed, not drop_caches"]
    frame = pd.DataFrame({"cache_method": [cache.BY_FILES_PARAM, "drop_caches", "fadvise_dontneed (dataset files)"]})
    assert assemble.fallback_cache_methods(frame) == [cache.BY_FILES_PARAM]


def test_a_chapters_answer_says_one_run_once_not_once_per_target(monkeypatch):
    """Issue 62: "(one run: no range)" six times in one paragraph; now once, as its note."""
    rows = [{"study": "train_resnet50", "question": "ResNet50 images/s", "target": t, "note": "",
             "answer": f"{v} images/s with no memory limit (one run: no range); memory limited to 2.5:1"}
            for t, v in (("local", "20.3"), ("hdd-emulated", "21.6"))]
    rows.append({"study": "object_sweep", "question": "Objects", "target": "local-s3", "note": "",
                 "answer": "GET 838 MB/s (1M × 8; one run: no range), PUT 263 MB/s (1M × 8; one run: no range)"})
    shown = []
    monkeypatch.setattr(pageone, "page_one_rows", lambda _: rows)
    monkeypatch.setattr(pageone, "show_html", shown.append)
    monkeypatch.setattr(pageone, "show_table", lambda *a, **k: None)
    pageone.chapter_answer("train_resnet50", ".")
    pageone.chapter_answer("object_sweep", ".")
    text = html.unescape(re.sub(r"<[^>]+>", "", " ".join(shown)))
    assert text.count("no range") == 2 and text.count("each figure is from one run, so it has no range") == 2
    assert "local: 20.3 images/s with no memory limit; memory limited" in text
    assert "GET 838 MB/s (1M × 8), PUT 263 MB/s (1M × 8)" in text


def test_page_one_quotes_each_studys_finding_with_its_context(tmp_path):
    """Issue 62: findings a reader can quote above the answers: "feeds N emulated accelerators", "reload beats
    recompute on an H100 beyond T tokens", "Q queries/s at recall ≥ 0.95 (L, threads, set size)", "up to N× …"."""
    from storagebrief.studies.kv_cache import brief as kv
    row, = kv.answers(tmp_path, _kv_breakeven(tmp_path), ["local"])
    assert row["quote"] == {"lead": "KV cache (llama3.1-8b), reload from storage or recompute on an H100 SXM",
                            "says": "reloading wins beyond 2,048 tokens"}
    shaky, = kv.answers(tmp_path, _kv_breakeven(tmp_path, stable_h200=False), ["local"])
    assert "quote" not in shaky                                      # not settled: nothing to quote
    d = tmp_path / "emulate"
    d.mkdir()
    (d / "study.json").write_text(json.dumps({"accelerator_type": "v100"}))
    recs = [{"workload": "unet3d", "target": t, "au_threshold_percent": 90.0, "accelerators_supported_at_least": 8,
             "first_failing_accelerators": ff, "supported_limited_by": by}
            for t, ff, by in (("a", 16, "storage"), ("b", 9, "storage"), ("c", None, "budget"))]
    (d / "mlperf_results.json").write_text(json.dumps({"accelerators_supported": recs}))
    acc = {r["target"]: {**r, "study": "emulate"}
           for r in accelerators.answers(SimpleNamespace(dir=d, frame=None), None)}
    assert acc["a"]["quote"]["says"] == "feeds 8–15 emulated accelerators, storage-bound beyond"
    assert acc["a"]["quote"]["lead"] == "Emulated training (unet3d on V100s, AU ≥ 90 %)" and "quote" not in acc["c"]
    vector = [{"question": "Vector search: queries/s at recall ≥ 0.95", "target": t, "study": "vector_search",
               "answer": "…", "quote": {"lead": "Vector search at recall ≥ 0.95 (20,000 vectors of 64 dimensions)",
                                        "says": f"{q} queries/s (L 100, 1 thread)"}} for t, q in (("a", 189), ("b", 1.2))]
    headlines = [{"study": s, "study_title": f"{s} study: its long title", "label": "queries/s", "ref": "a",
                  "other": "b", "better": "higher", "delta_percent": d, "text": f"up to {1 + d / 100:g}× as high (x)"}
                 for s, d in (("vector_search", 15800.0), ("vector_search", 100.0), ("preprocess", 50.0))]
    found = quotes.lines([*acc.values(), {**row, "study": "kv_cache"}, {**row, "target": "b", "study": "kv_cache"},
                          *vector], headlines)
    text = [html.unescape(re.sub(r"<[^>]+>", "", f)) for f in found]
    assert text == [
        "Emulated training (unet3d on V100s, AU ≥ 90 %) — a: feeds 8–15 emulated accelerators, storage-bound beyond; "
        "b: feeds 8 emulated accelerators, storage-bound beyond; c: not settled.",
        "KV cache (llama3.1-8b), reload from storage or recompute on an H100 SXM — local, b: reloading wins beyond "
        "2,048 tokens.",
        "Vector search at recall ≥ 0.95 (20,000 vectors of 64 dimensions) — a: 189 queries/s (L 100, 1 thread); b: "
        "1.2 queries/s (L 100, 1 thread).",
        "vector_search study — queries/s, a vs b: up to 159× as high."]
    assert quotes.block([]) == "" and quotes.block(found).count('<li class="quote">') == 4
