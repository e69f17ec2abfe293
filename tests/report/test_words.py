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
