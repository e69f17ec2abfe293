# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Start here: which study answers your question
#
# Each numbered notebook runs one study with `params.yaml`'s knobs (its parameters cell shows them; **Run All**
# runs it, a few minutes at the quick profile on 2 cores) and writes a new `reports/runs/<time>/<study>/`. A
# question that spans studies is answered by running each and rendering one brief of them (last cell below).
#
# | your question | study (notebook) | what it measures |
# |---|---|---|
# | How many GPUs can this storage feed? | emulated training (`02_emulated_training`); the transfer sweep (`04_transfer_sweep`) forecasts it from fio | emulated accelerators kept at AU ≥ 90 % for a training workload (unet3d) |
# | How often can we checkpoint, how long does a restore take? | checkpointing (`06_checkpoint`) | llama3 checkpoints saved and restored: save rate per host, the interval within 5 % overhead |
# | Should the KV cache be offloaded to this storage? | KV-cache offload (`07_kv_cache`) | MLPerf's KV-cache options and beyond how many tokens reloading beats recomputing |
# | How does it do on vector search? | vector search (`09_vector_search`) | queries/s at recall ≥ 0.95, reads per query, the device's prediction |
# | How fast is it as an object store (S3)? | objects (`08_object_sweep`) | GET and PUT at object size × concurrency, directory vs S3 |
# | Does data preparation, training or streaming inference wait on storage? | preprocessing (`01_preprocess`), ResNet50 training (`03_train_resnet50`), streaming inference (`05_stream_inference`) | ingest MB/s, images/s under memory limits, frames/s |
#
# **A brief of the studies you choose**: `storagebrief brief --studies emulate,kv_cache,vector_search` (in a
# terminal; with `!` in front in a console or a cell) renders one brief of those studies, each from its newest
# complete results, whether a notebook or the pipeline made them; or set `studies` in `brief.ipynb`'s parameters
# cell and Run All. The cell below says which studies have results here and prints that command for them.

# %%
from storagebrief import notebook

notebook.start_here("reports")
