"""KNN-Q: a Q-function stored as states with one Q-value per action, read and written through
their k nearest neighbours (kNN-TD, Martin H. et al.).

    q(s, a)  = mean of Q[j, a] over the k stored states j nearest to s
    update:    delta = target - q(s, a);  Q[j, a] += alpha * delta  for each of those j

``KnnQ.lookup_and_update(states, k, action, target, alpha)`` does the lookup, the per-action
average and the write-back for a batch in one call. Within a batch every estimate is taken on the
snapshot before the call, and the increments of queries that share a neighbour add up (as the
on-device version's atomic adds do). The writes are published before the call returns.

This is the CPU path, built on the public API: a search for the neighbours' ids, the per-action
mean through KnnRegressor, and set_target + publish for the write-back; a host mirror of the
Q-table supplies the rows set_target rewrites. The one-call on-device version needs a library
entry point (see docs/python.md, "C++ API the bindings need"); the Python signature stays.
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
        regressor = _streamknn.KnnRegressor(self._store, k, "mean")
        while True:  # both reads on one snapshot (another thread may publish in between)
            q, epoch = regressor.predict(rows)
            _, ids, epoch_ids = self._store.search(rows, k)
            if epoch == epoch_ids:
                break
        found = ids != _streamknn.invalid_id
        delta = target - q[np.arange(n), action].astype(np.float64)
        delta = np.where(np.isnan(delta), 0.0, delta)  # a query with no neighbour writes nothing
        step = np.repeat(alpha * delta, k).reshape(n, k)[found]
        touched = ids[found].astype(np.int64)
        cols = np.repeat(action, k).reshape(n, k)[found]
        if touched.size:
            changed, which = np.unique(touched, return_inverse=True)
            increments = np.zeros((changed.size, self.n_actions), dtype=np.float64)
            np.add.at(increments, (which, cols), step)
            new_rows = (self._q[changed].astype(np.float64) + increments).astype(np.float32)
            self._store.set_target(changed.astype(np.uint64), new_rows)
            self._checked_publish()
            self._q[changed] = new_rows
        return q

    def _rows(self, states):
        rows = np.ascontiguousarray(states, dtype=np.float32)
        if rows.ndim == 1:
            rows = rows[None, :]
        if rows.ndim != 2 or rows.shape[1] != self.dim:
            raise ValueError(f"states must have shape (n, {self.dim}), got {np.shape(states)}")
        return rows

    def _checked_publish(self):
        report = self._store.publish()
        if report.rejected:  # ids come from this object only: a rejection is a bug
            raise RuntimeError(f"streamknn: internal error, KnnQ's store rejected {report.rejected[:3]}")
