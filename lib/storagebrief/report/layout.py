"""Checks of the rendered brief's layout, on the PDF itself (poppler's pdftotext and pdftoppm).

- split cells: no word or number of a table cell broken across lines ("92,477." above "8",
  "hdd-emulat" above "ed"). The HTML says what every cell holds; `pdftotext -layout` keeps each
  cell's lines in its column. A fragment F that ends its cell on one line, with a fragment G starting
  in the same column on the next line, is a split when F + G (or F + "-" + G) is a word of some cell
  while F or G alone is none, or when that word is found whole fewer times in the PDF than the cells
  hold it. Two whole values in consecutive rows ("12" above "8" where "128" is a cell too) are not.
- clipped cells: every number a table cell holds is somewhere in the PDF's text. A table wider than the
  page loses its right-hand columns in print with no error (the KV-cache study's H200 table lost its last
  column so); numbers do not wrap, so a missing one is cut off, not split.
- sparse pages: no page less than a quarter filled unless the next page starts a top-level section,
  or it is the last page.
- page 1 holds the answers' "Accelerators supported" line of every target.
- page 1's scorecard ends on page 1 (every question it asks is on page 1, and its last footnote line).
  Before printing, page_one_pt estimates page 1's height from its HTML (the brief's CSS sizes, a calibrated
  character width, greedy line wrapping) so brief/pageone.py fits its footnotes to the page.
- the body (every page before the first appendix) has at most BODY_PAGES pages, the appendices APPENDIX_PAGES.
- the HTML opens offline: no http(s) reference to fonts, style sheets, scripts or images.
- every figure's text fits: no overlapping tick labels, no subplot title wider than its plot or over
  another's (report/figurefit.py measures each figure as it is drawn and marks what does not fit).

`storagebrief brief` prints what these find (brief/render.py); tests/brief/test_brief_layout.py asserts none.
"""
from __future__ import annotations

import html
import re
import shutil
import subprocess
import unicodedata
from html.parser import HTMLParser
from pathlib import Path

# Issue 49: a body of one short chapter per study (page 1's scorecard, the snapshot, at most two pages a study,
# the characterization) fits 14 pages for eight studies, 16 for nine; the appendices 30. It was 24 and no
# appendix budget (the quick study's brief: 70 pages, body 23, 2026-11-29).
BODY_PAGES = 16
# 32 since 2026-12-07: the tiny chain's appendices measured 28 pages on a quiet machine and 31 under the suite's
# load at 0c10ca8 (the KV-cache appendix alone 11 pages; run-dependent notes and rows), after issues 57-61 added the
# MLPerf verdicts, the reads in flight and the history counts. The KV appendix is the one to cut next.
APPENDIX_PAGES = 32
MIN_FILL = 0.25
COLUMN_SLACK = 2           # pdftotext -layout places a cell's lines within a character or two
CELL_GAP = re.compile(r"\S+(?: \S+)*")   # a run of text with single spaces: one cell's line on a layout row


def _norm(text: str) -> str:
    return unicodedata.normalize("NFKC", text).replace("\u2011", "-").replace("\u00ad", "")


class _Html(HTMLParser):
    """Table cells' words, top-level headings (h2: text, class) and visible text of the brief's HTML."""

    def __init__(self):
        super().__init__()
        self.cells: list[str] = []
        self.headings: list[tuple[str, str]] = []
        self.questions: list[str] = []          # page 1's scorecard rows (th class="question")
        self._question = False
        self._html_only = 0
        self._cell: list[str] | None = None
        self._h2: list[str] | None = None
        self._h2_class = ""

    def handle_starttag(self, tag, attrs):
        if tag == "details":              # an HTML-only table (display.raw_table_html): not in the PDF
            self._html_only += 1
        if tag in ("td", "th") and self._html_only:
            return
        if tag in ("td", "th"):
            self._cell = []
            self._question = tag == "th" and dict(attrs).get("class") == "question"
        elif tag == "h2":
            self._h2, self._h2_class = [], dict(attrs).get("class") or ""

    def handle_endtag(self, tag):
        if tag == "details":
            self._html_only -= 1
        if tag in ("td", "th") and self._cell is not None:
            self.cells.append(_norm(" ".join(self._cell)))
            if self._question:
                self.questions.append(" ".join(" ".join(self._cell).split()))
            self._cell = None
        elif tag == "h2" and self._h2 is not None:
            self.headings.append((" ".join(" ".join(self._h2).split()), self._h2_class))
            self._h2 = None

    def handle_data(self, data):
        for part in (self._cell, self._h2):
            if part is not None:
                part.append(data)


def parse_html(text: str) -> _Html:
    p = _Html()
    p.feed(text)
    return p


def pdf_pages(pdf: str | Path) -> list[str]:
    """Each page's text as `pdftotext -layout` lays it out."""
    out = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    pages = _norm(out).split("\f")
    return pages[:-1] if pages and not pages[-1].strip() else pages


def _runs(line: str) -> list[tuple[int, str]]:
    """(column, text) of each cell-like run on a layout line (runs are separated by two spaces or more)."""
    return [(m.start(), m.group(0)) for m in CELL_GAP.finditer(line)]


def _below(lines: list[str], i: int, col: int, end: int) -> tuple[int, str] | None:
    """The run that continues a cell whose line i holds text from `col` (its last word from `end`): the
    first run below starting in that column, looking past lines where the column is empty (pdftotext
    centres a one-line cell beside a taller one, so the continuation can be two lines down)."""
    for k in range(i + 1, min(i + 4, len(lines))):
        for col2, run in _runs(lines[k]):
            if abs(col2 - col) <= COLUMN_SLACK or abs(col2 - end) <= COLUMN_SLACK:
                return k, run
            if col2 < col <= col2 + len(run):
                return None                    # other text fills the column: the cell ended
    return None


def split_cells(pages: list[str], cells: list[str]) -> list[str]:
    """Words of table cells broken across lines: 'page N: "F" + "G" (of "FG")'. Only lines of tables
    (two runs or more on the line or the one below): prose may break a word at its hyphen."""
    words: dict[str, int] = {}
    for c in cells:
        for w in c.split():
            words[w] = words.get(w, 0) + 1
    whole: dict[str, int] = {}
    for page in pages:
        for w in page.split():
            whole[w] = whole.get(w, 0) + 1
    found = []
    for n, page in enumerate(pages, 1):
        lines = page.splitlines()
        for i in range(len(lines) - 1):
            runs = _runs(lines[i])
            for col, run in runs:
                f = run.split()[-1]
                hit = _below(lines, i, col, col + len(run) - len(f))
                if hit is None or (len(runs) < 2 and len(_runs(lines[hit[0]])) < 2):
                    continue
                g = hit[1].split()[0]
                for joined in ({f + g} if f.endswith("-") else {f + g, f + "-" + g}):
                    if len(joined) < 3 or joined not in words:
                        continue
                    if f not in words or g not in words or whole.get(joined, 0) < words[joined]:
                        found.append(f'page {n}: "{f}" + "{g}" (of "{joined}")')
    return list(dict.fromkeys(found))


NUMBER = re.compile(r"[-+−]?[\d.,]*\d[\d.,]*(?:e[-+]\d+)?%?")


def clipped_cells(pages: list[str], cells: list[str], show: int = 5) -> list[str]:
    """Numbers of table cells found nowhere in the PDF: '<n> table numbers not in the PDF (a column cut off?):
    e.g. …'."""
    printed = set(" ".join(pages).split())
    missing = list(dict.fromkeys(c.strip() for c in cells if NUMBER.fullmatch(c.strip()) and c.strip() not in printed))
    if not missing:
        return []
    return [f"{len(missing)} table number(s) not in the PDF (a column cut off?): e.g. {', '.join(missing[:show])}"]


def _gray_rows(pdf: str | Path, page: int, dpi: int = 20) -> list[float]:
    """Per pixel row of one page: the share of non-white pixels (pdftoppm, binary PGM)."""
    raw = subprocess.run(["pdftoppm", "-gray", "-r", str(dpi), "-f", str(page), "-l", str(page), str(pdf)],
                         capture_output=True, check=True).stdout
    head = re.match(rb"P5\s+(\d+)\s+(\d+)\s+(\d+)\s", raw)
    w, h = int(head.group(1)), int(head.group(2))
    data = raw[head.end():]
    return [sum(1 for v in data[r * w:(r + 1) * w] if v < 200) / w for r in range(h)]


def fill(pdf: str | Path, page: int, top_mm: float = 16, bottom_mm: float = 18, height_mm: float = 297) -> float:
    """How far down the page's content reaches, as a share of the text area (A4, the brief's margins;
    the footer below the bottom margin does not count)."""
    rows = _gray_rows(pdf, page)
    top, bottom = int(len(rows) * top_mm / height_mm), int(len(rows) * (1 - bottom_mm / height_mm))
    inked = [r for r in range(top, bottom) if rows[r] > 0]
    return 0.0 if not inked else (inked[-1] - top + 1) / (bottom - top)


def _starts(page: str, heading: str) -> bool:
    lines = [" ".join(x.split()) for x in page.splitlines() if x.strip()]
    first = " ".join(lines[:3])                 # a long heading wraps over two or three lines
    return bool(lines) and first.startswith(" ".join(heading.split())[:40])


def sparse_pages(pdf: str | Path, pages: list[str], headings: list[str]) -> list[str]:
    out = []
    for n in range(1, len(pages)):                # the last page may be short
        nxt = pages[n]
        if any(_starts(nxt, h) for h in headings):
            continue
        share = fill(pdf, n)
        if share < MIN_FILL:
            out.append(f"page {n}: {share:.0%} filled and page {n + 1} starts no section")
    return out


def body_pages(pages: list[str], appendix_headings: list[str]) -> int:
    """Pages before the first appendix (all pages when there is none)."""
    for n, page in enumerate(pages):
        if appendix_headings and _starts(page, appendix_headings[0]):
            return n
    return len(pages)


def missing_answers(page1: str, targets: list[str], question: str = "Accelerators supported") -> list[str]:
    """Targets page 1's scorecard has no column for, when it asks `question` (targets are its columns: their
    names head the table on page 1)."""
    if question not in " ".join(page1.split()):
        return list(targets)
    words = set(page1.split())
    return [t for t in targets if t not in words]


def answers_past_page_one(pages: list[str], questions: list[str]) -> list[str]:
    """Scorecard questions not on page 1 (the table ran over): each question's first words are looked for in
    page 1's text, spaces normalised (a question wraps in its cell, so only its first three words)."""
    first = " ".join(" ".join(x.split()) for x in (pages[0] if pages else "").splitlines())
    out = []
    for q in questions:
        head = " ".join(_norm(q).split()[:3])
        if head and head not in first:
            out.append(f"the answer to '{q}' is not on page 1")
    return out


# Page 1's text area (A4 less the 16 mm and 18 mm margins: 263 mm) and main's width (182 mm less 12 px a side),
# in points; the estimate's room for error is the 3 % left over (the quick study's page 1, 2026-12-07: estimated
# 701 pt, printed about 675; its table 330 and 330).
PAGE_ONE_PT = 0.97 * 263 * 72 / 25.4
MAIN_PT = 182 * 72 / 25.4 - 18
EM = {False: 0.56, True: 0.61}          # DejaVu Sans's width of a character of prose, regular and bold, in em
# (font pt, space above, space below, width taken from main) of page 1's blocks, after templates/brief.css
BLOCKS = {"h1": (22, 0, 3, 25.5), "h2": (15, 16.5, 16.2, 0), "summary": (10.5, 3, 3, 25.5), "setup": (10, 3, 3, 25.5),
          "meta": (9, 9, 9, 25.5), "p": (10, 9, 9, 0), "li": (7.5, 0, 0, 0),
          "quotes-head": (9.5, 4, 1, 0), "quote": (8.5, 0, 1.5, 16), "answers": (12, 8, 7.5, 0)}       # page 1's findings (brief/quotes.py)
LINE = 1.4                               # the body's line height
_BLOCK = re.compile(r'<(h1|h2|p|li|table)\b([^>]*)>(.*?)</\1>', re.S)


def _plain(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", fragment)).split())


def text_lines(text: str, size_pt: float, width_pt: float, bold: bool = False) -> int:
    """Lines a text takes wrapped at spaces into width_pt (greedy, as a browser wraps)."""
    cw = EM[bold] * size_pt
    lines, used = 1, 0.0
    for word in text.split():
        w = len(word) * cw
        if used and used + cw + w > width_pt:
            lines, used = lines + 1, w
        else:
            used += (cw if used else 0.0) + w
    return lines


def _table_pt(table: str) -> float:
    rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)
    cells = [re.findall(r"<(t[hd])\b([^>]*)>(.*?)</\1>", r, re.S) for r in rows]
    n = max((len(c) for c in cells), default=1)
    question = 0.31 * MAIN_PT
    widths = [question] + [(MAIN_PT - question) / max(1, n - 1)] * (n - 1)
    total = 6.0                                                       # the table's margin
    for row in cells:
        high = 0.0
        for (tag, attrs, body), w in zip(row, widths):
            plain_cell = 'class="question"' in attrs
            lines = text_lines(_plain(body), 8, w - (9 if tag == "th" else 7.5), bold=not plain_cell)
            high = max(high, lines * 8 * LINE + (4.5 if tag == "th" else 3.75))
        total += high
    return total


def page_one_pt(page: str) -> float:
    """Page 1's estimated height in points, from the brief's HTML up to the snapshot (which starts page 2):
    the cover, the answers' heading, the scorecard and its footnotes."""
    first = re.sub(r"<nav\b.*?</nav>", "", page.split('<h2 class="snapshot"')[0], flags=re.S)   # not printed
    total = 12.0 if '<div class="cover">' in first else 0.0          # the cover's padding
    for m in _BLOCK.finditer(first):
        tag, attrs, body = m.groups()
        if tag == "table":
            total += _table_pt(body)
            continue
        cls = re.search(r'class="([^"]*)"', attrs)
        size, above, below, inset = BLOCKS.get(cls.group(1) if cls and cls.group(1) in BLOCKS else tag, BLOCKS["p"])
        total += above + below + text_lines(_plain(body), size, MAIN_PT - inset) * size * LINE
    lists = 6.0 * (("<ol" in first) + ("<ul" in first))
    return total + lists + (3.75 if "<h2" in first else 0.0)   # the lists' margins; h2's rule


def scorecard_end_past_page_one(pages: list[str], html_text: str) -> list[str]:
    """The scorecard's last footnote line (its closing words) not on page 1: the footnotes ran over."""
    last = re.search(r'<li class="basis">(.*?)</li>', html_text, re.S)
    tail = " ".join(_norm(_plain(last.group(1))).split()[-3:]) if last else ""
    first = " ".join(" ".join(x.split()) for x in (pages[0] if pages else "").splitlines())
    return [f"page 1's footnotes run onto page 2 ('… {tail}' is not on page 1)"] if tail and tail not in first else []


EXTERNAL = re.compile(r"""(?:src|href|xlink:href)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?\s*(?:https?:)?//|"""
                      r"""@import\s+["']?(?:url\()?\s*["']?(?:https?:)?//""", re.I)


def external_references(html_text: str) -> list[str]:
    """Resources the HTML would fetch from the network (fonts, style sheets, scripts, images)."""
    return [html_text[max(0, m.start() - 20):m.end() + 60].replace("\n", " ") for m in EXTERNAL.finditer(html_text)]


def check(pdf: str | Path, html_path: str | Path, targets: list[str] | None = None,
          max_body_pages: int = BODY_PAGES) -> dict:
    """Every layout problem of a rendered brief, by kind; 'body_pages' and 'pages' counted."""
    html_text = Path(html_path).read_text()
    parsed = parse_html(html_text)
    out = {"offline": external_references(html_text), "figures": figure_problems(html_text)}
    if not shutil.which("pdftotext") or not shutil.which("pdftoppm"):
        out["skipped"] = "poppler-utils (pdftotext, pdftoppm) not installed: PDF layout not checked"
        return out
    pages = pdf_pages(pdf)
    tops = [h for h, cls in parsed.headings]
    appendices = [h for h, cls in parsed.headings if "appendix" in cls.split()]
    body = body_pages(pages, appendices)
    out.update(pages=len(pages), body_pages=body, split_cells=split_cells(pages, parsed.cells),
               answers_page1=answers_past_page_one(pages, parsed.questions)
               + scorecard_end_past_page_one(pages, html_text),
               clipped_cells=clipped_cells(pages, parsed.cells),
               sparse_pages=sparse_pages(pdf, pages, tops),
               page1_answers=[f"page 1 has no 'Accelerators supported' answer for {t}"
                              for t in missing_answers(pages[0] if pages else "", targets or [])],
               body=[f"the body has {body} pages, more than {max_body_pages}"] if body > max_body_pages else [],
               appendix=[f"the appendices have {len(pages) - body} pages, more than {APPENDIX_PAGES}"]
               if len(pages) - body > APPENDIX_PAGES else [])
    return out


def figure_problems(html_text: str) -> list[str]:
    """What figure_html marked as not fitting in its figures (tick labels, titles)."""
    from .display import FIGURE_LAYOUT
    return [html.unescape(p) for p in re.findall(rf"<!-- {FIGURE_LAYOUT} (.*?) -->", html_text, flags=re.S)]


def problems(result: dict) -> list[str]:
    return [p for k in ("split_cells", "clipped_cells", "sparse_pages", "page1_answers", "answers_page1", "body",
                        "appendix", "offline", "figures")
            for p in result.get(k, [])]
