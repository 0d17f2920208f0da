"""KNN-Q: a Q-function stored as states with one Q-value per action, read and written through
their k nearest neighbours (kNN-TD, Martin H. et al.).

    q(s, a)  = mean of Q[j, a] over the k stored states j nearest to s
    update:    delta = target - q(s, a);  Q[j, a] += alpha * delta  for each of those j

``KnnQ.lookup_and_update(states, k, action, target, alpha)`` does the lookup, the per-action
average and the write-back for a batch in one call. Within a batch every estimate is taken on the
snapshot before the call, and the increments of queries that share a neighbour add up (in query
order, on both backends). The writes are published before the call returns.

The call is one library call, ``ReferenceSet::lookup_and_update``: on the CUDA backend the
search, the per-action means and the write-back all run on the device and the write-back is
published through the store's double buffer (a new epoch); on the CPU backend the same steps run
on the host. Only the estimates and the neighbours' ids come back. The ``table`` property is
kept on the host from those results (the same float32 additions in the same order as the library,
so it equals the stored values bit for bit); nothing is read back from the store.
"""

import numpy as np

from . import _streamknn
from ._arrays import queue_capacity_for


class KnnQ:
    """A KNN-Q value function over a streamknn ReferenceSet with one output per action.

    KnnQ(dim, n_actions, *, metric='l2', backend='auto', initial_q=0.0)

    States get ids 0, 1, 2, ... in the order add_states stores them. Only KnnQ may change its
    store (``store`` is exposed for searches and inspection); the Q-table mirror would drift
    otherwise.
    """

    def __init__(self, dim, n_actions, *, metric="l2", backend="auto", initial_q=0.0):
        if isinstance(n_actions, bool) or not isinstance(n_actions, int) or n_actions < 1:
            raise ValueError(f"n_actions must be a positive integer, got {n_actions!r}")
        self.dim = int(dim)
        self.n_actions = n_actions
        self.initial_q = float(initial_q)
        self._store = _streamknn.ReferenceSet(
            self.dim, metric, n_outputs=n_actions, backend=backend,
            queue_capacity=queue_capacity_for(1 << 16, self.dim + n_actions))
        self._q = np.zeros((0, n_actions), dtype=np.float32)  # mirror of the stored Q-values, by id
        self._n = 0

    @property
    def store(self):
        """The underlying ReferenceSet (read-only use: search it, do not update it)."""
        return self._store

    @property
    def n_states(self):
        return self._n

    @property
    def table(self):
        """A copy of the Q-table, (n_states, n_actions), row i = state id i."""
        return self._q[: self._n].copy()

    def add_states(self, states, q_values=None):
        """Stores new states (n, dim) with their Q-values (n, n_actions) (default initial_q) and
        publishes them. Returns their ids (uint64)."""
        states = np.ascontiguousarray(states, dtype=np.float32)
        if states.ndim != 2 or states.shape[1] != self.dim:
            raise ValueError(f"states must have shape (n, {self.dim}), got {states.shape}")
        n = states.shape[0]
        if q_values is None:
            q_values = np.full((n, self.n_actions), self.initial_q, dtype=np.float32)
        q_values = np.ascontiguousarray(q_values, dtype=np.float32).reshape(n, self.n_actions)
        ids = np.arange(self._n, self._n + n, dtype=np.uint64)
        self._store.insert(ids, states, q_values)
        self._checked_publish()
        if self._n + n > len(self._q):
            grown = np.zeros((max(2 * len(self._q), self._n + n, 64), self.n_actions), dtype=np.float32)
            grown[: self._n] = self._q[: self._n]
            self._q = grown
        self._q[self._n: self._n + n] = q_values
        self._n += n
        return ids

    def q_values(self, states, k):
        """Per-action Q estimates (n, n_actions): the mean over each state's k nearest stored
        states (NaN rows where nothing is stored)."""
        values, _ = _streamknn.KnnRegressor(self._store, k, "mean").predict(self._rows(states))
        return values

    def lookup_and_update(self, states, k, action, target, alpha):
        """Lookup, per-action average and Q-value write-back for a batch, in one call.

        states (n, dim); action: int or (n,) ints in [0, n_actions); target: float or (n,) floats;
        alpha: step size. Returns the estimates (n, n_actions) from before the update. For each
        query i with neighbours N_i: delta_i = target_i - q_i[action_i], then
        Q[j, action_i] += alpha * delta_i for every j in N_i (increments of a batch add up).
        """
        rows = self._rows(states)
        n = rows.shape[0]
        action = np.broadcast_to(np.asarray(action), (n,))
        if action.dtype.kind not in "iu" or np.any((action < 0) | (action >= self.n_actions)):
            raise ValueError(f"action must hold integers in [0, {self.n_actions}), got {action[:5]}")
        target = np.broadcast_to(np.asarray(target, dtype=np.float64), (n,))
        if not np.all(np.isfinite(target)) or not np.isfinite(alpha):
            raise ValueError("target and alpha must be finite")
        action = np.ascontiguousarray(action, dtype=np.int32)
        target = np.ascontiguousarray(target, dtype=np.float32)
        q, ids, _ = self._store._lookup_and_update(rows, k, action, target, float(alpha))
        self._mirror(q, ids, action, target, np.float32(alpha))
        return q

    def _mirror(self, q, ids, action, target, alpha):
        """Applies the write-back the library just published to the host copy of the table: the
        same float32 increments, added in the same (query, neighbour) order."""
        n, k = ids.shape
        found = ids != _streamknn.invalid_id
        if not found.any():
            return
        estimate = q[np.arange(n), action]
        increment = alpha * (target - estimate)  # float32, as the library computes it
        np.add.at(self._q, (ids[found].astype(np.int64), np.repeat(action, k).reshape(n, k)[found]),
                  np.repeat(increment, k).reshape(n, k)[found])

    def _rows(self, states):
        rows = np.ascontiguousarray(states, dtype=np.float32)
        if rows.ndim == 1:
            rows = rows[None, :]
        if rows.ndim != 2 or rows.shape[1] != self.dim:
            raise ValueError(f"states must have shape (n, {self.dim}), got {np.shape(states)}")
        return rows

    # ---- pickling: the store travels as a checkpoint (docs/durability.md) ------------------------
    def __getstate__(self):
        state = dict(self.__dict__)
        state["_store"] = self._store.to_bytes()  # every write is published before a call returns
        return state

    def __setstate__(self, state):
        state = dict(state)
        state["_store"] = _streamknn.ReferenceSet.from_bytes(state["_store"])
        self.__dict__.update(state)

    def _checked_publish(self):
        report = self._store.publish()
        if report.rejected:  # ids come from this object only: a rejection is a bug
            raise RuntimeError(f"streamknn: internal error, KnnQ's store rejected {report.rejected[:3]}")
