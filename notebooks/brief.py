# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% tags=["parameters"]
reports_dir = "reports"
params_file = "params.yaml"

# %%
from storagebrief import report

report.title_block(reports_dir, params_file)
report.answers(reports_dir)

# %%
report.snapshot(reports_dir)

# %%
# The body: one section per study (what it measures, key figures, analysis); its detail tables go to
# an appendix of its own (D, E, …), linked from the section.
for key, title, study_dir in report.available(reports_dir):
    report.study_section(key, study_dir, details=True)

# %%
report.block_characterization(reports_dir, details=True)

# %%
report.appendix_configuration(reports_dir)

# %%
report.appendix_procedure(reports_dir, params_file)

# %%
report.appendix_comparisons(reports_dir)

# %%
report.appendix_details(reports_dir)
