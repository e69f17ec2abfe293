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
studies = None      # e.g. "emulate,kv_cache,vector_search": only these studies, each from its newest complete run

# %%
from storagebrief import brief, notebook

# as opened in JupyterLab the kernel runs in notebooks/: relative paths are the project's
reports_dir, params_file = notebook.project_path(reports_dir), notebook.project_path(params_file)
if studies:         # as `storagebrief brief --studies`: their results linked into reports/briefs/<study>+<study>/
    notebook.install_error_display()        # a name that is not a study: one line naming `studies`, not a traceback
    reports_dir = brief.chosen_studies(reports_dir, studies)
brief.title_block(reports_dir, params_file)
brief.answers(reports_dir)

# %%
brief.snapshot(reports_dir)

# %%
# The body: one section per study (what it measures, key figures, analysis); its detail tables go to
# an appendix of its own (D, E, …), linked from the section.
for key, title, study_dir in brief.available(reports_dir):
    brief.study_section(key, study_dir, details=True)

# %%
brief.block_characterization(reports_dir, details=True)

# %%
brief.appendix_configuration(reports_dir)

# %%
brief.appendix_procedure(reports_dir, params_file)

# %%
brief.appendix_comparisons(reports_dir)

# %%
brief.appendix_details(reports_dir)
