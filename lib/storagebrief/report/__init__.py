"""The report library: what every study's brief room and the brief assembler build on.

It sits below the studies and imports only core (tests/test_code_shape.py holds it to that); the
brief itself, which reads the studies registry, is the layer above: storagebrief.brief.

  headlines   reference-vs-other arithmetic (versus_reference) behind every snapshot card
  formatting  how a difference is written ("373x as high", thousands separators, spreads)
  display     show_table / show_figure / analysis / limits_box: the pieces sections are built from
  layout      the PDF's layout checks (pdftotext per page)
"""
from .display import analysis, fmt_s, limits_box, show_figure, show_html, show_md, show_table, style
from .headlines import compare, versus_reference

__all__ = ["analysis", "compare", "fmt_s", "limits_box", "show_figure", "show_html", "show_md", "show_table",
           "style", "versus_reference"]
