#!/usr/bin/env python3
"""The Python DistributedReferenceSet's attributes, `where` predicates, search_within and
radius_search against one CPU ReferenceSet fed the same updates, on every rank of the job.

Every rank builds the same data and the same single store; the sharded store receives the inserts
(with attributes) split over the ranks, then set_attributes, moves and erases from other ranks.
Each rank asks its own rows (the last rank none at times) and every answer must equal the single
store's: ids, distances bit for bit, offsets, capped flags, epochs, report counts. A `where` the
binding refuses on rank 0 raises there while the other ranks' call completes.

    mpirun -np 2 python3 tests/mpi/python_filters.py      (PYTHONPATH=<build>/python)
"""
import sys

import numpy as np
from mpi4py import MPI

import streamknn

WORDS = 2


def same(got, want, what):
    assert len(got) == len(want), f"{what}: {len(got)} fields, want {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if isinstance(w, np.ndarray):
            assert g.dtype == w.dtype and g.shape == w.shape, f"{what}[{i}]: {g.dtype} {g.shape} vs {w.dtype} {w.shape}"
            assert np.array_equal(g, w), f"{what}[{i}] differs:\n{g}\n{w}"
        else:
            assert g == w, f"{what}[{i}]: {g} != {w}"


def data(metric, n, rng):
    if metric == "haversine":
        X = np.column_stack([rng.uniform(-60, 60, n), rng.uniform(-170, 170, n)]).astype(np.float32)
    else:
        X = rng.normal(size=(n, 3)).astype(np.float32)
    words = np.column_stack([rng.integers(0, 8, n), rng.integers(0, 100, n)]).astype(np.uint32)
    return X, words


def stores(metric, comm, rng):
    """The sharded and the single store after the same two publishes; both reports must agree."""
    rank, ranks = comm.Get_rank(), comm.Get_size()
    n = 600
    X, words = data(metric, n, rng)
    ids = rng.permutation(n).astype(np.uint64) * 7 + 3
    dim = X.shape[1]
    shard = streamknn.DistributedReferenceSet(dim, metric, comm=comm, backend="cpu", attribute_words=WORDS,
                                              cpu_threads=1, publish_threads=1)
    single = streamknn.ReferenceSet(dim, metric, backend="cpu", attribute_words=WORDS, cpu_threads=1)
    assert shard.attribute_words == WORDS
    mine = slice(rank, None, ranks)
    assert shard.insert(ids[mine], X[mine], attributes=words[mine]) == len(ids[mine])
    single.insert(ids, X, attributes=words)
    same_report(shard.publish(), single.publish())

    changed = rng.choice(n, 150, replace=False)
    new_words = np.column_stack([rng.integers(0, 8, 150), rng.integers(0, 100, 150)]).astype(np.uint32)
    moved = rng.choice(n, 100, replace=False)
    new_X, _ = data(metric, 100, rng)
    erased = rng.choice(n, 40, replace=False)
    # Split over the ranks otherwise than the inserts, all updates of one id from one rank (updates
    # of one id pushed on two ranks for the same publish apply in rank order, not push order).
    def pushed_here(rows):
        return (ids[rows] // 7 + 1) % ranks == rank
    c, m, e = pushed_here(changed), pushed_here(moved), pushed_here(erased)
    assert shard.set_attributes(ids[changed][c], new_words[c]) == np.count_nonzero(c)
    shard.move(ids[moved][m], new_X[m])
    shard.erase(ids[erased][e])
    single.set_attributes(ids[changed], new_words)
    single.move(ids[moved], new_X)
    single.erase(ids[erased])
    same_report(shard.publish(), single.publish())
    assert shard.size == single.size and shard.epoch == single.epoch == 2
    return shard, single


def same_report(got, want):
    for name in ("epoch", "drained", "applied", "inserted", "moved", "erased", "attributed", "size"):
        g, w = getattr(got, name), getattr(want, name)
        assert g == w, f"report.{name}: {g} != {w}"
    assert sorted(got.rejected_ids.tolist()) == sorted(want.rejected_ids.tolist())


def check(metric, comm):
    rank, ranks = comm.Get_rank(), comm.Get_size()
    rng = np.random.default_rng(11)
    shard, single = stores(metric, comm, rng)
    Q, _ = data(metric, 24, rng)
    mine = Q[rank::ranks]
    nq = len(mine)
    radius = 2.5e6 if metric == "haversine" else 1.2
    per_query = {"required": np.tile(np.uint32([1, 0]), (nq, 1)), "range_word": np.ones(nq, np.int64),
                 "range_min": np.arange(nq) % 30, "range_max": 60 + np.arange(nq)}
    for where in (None, {"required": [1, 0], "forbidden": [4, 0]}, {"range_word": 1, "range_max": 40}, per_query):
        same(shard.search(mine, 7, where=where), single.search(mine, 7, where=where), f"{metric} search {where}")
        same(shard.search_within(mine, 5, radius / 2, where=where),
             single.search_within(mine, 5, radius / 2, where=where), f"{metric} search_within {where}")
        for cap in (None, 3):
            same(shard.radius_search(mine, radius, cap, where=where),
                 single.radius_search(mine, radius, max_results=cap, where=where), f"{metric} radius_search {cap}")
    # keywords, visible ranges, and an empty batch on the last rank (the others still answered)
    rows = mine if rank != ranks - 1 else Q[:0]
    visible = np.tile(np.uint64([0, 2000]), (len(rows), 1))
    shared = {"forbidden": [2, 0]}
    same(shard.radius_search(rows, radius=radius, max_results=4, visible=visible, where=shared),
         single.radius_search(rows, radius, max_results=4, visible=visible, where=shared), f"{metric} visible")
    same(shard.search_within(rows, k=3, radius=radius, visible=visible, where=shared),
         single.search_within(rows, 3, radius, visible=visible, where=shared), f"{metric} visible within")
    # a `where` refused on rank 0 raises there; the other ranks' call completes
    bad = {"required": [1, 0, 0]} if rank == 0 else None
    try:
        got = shard.search(mine, 4, where=bad)
        assert rank != 0, "rank 0's bad where was not refused"
        same(got, single.search(mine, 4), f"{metric} search beside a refusal")
    except streamknn.InvalidArgument as e:
        assert rank == 0 and "where" in str(e), str(e)
    try:
        shard.set_attributes(np.uint64([3]), np.uint32([[1, 2, 3]]))
        raise AssertionError("set_attributes took 3 words on a 2-word store")
    except streamknn.InvalidArgument as e:
        assert "attributes" in str(e), str(e)


def main():
    comm = MPI.COMM_WORLD
    for metric in ("l2", "haversine", "cosine"):
        check(metric, comm)
    comm.Barrier()
    if comm.Get_rank() == 0:
        print(f"python_filters: {comm.Get_size()} ranks, answers equal the single store's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
