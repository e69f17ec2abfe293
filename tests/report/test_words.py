"""report/words in the tables a notebook shows: the same reader words as the rendered brief (issue 48: notebook 08's
points table showed raw column names)."""
from __future__ import annotations

import re

import pandas as pd

from storagebrief.report import display, words


def test_a_tables_headers_are_in_reader_words_where_a_notebook_shows_it():
    frame = pd.DataFrame({"target": ["local"], "throughput_mb_per_s": [12.5], "study_to_reference": [0.4],
                          "limited_by": ["client CPU"]})
    page = re.sub(r"<[^>]+>", "", display.table_html(frame, "points"))      # the text a reader sees
    assert "throughput_mb_per_s" not in page and "study_to_reference" not in page and "limited_by" not in page
    assert "throughput MB/s" in page and "ours ÷ reference" in page and "limited by" in page
    assert words.display("throughput_mb_per_s_max") == "throughput MB/s max"


# The sentences a vendor's engineer quoted as not understood in the quick study's brief (issue 62), as the body
# printed them: each is caught, and the brief's words for the same facts are not.
QUOTED = [
    "≥ 8 (page-cache cap: more accelerators' reads would not fit emulate.memory_limit_mib)",
    "Page cache kept out of the measurement by: memory cap, memory_cap->fadvise evict of the gateway's files (S3).",
    "local, llama3-8b: MLPerf's save figure is ×1.70 the honest one (0.416 vs 0.245 GiB/s).",
    "Each run's <code>kvcache_results_&lt;stamp&gt;.json</code> writes MLPerf's own key paths "
    "(<code>summary.cache_stats.*</code>).",
    "Throughput is fio's <code>bw_bytes</code> in MB/s.",
    "the brokers' JVMs ran with KAFKA_JVM_PERFORMANCE_OPTS=-XX:TieredStopAtLevel=1",
    "The mlperf family (MLPerf's tool at 284ce72): each user draws a template.",
    "4 threads, 2 repeat(s) per point; 1 process(es)",
]


def test_the_words_a_customer_would_not_understand_are_found_in_the_body_only():
    for sentence in QUOTED:
        assert words.customer_words(f"<h1>Brief</h1><p>{sentence}</p>"), sentence
    one_run = "<p>local: 20.3 images/s (one run: no range); hdd-emulated: 21.6 images/s (one run: no range).</p>"
    assert words.customer_words(one_run) == ["a caveat repeated in one paragraph: 'one run: no range' ×2"]
    said = ("<p>≥ 8 (more accelerators' data would not fit the memory this run allows for caching); MLPerf's "
            "accounting gives ×1.70 the save rate measured to the last rank's fsync; 1 repeat, 2 processes; "
            "fio's io_uring engine with O_DIRECT; local-s3 and my_disk as the user named them.</p>")
    assert words.customer_words(said, keep=frozenset({"my_disk"})) == []
    appendix = '<h2 class="appendix first-appendix">Appendix A</h2><p><code>bw_bytes</code> at 284ce72</p>'
    assert words.customer_words("<p>ok</p>" + appendix) == []            # the appendices may keep them


def test_a_section_that_only_points_to_its_appendix_is_found():
    link = '<p class="details-link">Tables and plots of this section: see <a href="#m">Appendix M</a>.</p>'
    only = '<h2 class="section">Block-level I/O characterization</h2><p>What this is. Requests.</p>' + link
    full = '<h2 class="section">Vector search</h2>' + link + "<p>What ran.</p><figure><img/></figure>"
    assert words.pointer_only(only + full) == ["Block-level I/O characterization"]


def test_counts_take_the_number_they_count():
    assert [words.plural(n, w) for n, w in ((1, "thread"), (2, "thread"), (1, "process"), (4, "process"),
                                             (3.0, "time"), ("(not recorded)", "time"), (2, "epoch"))] == \
        ["1 thread", "2 threads", "1 process", "4 processes", "3 times", "(not recorded) times", "2 epochs"]
    assert words.counted("at 1 process(es), 2 unconfined run(s), 0 frame(s); 1 repeat(s)") == \
        "at 1 process, 2 unconfined runs, 0 frames; 1 repeat"
    assert "process(es)" not in words.reader_text("1 process(es)")


def test_a_runs_notes_read_as_words_each_once():
    notes = ["target 'local-s3' is an S3 target; KV-cache measures directories only, so it ran without it",
             "target 'obj' is an S3 target; KV-cache measures directories only, so it ran without it",
             "client check: not on S3 target(s) local-s3 (the gateway shares the CPUs)",
             "target 'local-s3' is an S3 target: checkpoint's cost sweep measures directories only and ran without it "
             "(the save / restore protocol ran on it)",
             "target 'local-s3' is an S3 target: checkpoint's framework sweep measures directories only and ran "
             "without it (the save / restore protocol ran on it)",
             "no CUDA GPU visible: GPU path not measured", "no CUDA GPU visible: GPU path not measured"]
    out = words.limit_words(notes)
    assert out[0] == ("not run on local-s3 and obj: object store (S3) targets, and this study reads and writes "
                      "files in a directory")
    assert "client check: not on the S3 target local-s3 (the gateway shares the CPUs)" in out
    assert any("only the save and restore protocol ran: the cost and framework sweeps" in n for n in out)
    assert out.count("no CUDA GPU visible: GPU path not measured") == 1 and len(out) == 4
    assert not words.customer_words("<ul>" + "".join(f"<li>{n}</li>" for n in out) + "</ul>")
