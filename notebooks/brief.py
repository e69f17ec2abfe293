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
for key, title, study_dir in report.available(reports_dir):
    report.study_section(key, study_dir)

# %%
report.block_characterization(reports_dir)

# %%
report.appendix_configuration(reports_dir)

# %%
report.appendix_procedure(reports_dir, params_file)

# %%
report.appendix_comparisons(reports_dir)
