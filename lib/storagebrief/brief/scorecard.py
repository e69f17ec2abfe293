"""Page 1's scorecard (issue 49): questions as rows, targets as columns, each cell a number with its unit and
a few words, a footnote mark where the answer needs a caveat, the footnotes one line each below the table.

A study's page-1 answer (studies' answers(): question, target, answer, basis) may carry `short` (the cell) and
`note` (its one-line caveat); without them the cell is the answer's first clause with its parentheses left out,
and what was left out is the note. The full answer and its basis print in the study's chapter: every number of a
cell is one the chapter prints too (tests/brief/test_scorecard.py). Issue 62, a page 1 a vendor can quote:

- `page_one: False`: an answer about this machine (its CPU, the client), not the storage: its chapter prints it,
  page 1 does not (on_page_one).
- `unsettled`: plain words why the answer is not settled (a search that stopped before a count failed, runs that
  disagreed): the cell says "not settled" and one footnote gives those words; the internal reason ("page-cache
  cap reached", "fit unstable: …") stays in the chapter's answer.
- Page 1 never spills: a footnote is one line (NOTE_CHARS, the rest in its chapter) and past `max_notes` the
  remaining caveats share one footnote pointing to their chapters (brief/pageone.answers fits max_notes to the
  page with report/layout.page_one_pt).
"""
from __future__ import annotations

import html
import re

from ..kit import history
from ..report.display import wrap_at_spaces_only
from .quiet import DISTURBED

NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?")
_PAREN = re.compile(r"\s*\(([^()]*)\)")
NOT_SETTLED = "not settled"
MAX_NOTES = 12           # footnotes page 1 prints at most (fewer where the page is full: brief/pageone.fitted)
NOTE_CHARS = 115         # one footnote line across page 1 at 7.5 pt (report/layout.py's character width)
MORE = "other caveats: in each answer's chapter (its note)"
KEPT_FIRST = (NOT_SETTLED + ":", DISTURBED + ":")        # footnotes never folded into the shared last one
# Page 1's terms (issue 62: "AU ≥ 90 %", "unet3d" undefined where a reader meets them): each one page 1 uses is
# defined in one line under its footnotes, before the basis line (whose place on page 1 the PDF check proves); the
# snapshot defines those its cards use first (p99, QD).
GLOSSARY = (
    (r"\bAU\b", "AU: accelerator utilisation, the share of time an emulated accelerator (GPU) computes rather than "
                "waits for data"),
    (r"\bAccelerators supported\b", "accelerators supported: the most the storage kept at that AU"),
    (r"\bunet3d\b", "unet3d: MLPerf Storage's 3D U-Net training workload (large image samples)"),
    (r"\bP = \d", "P: processes at once"),
    (r"\bp99\b", "p99: the latency 99 % of requests beat"),
    (r"\bQD\b", "QD: queue depth, requests in flight at once"),
    (r"\brecall\b", "recall: the share of the true nearest neighbours a search finds"),
    (r"\bKV cache\b", "KV cache: a prompt's attention state, reloaded from storage or recomputed"),
    (r"\b(?:GET|PUT)\b", "GET, PUT: reading, writing one object"),
)


def glossary_terms(text: str) -> list[str]:
    """The GLOSSARY lines of the terms `text` uses, in GLOSSARY's order."""
    return [words for pattern, words in GLOSSARY if re.search(pattern, text)]


def on_page_one(a: dict) -> bool:
    """Whether page 1 shows the answer: not one about this machine's CPU or the client (`page_one: False`)."""
    return a.get("page_one", True) is not False


def short(a: dict) -> str:
    """The cell: the study's own short form, else the answer's first clause without its parentheses."""
    if a.get("short"):
        text = str(a["short"])
    else:
        first = str(a.get("answer", "")).split(";")[0]
        text = _PAREN.sub("", first).strip() or str(a.get("answer", ""))
    return text if not a.get("unsettled") or NOT_SETTLED in text else NOT_SETTLED


def unsettled_note(a: dict) -> str:
    """The footnote of an answer that is not settled: 'not settled: <plain words>', or ''."""
    return f"{NOT_SETTLED}: {a['unsettled']}" if a.get("unsettled") else ""


def cell_notes(a: dict) -> list[str]:
    """Every footnote of a cell: why it is not settled first, then its caveat, then that runs behind it were
    disturbed by other work (brief/quiet.py: never silently)."""
    return [n for n in (unsettled_note(a), note(a), a.get("disturbed") or "") if n]


def note(a: dict) -> str:
    """The cell's caveat (one line): the study's own, else what short() left out of the answer."""
    if "note" in a:
        return str(a["note"] or "")
    if a.get("short"):
        return ""
    answer = str(a.get("answer", ""))
    first, _, rest = answer.partition(";")
    left = [m.group(1) for m in _PAREN.finditer(first)] + ([rest.strip()] if rest.strip() else [])
    return "; ".join(x for x in left if x)


def numbers(text: str) -> list[str]:
    """The numbers a text prints ("1,083", "0.588", "8"), for comparing a cell with its chapter."""
    return NUMBER.findall(text)


def mark(n: int) -> str:
    """Footnote n's mark: a letter, never a digit a reader (or pdftotext) would read into the number before it."""
    return "abcdefghijklmnopqrstuvwxyz"[(n - 1) % 26] * (1 + (n - 1) // 26)


def one_line(text: str, limit: int = NOTE_CHARS) -> str:
    """A footnote cut to one line at a space (its chapter prints it whole)."""
    if len(text) <= limit:
        return text
    more = " … (in full in its chapter)"
    return text[:limit - len(more)].rsplit(" ", 1)[0].rstrip(" ;,:") + more


def grid(rows: list[dict], targets: list[str], max_notes: int = MAX_NOTES
         ) -> tuple[list[str], list[str], dict, list[str]]:
    """(questions, targets with an answer, {(question, target): (cell, footnote numbers)}, footnotes) of the rows
    page 1 shows. Past max_notes footnotes (why an answer is not settled kept first), the other caveats share
    one last footnote saying their chapters print them."""
    rows = [a for a in rows if on_page_one(a)]
    questions = list(dict.fromkeys(str(a["question"]) for a in rows))
    answered = {str(a["target"]) for a in rows}
    columns = [t for t in targets if t in answered] + sorted(answered - set(targets))
    every = list(dict.fromkeys(n for a in rows for n in cell_notes(a)))
    if len(every) > max_notes:
        first = [n for n in every if n.startswith(KEPT_FIRST)] + [n for n in every if not n.startswith(KEPT_FIRST)]
        kept = set(first[:max(0, max_notes - 1)])
        notes = [n for n in every if n in kept] + [MORE]
    else:
        notes = every
    cells = {}
    for a in rows:
        marks = tuple(dict.fromkeys(notes.index(n) + 1 if n in notes else len(notes) for n in cell_notes(a)))
        cells[(str(a["question"]), str(a["target"]))] = (short(a), marks)
    return questions, columns, cells, notes


def table_html(rows: list[dict], targets: list[str], chapter_of: dict[str, str] | None = None,
               max_notes: int = MAX_NOTES, glossary: bool = True) -> str:
    """The scorecard table and its footnotes; chapter_of: question -> the chapter's anchor (the question links
    to where its full answer and basis print; a footnote names the chapter that prints it too)."""
    return _table(rows, targets, chapter_of or {}, max_notes, glossary)


def _table(rows: list[dict], targets: list[str], chapter_of: dict[str, str], max_notes: int, glossary: bool) -> str:
    rows = [a for a in rows if on_page_one(a)]
    questions, columns, cells, notes = grid(rows, targets, max_notes)
    note_chapter = {n: chapter_of.get(str(a["question"]), "") for a in rows for n in cell_notes(a)}
    if not questions:
        return ""
    esc = html.escape
    head = "<tr><th>Question</th>" + "".join(f"<th>{esc(t)}</th>" for t in columns) + "</tr>"
    body = []
    for q in questions:
        link = chapter_of.get(q)
        label = f'<a href="#{esc(link)}">{esc(q)}</a>' if link else esc(q)
        tds = []
        for t in columns:
            cell, marks = cells.get((q, t), ("–", ()))
            tds.append(f"<td>{esc(cell)}" + (f"<sup>{','.join(map(mark, marks))}</sup>" if marks else "") + "</td>")
        body.append(f'<tr><th class="question">{label}</th>{wrap_at_spaces_only("".join(tds))}</tr>')
    foot = "".join(f'<li data-chapter="{esc(note_chapter.get(n, ""))}"><sup>{mark(i)}</sup> {esc(one_line(n))}</li>'
                   for i, n in enumerate(notes, 1))
    shown = " ".join([*questions, *(c for c, _ in cells.values()), *notes])
    terms = glossary_terms(shown) if glossary else []
    if terms:
        foot += f'<li class="glossary"><b>Terms:</b> {esc("; ".join(terms))}.</li>'
    return (f'<table class="scorecard"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>'
            f'<ol class="footnotes">{foot}<li class="basis">How each answer was measured and what limited it: '
            'its study\'s chapter; "–": not measured on that target.'
            f'{esc(_ranges_line(rows))}</li></ol>')


def _ranges_line(rows: list[dict]) -> str:
    """One sentence saying which ranges hold earlier studies of the same parameters on this machine (kit/history)
    and where those studies came from, instead of the words in every cell."""
    more = [a for a in rows if int(a.get("studies") or 1) > 1]
    if not more:
        return ""
    counts = sorted({int(a["studies"]) for a in more})
    n = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    origins = list(dict.fromkeys(str(a["origins"]) for a in more if a.get("origins")))
    where = f" ({' or '.join(origins)})" if origins else ""
    return (f" A range holds every run of its answer in {n} studies{where} of these parameters on this machine "
            f"({history.SHOWN}).")


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<sup>[^<]*</sup>|<[^>]+>", " ", fragment))


def chapters_text(page: str) -> dict[str, str]:
    """anchor -> the visible text of that chapter of the brief's HTML (its h2 to the next h2)."""
    out = {}
    for m in re.finditer(r'<h2[^>]*\bid="(section-[^"]+)"[^>]*>(.*?)(?=<h2\b|$)', page, re.S):
        out[m.group(1)] = _text(m.group(2))
    return out


def numbers_not_in_chapters(page: str) -> list[str]:
    """Every number of page 1's scorecard (cells and footnotes) that its study's chapter does not print:
    'Checkpoint interval … (local): 248 not in its chapter'. Page 1 and the chapters are read from the HTML."""
    table = re.search(r'<table class="scorecard">.*?</ol>', page, re.S)
    if not table:
        return []
    chapters = chapters_text(page)
    heads = [_text(h).strip() for h in re.findall(r"<thead>.*?</thead>", table.group(0), re.S)[0].split("</th>")[1:-1]]
    out = []
    for row in re.findall(r"<tr>(.*?)</tr>", table.group(0), re.S)[1:]:
        link = re.search(r'href="#([^"]+)"', row)
        q = _text(re.search(r'<th class="question">(.*?)</th>', row, re.S).group(1)).strip()
        chapter = chapters.get(link.group(1), "") if link else ""
        for target, cell in zip(heads, re.findall(r"<td>(.*?)</td>", row, re.S)):
            out += [f"{q} ({target}): {n} not in its chapter" for n in numbers(_text(cell)) if n not in chapter]
    for where, item in re.findall(r'<li data-chapter="([^"]*)">(.*?)</li>', table.group(0), re.S):
        text = _text(item)
        out += [f"footnote '{text.strip()[:60]}': {n} not in its chapter" for n in numbers(text)
                if n not in chapters.get(where, "")]
    return out
