"""The brief assembler: the layer above the studies that puts the performance brief together.

It reads the studies registry and each study's results; the report library below the studies
(storagebrief.report: headline arithmetic, how a difference is written, tables and figures, the PDF's
layout checks) never imports it, so imports run one way (tests/test_code_shape.py).

  assemble          cover, the answers (page 1), snapshot, study sections (from the registry), appendices
  inputs            the gate: a study's results are read, or "could not be read: <why>"
  characterization  the block-trace summary table, LBA/size/locality plots of every study's runs
  render            notebook -> HTML (code hidden) -> PDF
  choose            a brief of the studies you choose (`brief --studies`): each one's newest complete results
"""
from ..report.display import analysis, fmt_s, limits_box, show_figure, show_html, show_md, show_table, style
from ..report.headlines import compare, versus_reference
from .assemble import (all_headlines, answers, appendix_comparisons, appendix_configuration, appendix_details,
                       appendix_procedure, available, block_characterization,
                       snapshot, study_section, target_order, title_block)
from .choose import from_notebook as chosen_studies
from .render import render

__all__ = ["all_headlines", "analysis", "answers", "appendix_comparisons", "appendix_configuration", "appendix_details",
           "appendix_procedure", "available", "block_characterization",
           "chosen_studies", "compare",
           "fmt_s", "limits_box", "render", "show_figure", "show_html", "show_md", "show_table", "snapshot",
           "study_section", "style", "target_order", "title_block", "versus_reference"]
