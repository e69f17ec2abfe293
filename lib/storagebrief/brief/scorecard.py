"""Page 1's scorecard (issue 49): questions as rows, targets as columns, each cell a number with its unit and
a few words, a footnote mark where the answer needs a caveat, the footnotes one line each below the table.

A study's page-1 answer (studies' answers(): question, target, answer, basis) may carry `short` (the cell) and
`note` (its one-line caveat); without them the cell is the answer's first clause with its parentheses left out,
and what was left out is the note. The full answer and its basis print in the study's chapter: every number of a
cell is one the chapter prints too (tests/brief/test_scorecard.py).
"""
from __future__ import annotations

import html
import re

from ..kit import history
from ..report.display import wrap_at_spaces_only

NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?")
_PAREN = re.compile(r"\s*\(([^()]*)\)")


def short(a: dict) -> str:
    """The cell: the study's own short form, else the answer's first clause without its parentheses."""
    if a.get("short"):
        return str(a["short"])
    first = str(a.get("answer", "")).split(";")[0]
    return _PAREN.sub("", first).strip() or str(a.get("answer", ""))


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


def grid(rows: list[dict], targets: list[str]) -> tuple[list[str], list[str], dict, list[str]]:
    """(questions, targets with an answer, {(question, target): (cell, footnote number or 0)}, footnotes)."""
    questions = list(dict.fromkeys(str(a["question"]) for a in rows))
    answered = {str(a["target"]) for a in rows}
    columns = [t for t in targets if t in answered] + sorted(answered - set(targets))
    notes: list[str] = []
    cells = {}
    for a in rows:
        text = note(a)
        mark = 0
        if text:
            if text not in notes:
                notes.append(text)
            mark = notes.index(text) + 1
        cells[(str(a["question"]), str(a["target"]))] = (short(a), mark)
    return questions, columns, cells, notes


def table_html(rows: list[dict], targets: list[str], chapter_of: dict[str, str] | None = None) -> str:
    """The scorecard table and its footnotes; chapter_of: question -> the chapter's anchor (the question links
    to where its full answer and basis print; a footnote names the chapter that prints it too)."""
    return _table(rows, targets, chapter_of or {})


def _table(rows: list[dict], targets: list[str], chapter_of: dict[str, str]) -> str:
    questions, columns, cells, notes = grid(rows, targets)
    note_chapter = {note(a): chapter_of.get(str(a["question"]), "") for a in rows if note(a)}
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
            cell, n = cells.get((q, t), ("–", 0))
            tds.append(f"<td>{esc(cell)}" + (f"<sup>{mark(n)}</sup>" if n else "") + "</td>")
        body.append(f'<tr><th class="question">{label}</th>{wrap_at_spaces_only("".join(tds))}</tr>')
    foot = "".join(f'<li data-chapter="{esc(note_chapter.get(n, ""))}"><sup>{mark(i)}</sup> {esc(n)}</li>'
                   for i, n in enumerate(notes, 1))
    return (f'<table class="scorecard"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>'
            f'<ol class="footnotes">{foot}<li class="basis">Each answer\'s basis (how it was measured, what '
            'limited it) is in its study\'s chapter and appendix; "–": not measured on that target.'
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
