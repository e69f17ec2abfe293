"""What studies share, between core (the engine and the hall) and the studies themselves.

Studies import core, formats, report and kit, never each other; kit imports core, formats and
report, never a study. Each module holds one thing more than one study needs:
  runs          the ok runs of a run table; the metrics.json skeleton every study extends
  space         free space on the targets' filesystems, added up over the targets that share one
  files         optional side files (JSON, CSV) read as "the data or nothing"
  cgroup_io     a run's own device reads from its cgroup's counters (CgroupIoSampler, cgroup_read_stats)
  mpi           ranks under mpirun: find it, check the hosts, launch, start line, collect, why it failed
  figures       a metric against a sweep variable per target, ±1 sd over repeats (metric_vs)
  disk_metrics  the Samsung SDC 2023 study's disk table: IOPS, MiB/s, block sizes, response time, read % (monitor columns)
  latency       latency samples as p50/p95/p99/mean/max columns
  checkpoint    checkpoints written and fsync'ed (bytes, seconds), one writer for every study
  ingest        an ingest writer beside a training job (TFRecord frames at a set rate, fsync'ed)
  events        a child's JSON-line events on a pipe, drained into a queue
"""
