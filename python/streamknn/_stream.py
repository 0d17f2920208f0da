"""River-style streaming k-NN over a sliding window: SlidingWindowKNNClassifier and
SlidingWindowKNNRegressor.

The model keeps the last ``window_size`` learned points (every point when window_size is None)
in a streamknn ReferenceSet. Point number i of the stream (counting every learned point from 0)
is stored under id i, and a query asked after n points were learned sees exactly the ids in
[max(0, n - window_size), n): the window is exact even while erasures of old points are still
queued. These are the semantics of the command-line runner (``streamknn run``, docs/runner.md):
same k, weights, metric and window give the same predictions, point for point.

Verbs, as River's (``x`` is a dict {feature: value}):

* ``learn_one(x, y)``, ``predict_one(x)``, ``predict_proba_one(x)`` (classifier);
* ``learn_many(X, y)`` = ``learn_one`` on each row in order;
* ``predict_many(X)`` / ``predict_proba_many(X)`` = ``predict_one`` on each row (nothing is
  learned in between, so the rows share one window);
* ``predict_then_learn_many(X, y)``: test-then-train on a batch, the command-line runner's
  semantics: row i is predicted on the window [n + i - window_size, n + i) (so it sees the
  earlier rows of the same batch, never itself or later ones), then every row is learned. The
  predictions equal ``[predict_one(x) then learn_one(x, y) for each row]``, in one search.

Features: the first learned ``x`` fixes the feature order (or pass ``features=``). A feature
missing from a later ``x`` counts as 0.0 (River's convention); an unknown feature raises
ValueError. X for the ``*_many`` calls is a list of dicts or a 2-D array whose columns follow
``features`` (for an array learned first, the features are its column numbers 0..d-1).

Edge cases (documented, not accidents): before anything is learned, ``predict_one`` returns
None (classifier) or NaN (regressor) and ``predict_proba_one`` returns {}. Probabilities are
reported for every class seen so far, 0.0 for classes that are no longer in the window.
"""

import math
import numbers

import numpy as np

from . import _streamknn
from ._arrays import queue_capacity_for


def _is_number(value):
    return isinstance(value, numbers.Number)


class _SlidingWindowKNN:
    """Shared window bookkeeping; see the module docstring."""

    def __init__(self, n_neighbors, window_size, metric, backend, features):
        if isinstance(n_neighbors, bool) or not isinstance(n_neighbors, int) or not 1 <= n_neighbors <= _streamknn.max_k:
            raise ValueError(f"n_neighbors must be an integer in [1, {_streamknn.max_k}], got {n_neighbors!r}")
        if window_size is not None and (isinstance(window_size, bool) or not isinstance(window_size, int)
                                        or window_size < 1):
            raise ValueError(f"window_size must be a positive integer or None (every point), got {window_size!r}")
        if backend not in ("auto", "cpu", "cuda"):
            raise ValueError(f"backend must be 'auto', 'cpu' or 'cuda', got {backend!r}")
        self.n_neighbors = n_neighbors
        self.window_size = window_size
        self.metric = metric
        self.backend = backend
        self._features = None
        self._feature_index = None
        self._store = None
        self._model = None
        self._n = 0          # points learned so far = the id of the next one
        self._dirty = False  # updates queued since the last publish
        if features is not None:
            self._set_features(list(features))

    # ---- features -----------------------------------------------------------------------------------
    @property
    def features(self):
        """Feature order (None until the first learned point fixes it)."""
        return None if self._features is None else list(self._features)

    @property
    def n_learned(self):
        """Points learned since the model was created (the id the next one gets)."""
        return self._n

    def _set_features(self, features):
        if len(features) == 0:
            raise ValueError("the feature list is empty")
        if len(set(features)) != len(features):
            raise ValueError(f"duplicate feature names in {features}")
        self._features = features
        self._feature_index = {f: j for j, f in enumerate(features)}

    def _vector(self, x):
        unknown = [f for f in x if f not in self._feature_index]
        if unknown:
            raise ValueError(f"unknown features {unknown[:5]} (the model's features are {self._features[:10]})")
        v = np.zeros(len(self._features), dtype=np.float32)
        for f, value in x.items():
            v[self._feature_index[f]] = value
        return v

    def _matrix(self, X, learning):
        """X (list of dicts or 2-D array) as a float32 (n, d) array; fixes features if learning first."""
        if isinstance(X, np.ndarray) or (len(X) and not isinstance(X[0], dict)):
            M = np.ascontiguousarray(X, dtype=np.float32)
            if M.ndim != 2:
                raise ValueError(f"X must be 2-D (n, n_features) or a list of dicts, got shape {M.shape}")
            if self._features is None:
                if not learning:
                    return M
                self._set_features(list(range(M.shape[1])))
            if M.shape[1] != len(self._features):
                raise ValueError(f"X has {M.shape[1]} columns but the model has {len(self._features)} features")
            return M
        rows = list(X)
        if self._features is None:
            if not learning or not rows:
                return None
            self._set_features(list(rows[0].keys()))
        M = np.empty((len(rows), len(self._features)), dtype=np.float32)
        for i, x in enumerate(rows):
            M[i] = self._vector(x)
        return M

    # ---- store --------------------------------------------------------------------------------------
    def _target_kwargs(self):
        raise NotImplementedError

    def _make_model(self):
        raise NotImplementedError

    def _new_store(self):
        d = len(self._features)
        kwargs = self._target_kwargs()
        held = self.window_size or 1 << 16
        self._store = _streamknn.ReferenceSet(
            d, self.metric, backend=self.backend, capacity_hint=min(held, 1 << 20),
            queue_capacity=queue_capacity_for(2 * held, d + kwargs.get("n_outputs", 0)), **kwargs)
        self._model = self._make_model()

    def _publish(self):
        if self._dirty:
            report = self._store.publish()
            self._dirty = False
            if report.rejected:  # ids are arrival numbers: a rejection is a bug, never user error
                raise RuntimeError(f"streamknn: internal error, the window rejected {report.rejected[:3]}")

    # ---- pickling: the window's store travels as a checkpoint (docs/durability.md) -------------
    def __getstate__(self):
        self._publish()  # a checkpoint holds the published snapshot: nothing may stay queued
        state = dict(self.__dict__)
        store = state.pop("_store", None)
        state.pop("_model", None)
        state["_store_checkpoint"] = None if store is None else store.to_bytes()
        return state

    def __setstate__(self, state):
        state = dict(state)
        checkpoint = state.pop("_store_checkpoint", None)
        self.__dict__.update(state)
        self._store = None if checkpoint is None else _streamknn.ReferenceSet.from_bytes(checkpoint,
                                                                                         backend=self.backend)
        self._model = None if self._store is None else self._make_model()

    def _insert(self, M, targets):
        """Stores rows M as the next ids; returns the first id."""
        if self._store is None:
            self._new_store()
        first = self._n
        self._store.insert(np.arange(first, first + len(M), dtype=np.uint64), M, targets)
        self._dirty = True
        return first

    def _window_start(self, n):
        """First id a query asked after n learned points may see."""
        return 0 if self.window_size is None else max(0, n - self.window_size)

    def _evict(self, upto):
        """Erases the stored ids that left the window once upto points are learned."""
        lo, hi = self._window_start(self._n), self._window_start(upto)
        if hi > lo:
            self._store.erase(np.arange(lo, hi, dtype=np.uint64))
            self._dirty = True

    def _ranges(self, ends):
        """[window start, end) for each end (uint64 (n, 2))."""
        ends = np.asarray(ends, dtype=np.int64)
        starts = np.zeros_like(ends) if self.window_size is None else np.maximum(ends - self.window_size, 0)
        return np.stack([starts, ends], axis=1).astype(np.uint64)

    def _store_rows(self, M, targets, advance):
        """Inserts rows M as the next ids; with advance, also moves the window past them."""
        self._insert(M, targets)
        if advance:
            self._advance(self._n + len(M))

    def _advance(self, n):
        """The window now ends at n: erase what left it."""
        self._evict(n)
        self._n = n

    def _predict_then_learn(self, X, y, predict):
        """Shared test-then-train: learn the rows, search each on its own causal window, then
        move the window past them. predict(M, visible, asked_at) returns the predictions."""
        M = self._matrix(X, learning=True)
        if M is None:
            return []
        if len(y) != len(M):
            raise ValueError(f"X has {len(M)} rows but y has {len(y)}")
        base = self._n
        self._learn_rows(M, y, advance=False)
        self._publish()
        asked_at = base + np.arange(len(M))
        out = predict(M, self._ranges(asked_at), asked_at)
        self._advance(base + len(M))
        return out

    def learn_one(self, x, y):
        """Learns one point: x a dict {feature: value}, y its class / target."""
        if self._features is None:
            self._set_features(list(x.keys()))
        self._learn_rows(self._vector(x)[None, :], [y], advance=True)
        return self

    def learn_many(self, X, y):
        """learn_one on every row of X (list of dicts or 2-D array) with targets y, in order."""
        M = self._matrix(X, learning=True)
        if M is None:
            return self
        y = list(y) if not isinstance(y, np.ndarray) else y
        if len(y) != len(M):
            raise ValueError(f"X has {len(M)} rows but y has {len(y)}")
        self._learn_rows(M, y, advance=True)
        return self

    def _query(self, X):
        """(M, visible) for predicting X on the current window, or (None, n) before any learning."""
        M = self._matrix(X, learning=False)
        if M is None or self._store is None:
            return None, len(X)
        self._publish()
        return M, self._ranges(np.full(len(M), self._n))


class SlidingWindowKNNClassifier(_SlidingWindowKNN):
    """Streaming k-NN classifier over the last ``window_size`` points (River-style API).

    Parameters
    ----------
    n_neighbors : int, default=5
    window_size : int or None, default=1000
        Points a prediction may use (the most recent ones); None: every point learned so far.
    weights : {'uniform', 'distance'}, default='uniform'
        'distance': 1/distance votes, neighbours at distance 0 take all the weight.
    metric : {'l2', 'ip', 'cosine', 'haversine'}, default='l2'
        As streamknn.ReferenceSet (haversine: (latitude, longitude) in degrees).
    backend : {'auto', 'cpu', 'cuda'}, default='auto'
    classes : list, optional
        The classes in label order (a vote tie goes to the earlier one); classes that are not
        listed are appended as they appear.
    features : list, optional
        Feature order; by default the keys of the first learned x.

    Class order, which decides vote ties (the tie goes to the class numbered first), follows the
    command-line runner: while every class seen is a number, classes are numbered in ascending
    order (as scikit-learn does); otherwise in order of first appearance. A number that arrives
    later and sorts before known classes renumbers the window (the store is rebuilt from it:
    O(window) once per such class), as does outgrowing the store's class capacity (doubling).
    """

    def __init__(self, n_neighbors=5, window_size=1000, *, weights="uniform", metric="l2",
                 backend="auto", classes=None, features=None):
        if weights not in ("uniform", "distance"):
            raise ValueError(f"weights must be 'uniform' or 'distance', got {weights!r}")
        super().__init__(n_neighbors, window_size, metric, backend, features)
        self.weights = weights
        self._classes = []       # class per label number
        self._class_index = {}   # class -> label number
        self._first_seen = {}    # class -> arrival number of its first point (-1: given)
        self._numeric = classes is None  # numbering classes in ascending order
        self._capacity = 0       # n_classes of the store
        self._kept_X = None      # the window's vectors and labels by id (a ring when bounded),
        self._kept_y = None      # to renumber classes
        if classes is not None:
            self._add_classes(list(classes), None)

    @property
    def classes(self):
        """Classes seen so far (or given), in label order."""
        return list(self._classes)

    # ---- classes --------------------------------------------------------------------------------------
    def _add_classes(self, new, first_seen_at):
        """Adds unseen classes (in order of appearance); renumbers the window when needed."""
        fresh = [c for c in dict.fromkeys(new) if c not in self._class_index]
        if not fresh:
            return
        for j, c in enumerate(fresh):
            self._first_seen[c] = -1 if first_seen_at is None else first_seen_at[j]
        self._numeric = self._numeric and all(_is_number(c) for c in fresh)
        ordered = sorted(self._classes + fresh) if self._numeric else self._classes + fresh
        renumber = ordered[: len(self._classes)] != self._classes
        old_index = self._class_index
        self._classes = ordered
        self._class_index = {c: j for j, c in enumerate(ordered)}
        if self._store is not None and (renumber or len(ordered) > self._capacity):
            remap = np.array([self._class_index[c] for c in sorted(old_index, key=old_index.get)], dtype=np.int32)
            self._rebuild(remap)

    def _target_kwargs(self):
        self._capacity = max(2, 1 << max(0, len(self._classes) - 1).bit_length())
        return {"n_classes": self._capacity}

    def _make_model(self):
        return _streamknn.KnnClassifier(self._store, self.n_neighbors, self.weights)

    def _slots(self, ids):
        return ids if self.window_size is None else ids % self.window_size

    def _keep(self, first, M, labels):
        """Remembers rows first.. (the last window_size of them) for a later renumbering."""
        if self._kept_X is None:
            rows = self.window_size or max(1024, len(M))
            self._kept_X = np.zeros((rows, M.shape[1]), dtype=np.float32)
            self._kept_y = np.zeros(rows, dtype=np.int32)
        if self.window_size is None and first + len(M) > len(self._kept_X):
            rows = max(2 * len(self._kept_X), first + len(M))
            self._kept_X = np.resize(self._kept_X, (rows, M.shape[1]))
            self._kept_y = np.resize(self._kept_y, rows)
        tail = slice(max(0, len(M) - (self.window_size or len(M))), len(M))
        slots = self._slots(np.arange(first, first + len(M))[tail])
        self._kept_X[slots], self._kept_y[slots] = M[tail], labels[tail]

    def _rebuild(self, remap):
        ids = np.arange(self._window_start(self._n), self._n, dtype=np.int64)
        slots = self._slots(ids)
        self._kept_y[slots] = remap[self._kept_y[slots]]
        self._new_store()
        if len(ids):
            self._store.insert(ids.astype(np.uint64), self._kept_X[slots], self._kept_y[slots])
        self._dirty = True

    def _learn_rows(self, M, y, advance):
        y = list(y)
        fresh = [c for c in dict.fromkeys(y) if c not in self._class_index]
        if fresh:
            self._add_classes(fresh, [self._n + y.index(c) for c in fresh])
        labels = np.fromiter((self._class_index[c] for c in y), dtype=np.int32, count=len(y))
        self._keep(self._n, M, labels)
        self._store_rows(M, labels, advance)

    # ---- predictions ---------------------------------------------------------------------------------
    def _proba_dicts(self, proba, asked_at):
        """One {class: p} per row, over the classes seen before that row was asked."""
        out = []
        for row, n in zip(proba, asked_at):
            out.append({c: float(row[j]) for j, c in enumerate(self._classes) if self._first_seen[c] < n})
        return out

    def _label(self, label):
        return None if label < 0 else self._classes[label]

    def predict_proba_one(self, x):
        """{class: probability} over the classes seen so far ({} before anything is learned)."""
        return self.predict_proba_many([x])[0]

    def predict_one(self, x):
        """The predicted class, or None before anything is learned."""
        return self.predict_many([x])[0]

    def predict_many(self, X):
        """predict_one on each row of X, all on the current window."""
        M, visible = self._query(X)
        if M is None:
            return [None] * visible
        labels, _ = self._model.predict(M, visible)
        return [self._label(int(v)) for v in labels]

    def predict_proba_many(self, X):
        """predict_proba_one on each row of X, all on the current window."""
        M, visible = self._query(X)
        if M is None:
            return [{} for _ in range(visible)]
        _, proba, _ = self._model.predict_proba(M, visible)
        return self._proba_dicts(proba, [self._n] * len(M))

    def predict_then_learn_many(self, X, y, *, proba=False):
        """Test-then-train on a batch (see the module docstring): returns the prediction of each row
        made before it was learned (classes, or {class: p} dicts with proba=True), then learns them.
        Same answers as predict_one (predict_proba_one) then learn_one on each row in turn.
        """
        def predict(M, visible, asked_at):
            if proba:
                _, p, _ = self._model.predict_proba(M, visible)
                return self._proba_dicts(p, asked_at)
            labels, _ = self._model.predict(M, visible)
            return [self._label(int(v)) for v in labels]

        return self._predict_then_learn(X, list(y), predict)


class SlidingWindowKNNRegressor(_SlidingWindowKNN):
    """Streaming k-NN regressor over the last ``window_size`` points (River-style API).

    Parameters
    ----------
    n_neighbors : int, default=5
    window_size : int or None, default=1000
        Points a prediction may use (the most recent ones); None: every point learned so far.
    aggregation_method : {'mean', 'weighted_mean', 'median'}, default='mean'
        As River's KNNRegressor: mean, 1/distance-weighted mean (neighbours at distance 0 take
        all the weight) or median (numpy's) of the neighbours' targets.
    metric, backend, features : as SlidingWindowKNNClassifier.

    ``predict_one`` returns NaN before anything is learned.
    """

    def __init__(self, n_neighbors=5, window_size=1000, *, aggregation_method="mean", metric="l2",
                 backend="auto", features=None):
        if aggregation_method not in ("mean", "weighted_mean", "median"):
            raise ValueError(
                f"aggregation_method must be 'mean', 'weighted_mean' or 'median', got {aggregation_method!r}")
        super().__init__(n_neighbors, window_size, metric, backend, features)
        self.aggregation_method = aggregation_method

    def _target_kwargs(self):
        return {"n_outputs": 1}

    def _make_model(self):
        return _streamknn.KnnRegressor(self._store, self.n_neighbors, self.aggregation_method)

    def _learn_rows(self, M, y, advance):
        values = np.asarray(y, dtype=np.float32).reshape(len(M), 1)
        self._store_rows(M, values, advance)

    def predict_one(self, x):
        """The predicted target (NaN before anything is learned)."""
        return self.predict_many([x])[0]

    def predict_many(self, X):
        """predict_one on each row of X, all on the current window."""
        M, visible = self._query(X)
        if M is None:
            return [math.nan] * visible
        values, _ = self._model.predict(M, visible)
        return [float(v) for v in values[:, 0]]

    def predict_then_learn_many(self, X, y):
        """Test-then-train on a batch (see the module docstring): the prediction of each row made
        before it was learned, then learns them. Same answers as predict_one then learn_one on each
        row in turn."""
        def predict(M, visible, asked_at):
            values, _ = self._model.predict(M, visible)
            return [float(v) for v in values[:, 0]]

        return self._predict_then_learn(X, np.asarray(y, dtype=np.float32).ravel(), predict)
