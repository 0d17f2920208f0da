"""streamknn.DistributedReferenceSet: one reference set sharded over the ranks of an MPI job.

Each rank owns one shard (on its own GPU, the rank's index on its host modulo the visible GPUs,
or on the CPU); an id's owner is ``shard_of(id, ranks)``. Pushes (``insert`` / ``move`` /
``erase`` / ``set_target`` / ``set_attributes``) are local and may name any id; ``publish``,
``search``, ``search_within``, ``radius_search``, ``classify``, ``regress`` and ``save`` are
collective: every rank calls them in the same order (a rank with nothing to ask passes an empty
batch). Answers equal one ReferenceSet's fed the same updates; attributes, ``where`` predicates
and radius answers take and return the same arrays as ReferenceSet's. See docs/distributed.md.

    from mpi4py import MPI
    import streamknn
    drivers = streamknn.DistributedReferenceSet(2, "haversine", comm=MPI.COMM_WORLD)
    drivers.insert(my_ids, my_positions)        # any rank, any ids
    drivers.publish()                           # every rank
    distances, ids, epoch = drivers.search(my_passengers, 5)   # every rank, its own queries

Needs mpi4py (Debian: python3-mpi4py) and a streamknn built with MPI. Run with
``mpirun -np 4 python3 script.py``.
"""

import numpy as np


def _extension():
    try:
        from mpi4py import MPI  # noqa: F401  (initialises MPI, with MPI_THREAD_MULTIPLE)
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise ImportError("streamknn.DistributedReferenceSet needs mpi4py (Debian: python3-mpi4py)") from e
    try:
        from . import _streamknn_mpi
    except ImportError as e:  # pragma: no cover - depends on the build
        raise ImportError("this streamknn was built without MPI (configure with -DSTREAMKNN_MPI=ON; "
                          "Debian: libopenmpi-dev)") from e
    return _streamknn_mpi


def _world(comm):
    from mpi4py import MPI
    return MPI.COMM_WORLD if comm is None else comm


class PublishReport:
    """What one collective publish did, summed over the shards (rejections listed shard by shard)."""

    __slots__ = ("epoch", "drained", "applied", "inserted", "moved", "erased", "retargeted", "attributed", "size",
                 "rejected")

    def __init__(self, fields):
        for name in self.__slots__:
            setattr(self, name, fields[name])

    @property
    def rejected_ids(self):
        return np.array([r[0] for r in self.rejected], dtype=np.uint64)

    def __repr__(self):
        return (f"PublishReport(epoch={self.epoch}, drained={self.drained}, applied={self.applied}, "
                f"rejected={len(self.rejected)}, size={self.size})")


class DistributedReferenceSet:
    """DistributedReferenceSet(dim, metric='l2', *, comm=None, n_classes=None, n_outputs=None,
    backend='auto', capacity_hint=1024, queue_capacity=65536, cpu_threads=0, publish_threads=0,
    attribute_words=0)

    Collective: every rank of ``comm`` (an mpi4py communicator; default ``MPI.COMM_WORLD``) builds
    it with the same arguments (a difference is refused on every rank, naming the argument and
    the ranks). attribute_words: 32-bit attribute words per point (0 to 4), as ReferenceSet's:
    given at insert (``attributes=``), changed by ``set_attributes``, tested by ``where``.

    Updates return the number of rows queued. A query call whose arrays this rank's binding
    refuses (shapes, ``visible``, ``where``) still takes part with an empty batch, so the other
    ranks' call completes, then raises InvalidArgument on this rank.
    """

    def __init__(self, dim, metric="l2", *, comm=None, n_classes=None, n_outputs=None, backend="auto",
                 capacity_hint=1024, queue_capacity=1 << 16, cpu_threads=0, publish_threads=0, attribute_words=0,
                 _store=None):
        self._comm = _world(comm)
        if _store is not None:
            self._store = _store
            return
        ext = _extension()
        self._store = ext.Store(self._comm.py2f(), dim, metric, n_classes, n_outputs, backend, capacity_hint,
                                queue_capacity, cpu_threads, publish_threads, attribute_words)

    @classmethod
    def load(cls, path, *, comm=None, backend="saved"):
        """Collective: the store saved at path, on a communicator of as many ranks as saved it."""
        comm = _world(comm)
        return cls(0, comm=comm, _store=_extension().Store.load(comm.py2f(), str(path), backend))

    # ---- updates (local: this rank's pushes, any ids) ----
    def insert(self, ids, vectors, targets=None, *, attributes=None):
        """ids (n,), vectors (n, dim), targets as ReferenceSet.insert's; attributes: None (zeros) or
        uint32 (n, attribute_words)."""
        return self._store.push("insert", ids, vectors, targets, attributes)

    def move(self, ids, vectors):
        return self._store.push("move", ids, vectors, None, None)

    def erase(self, ids):
        return self._store.push("erase", ids, None, None, None)

    def set_target(self, ids, targets):
        return self._store.push("set_target", ids, None, targets, None)

    def set_attributes(self, ids, attributes):
        """New attribute words: ids (n,), attributes uint32 (n, attribute_words); routed to each
        id's owner like a move, visible at the next publish."""
        return self._store.push("set_attributes", ids, None, None, attributes)

    # ---- collective calls ----
    def publish(self):
        """Collective: every rank's pushes become visible on every shard as one global epoch."""
        return PublishReport(self._store.publish())

    def search(self, queries, k, visible=None, where=None):
        """Collective: (distances, ids, epoch) for this rank's queries (n, dim); n may be 0.
        where: None or a dict of arrays, as ReferenceSet.search's (one for all rows or one per row)."""
        return self._store.search(self._rows(queries), k, visible, where)

    def search_within(self, queries, k, radius, visible=None, where=None):
        """Collective: the k nearest no farther than radius, as ReferenceSet.search_within's
        (distances, ids, epoch), rows padded (invalid_id, inf)."""
        return self._store.search_within(self._rows(queries), k, radius, visible, where)

    def radius_search(self, queries, radius, max_results=None, visible=None, where=None):
        """Collective: every point within radius, as ReferenceSet.radius_search's
        (offsets, ids, distances, capped, epoch); max_results caps each row (capped[q] set)."""
        return self._store.radius_search(self._rows(queries), radius, max_results, visible, where)

    def classify(self, queries, k, weights="uniform", probabilities=False, visible=None):
        """Collective: (labels, probabilities or None, epoch), aggregated after the exact merge."""
        return self._store.classify(self._rows(queries), k, weights, probabilities, visible)

    def regress(self, queries, k, aggregate="mean", visible=None):
        """Collective: (values (n, n_outputs), epoch), aggregated after the exact merge."""
        return self._store.regress(self._rows(queries), k, aggregate, visible)

    def save(self, path):
        """Collective: each shard to '<path>.epoch-<E>.rank-<r>-of-<G>', then the manifest at path."""
        self._store.save(str(path))

    def owner_of(self, ids):
        """The rank that owns each id (splitmix64(id) % ranks)."""
        ext = _extension()
        ranks = self.ranks
        return np.array([ext.shard_of(int(i), ranks) for i in np.asarray(ids, dtype=np.uint64).ravel()], dtype=np.int32)

    def _rows(self, queries):
        q = np.asarray(queries, dtype=np.float32)
        return q.reshape(-1, self.dim) if q.size == 0 else q

    rank = property(lambda self: self._store.rank)
    ranks = property(lambda self: self._store.ranks)
    epoch = property(lambda self: self._store.epoch, doc="Global epoch of the last publish.")
    size = property(lambda self: self._store.size, doc="Points on all shards after the last publish.")
    pending = property(lambda self: self._store.pending, doc="Updates pushed on this rank, not yet published.")
    dim = property(lambda self: self._store.dim)
    attribute_words = property(lambda self: self._store.attribute_words, doc="32-bit attribute words per point.")
    shard_size = property(lambda self: self._store.shard_size, doc="Points on this rank's shard.")
    backend_name = property(lambda self: self._store.backend_name)

    def __len__(self):
        return self.size

    def __repr__(self):
        return f"DistributedReferenceSet(rank={self.rank} of {self.ranks}, size={self.size}, epoch={self.epoch})"
