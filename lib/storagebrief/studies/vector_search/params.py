"""vector_search: section of params.yaml (validated before any work)."""
from __future__ import annotations

import os

from pydantic import Field, field_validator, model_validator

from ...core.config import OnSomeTargets, ParamsError, sorted_counts

THREADS_PER_CORE = 4          # more search threads than this per core only queue on the CPU


class VectorSearchParams(OnSomeTargets):   # targets: a subset of the target names (core.config)
    num_vectors: int = Field(20_000, ge=1_000, le=100_000_000)   # database vectors (float32)
    dimension: int = Field(64, ge=8, le=4096)                    # v3.0: 1536; quick 64; paper 128
    clusters: int = Field(64, ge=1, le=1_000_000)                # Gaussian clusters of the clustered set
    cluster_spread: float = Field(0.15, gt=0, le=10)             # a cluster's sd / the centres' sd
    query_noise: float = Field(0.02, ge=0, le=1)                 # planted query = a database vector + this sd
    queries: int = Field(200, ge=10, le=1_000_000)               # planted queries (each point runs them in order)
    min_queries: int = Field(5, ge=1, le=1_000_000)              # ... at least this many, even past max_point_s
    max_point_s: float = Field(1.0, gt=0, le=3600)               # a point stops issuing queries after this long
    k: int = Field(10, ge=1, le=1000)                            # recall@k, neighbours returned per query
    search_list: list[int] = Field(default_factory=lambda: [20, 50, 100], min_length=1)   # L (>= k)
    beam_width: list[int] = Field(default_factory=lambda: [1, 2], min_length=1)          # reads in flight per query
    threads: list[int] = Field(default_factory=lambda: [1], min_length=1)                # concurrent queries
    graph_degree: int = Field(32, ge=4, le=512)                  # Vamana R
    build_complexity: int = Field(64, ge=8, le=4096)             # Vamana build L
    pq_chunks: int = Field(32, ge=1, le=4096)                    # PQ bytes per vector held in memory (<= dimension)
    build_threads: int = Field(1, ge=0, le=1024)                 # 1: repeatable bit for bit; 0: every CPU
    probe_s: float = Field(0.4, gt=0, le=600)                    # the fio 4 KiB random-read probe after each point
    recall_floor: float = Field(0.95, gt=0, le=1)                # QPS is reported among points at or above it
    uniform_control: bool = True      # the same index shape on uniform random data and queries (v3.0's data)
    repeats: int = Field(1, ge=1, le=100)
    answer_runs: int = Field(1, ge=1, le=100)   # runs of each target's page-1 point (repeats included): the rest
                                                # run after the sweep, once that point is known (core/plans.py)
    seed: int = Field(0, ge=0, le=2**32 - 1)    # numpy refuses a negative seed (a run would end in "a bug")

    @field_validator("search_list")
    @classmethod
    def _lists(cls, v: list[int]) -> list[int]:
        return sorted_counts(v, "vector_search.search_list (L)", 1, 100_000)

    @field_validator("beam_width")
    @classmethod
    def _beams(cls, v: list[int]) -> list[int]:
        return sorted_counts(v, "vector_search.beam_width", 1, 128)

    @field_validator("threads")
    @classmethod
    def _threads(cls, v: list[int]) -> list[int]:
        return sorted_counts(v, "vector_search.threads", 1, 4096)

    @model_validator(mode="after")
    def _check(self):
        if min(self.search_list) < self.k:
            raise ValueError(f"vector_search.search_list = {self.search_list}: every L must be >= k = {self.k} "
                             "(the candidate list holds the k answers)")
        if self.pq_chunks > self.dimension:
            raise ValueError(f"vector_search.pq_chunks = {self.pq_chunks} is above dimension = {self.dimension}")
        if self.clusters > self.num_vectors:
            raise ValueError(f"vector_search.clusters = {self.clusters} is above num_vectors = {self.num_vectors}")
        if self.queries > self.num_vectors:
            raise ValueError(f"vector_search.queries = {self.queries} is above num_vectors = {self.num_vectors} "
                             "(each planted query is a database vector plus noise)")
        if self.min_queries > self.queries:
            raise ValueError(f"vector_search.min_queries = {self.min_queries} is above queries = {self.queries}")
        return self

    def check_machine(self) -> None:
        """Search threads within THREADS_PER_CORE x this machine's CPUs, then the tasks and memory of the largest
        phase within this machine's limits (fit.check_budget, kit.budget): validate and the study's run."""
        from .fit import check_budget

        cores = os.cpu_count() or 1
        if max(self.threads) > cores * THREADS_PER_CORE:
            raise ParamsError(f"vector_search.threads = {self.threads}: at most {cores * THREADS_PER_CORE} "
                              f"({THREADS_PER_CORE} per CPU, {cores} CPUs here)")
        check_budget(self)

    # -- sizes: the index layout of DiskANN's disk index (4 KiB sectors of whole nodes) -----------------------
    @property
    def node_bytes(self) -> int:
        return self.dimension * 4 + 4 + self.graph_degree * 4     # full vector, degree, neighbour ids

    def index_bytes(self) -> int:
        """disk.index + vectors + PQ files of one data set, as DiskANN lays them out."""
        per = 4096 // self.node_bytes
        sectors = -(-self.num_vectors // per) if per else self.num_vectors * -(-self.node_bytes // 4096)
        return (sectors + 1) * 4096 + self.num_vectors * (self.dimension * 4 + self.pq_chunks) + (1 << 20)

    def dataset_bytes(self) -> int:
        """Everything one target holds: the clustered set (and the uniform one), queries and ground truth."""
        sets = 2 if self.uniform_control else 1
        return sets * (self.index_bytes() + self.queries * (self.dimension * 4 + self.k * 8))


Params = VectorSearchParams
