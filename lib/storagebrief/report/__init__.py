"""The performance brief: headline arithmetic, shared display helpers, sections, HTML + PDF.

  headlines  reference-vs-other arithmetic (versus_reference) behind every snapshot card
  display    show_table / show_figure / analysis / limits_box: the pieces sections are built from
  brief      cover, the answers (page 1), snapshot, study sections (from the registry), block-level characterization, appendices
  characterization  the seed's block-trace summary table, LBA/size/locality plots of every study's runs
  render     notebook -> HTML (code hidden) -> PDF
"""
from .brief import (all_headlines, answers, appendix_comparisons, appendix_configuration, appendix_details,
                    appendix_procedure, available, block_characterization,
                    snapshot, study_section, target_order, title_block)
from .display import analysis, fmt_s, limits_box, show_figure, show_html, show_md, show_table, style
from .headlines import compare, versus_reference
from .render import render

__all__ = ["all_headlines", "analysis", "answers", "appendix_comparisons", "appendix_configuration", "appendix_details",
           "appendix_procedure", "available", "block_characterization",
           "compare",
           "fmt_s", "limits_box", "render", "show_figure", "show_html", "show_md", "show_table", "snapshot",
           "study_section", "style", "target_order", "title_block", "versus_reference"]
