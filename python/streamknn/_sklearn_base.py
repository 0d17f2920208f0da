"""The shared half of the scikit-learn estimators: scikit-learn's constructor, metrics, input
conversion, the reference set behind an estimator, kneighbors / kneighbors_graph, and the
aggregation of the neighbours' targets, on the host with scikit-learn's arithmetic (float64
targets, every weighting, multi-output), so predictions are scikit-learn's for the same neighbours.

Metrics (``metric`` with ``p`` and ``metric_params``) map to the library's as follows:

* 'euclidean', 'l2', 'minkowski' with p=2: the library's 'l2'.
* 'cosine': the library's inner product over rows normalised here in float64, distance
  1 - <q/|q|, x/|x|> clipped to [0, 2]. A zero vector has no direction: it is kept as a zero row,
  so its distance to every row is 1, which is what scikit-learn's cosine_distances gives.
* 'haversine': (latitude, longitude) in radians in and out, the library's degrees and metres
  inside; fitting other widths works, queries then fail, as scikit-learn's brute force does.
* 'ip' / 'inner_product': the library's inner product, reported as -<q, x> (not a metric:
  weights='distance' is refused with it).
"""

import inspect
import numbers
import os
import warnings

import numpy as np
from scipy import sparse
from sklearn.base import BaseEstimator
from sklearn.utils.validation import assert_all_finite, check_array, check_is_fitted

try:  # scikit-learn >= 1.6: a function (BaseEstimator._validate_data was removed in 1.6)
    from sklearn.utils.validation import validate_data as _sklearn_validate_data
except ImportError:  # scikit-learn < 1.6: the estimator's method
    _sklearn_validate_data = None
try:  # isinstance / issubclass checks of scikit-learn's own code see a k-neighbours estimator
    from sklearn.neighbors._base import KNeighborsMixin as _KNeighborsMixin
except ImportError:  # pragma: no cover - a layout this package was not tested against
    _KNeighborsMixin = object

from . import _streamknn

_HAVERSINE_IN = 180.0 / np.pi                          # radians -> degrees
_HAVERSINE_OUT = 1.0 / _streamknn.earth_radius_metres  # metres -> radians of arc
# scikit-learn metric name -> the library's kind (see the module docstring)
_METRICS = {"euclidean": "l2", "l2": "l2", "minkowski": "l2", "cosine": "cosine", "haversine": "haversine",
            "ip": "ip", "inner_product": "ip"}
_ALGORITHMS = ("auto", "ball_tree", "kd_tree", "brute")
_STORE_METRIC = {"l2": "l2", "cosine": "ip", "haversine": "haversine", "ip": "ip"}
_FLOATS = [np.float32, np.float64]
# fit leaves scikit-learn's finiteness pass out: the library tests every float of the rows as it
# copies them into the reference set (NaN, +-inf and magnitudes beyond its bound), and refuses
# them with InvalidArgument, a ValueError naming the row and the value, before the estimator
# changes. The pass read the rows a second time (a tenth of a fit of 100,000 x 32 float32 rows, a
# third of one of float64 rows).
_LIBRARY_CHECKS_ROWS = ({"ensure_all_finite": False} if "ensure_all_finite" in inspect.signature(check_array).parameters
                        else {"force_all_finite": False})
_PARTIAL_FIT_QUEUE = 8192  # rows partial_fit queues before it publishes (a larger batch publishes in parts)


def _validate_data(estimator, X, y="no_validation", **check_params):
    """scikit-learn's input validation (check_array / check_X_y, n_features_in_ and
    feature_names_in_ set at reset=True and checked otherwise), on every supported version."""
    if _sklearn_validate_data is not None:
        return _sklearn_validate_data(estimator, X, y, **check_params)
    return estimator._validate_data(X, y, **check_params)


def _dense_limit_bytes():
    """How large a densified sparse input may be: half the memory available now (8 GiB where
    the system does not say)."""
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def _densify(X, kind, what):
    """X itself, or a sparse X as a dense float32 array once it is known to fit in memory (the
    library searches dense vectors)."""
    if not sparse.issparse(X):
        return X
    if kind == "haversine":
        raise ValueError("Metric 'haversine' not valid for sparse input.")
    need, limit = X.shape[0] * X.shape[1] * 4, _dense_limit_bytes()
    if need > limit:
        raise ValueError(
            f"{what}: sparse input of shape {X.shape} ({X.nnz} stored values) would densify to "
            f"{need / 2**30:.1f} GiB of float32, more than the {limit / 2**30:.1f} GiB allowed (half the "
            "available memory); streamknn searches dense vectors: reduce the features first "
            "(e.g. TruncatedSVD) or pass fewer rows")
    return X.astype(np.float32).toarray()


def _as_input_error(message):
    """The library's refusal of a fit's row, led by scikit-learn's words for what it found
    ("Input X contains NaN." and the like, which callers and scikit-learn's checks match)."""
    found = ("NaN" if "NaN" in message else "infinity" if "Inf" in message
             else "a value too large" if "exceeds the bound" in message else None)
    return f"Input X contains {found}: {message}" if found else message


def _fitted_rows(X):
    """The training rows of a fitted neighbours estimator (scikit-learn's or streamknn's) or of a
    BallTree / KDTree, else None (X is data)."""
    if hasattr(X, "_fit_X") and hasattr(X, "n_samples_fit_"):
        return X._fit_X
    if type(X).__name__ in ("BallTree", "KDTree") and hasattr(X, "data"):
        return np.asarray(X.data)
    return None


def _get_weights(dist, weights):
    """scikit-learn's neighbour weights: None for uniform, 1/d (rows with a zero distance give
    their zero-distance neighbours weight 1 and the others 0), or weights(dist)."""
    if weights in (None, "uniform"):
        return None
    if weights == "distance":
        with np.errstate(divide="ignore"):
            dist = 1.0 / dist
        inf_mask = np.isinf(dist)
        inf_row = np.any(inf_mask, axis=1)
        dist[inf_row] = inf_mask[inf_row]
        return dist
    return weights(dist)


def _check_k(k, name="n_neighbors"):
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"{name} does not take {type(k).__name__} value, enter integer value")
    if k <= 0:
        raise ValueError(f"Expected {name} > 0. Got {k}")
    if k > _streamknn.max_k:
        raise ValueError(f"Expected {name} in [1, {_streamknn.max_k}], got {k}")


class _MultiOutputTags:
    """Tags of the supervised estimators: multi-output targets, sparse input. Both spellings in
    one class (scikit-learn's check_estimator_tags_renamed looks for __sklearn_tags__ next to
    _more_tags): __sklearn_tags__ for scikit-learn >= 1.6, _more_tags for older versions (1.6
    ignores it when __sklearn_tags__ is defined)."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.input_tags.sparse = True
        return tags

    def _more_tags(self):
        return {"multioutput": True}


class _StreamNeighborsCore(BaseEstimator):
    """scikit-learn's constructor and k-neighbours search over a streamknn reference set (the radius
    estimators derive from this, not from scikit-learn's KNeighborsMixin)."""

    def __init__(self, n_neighbors=5, *, weights="uniform", algorithm="auto", leaf_size=30, metric="minkowski",
                 p=2, metric_params=None, n_jobs=None, backend="auto"):
        self.n_neighbors = n_neighbors
        self.weights = weights
        self.algorithm = algorithm
        self.leaf_size = leaf_size
        self.metric = metric
        self.p = p
        self.metric_params = metric_params
        self.n_jobs = n_jobs
        self.backend = backend

    # ---- parameters -------------------------------------------------------------------------------
    def _metric_kind(self):
        """The library kind of (metric, p, metric_params); ValueError naming what is supported."""
        metric = self.metric
        if not isinstance(metric, str) or metric not in _METRICS:
            raise ValueError(
                f"metric={metric!r} is not supported: streamknn searches exactly with "
                f"{sorted(_METRICS)} (callables, 'precomputed' and other metrics are not supported)")
        params = {} if self.metric_params is None else self.metric_params
        if not isinstance(params, dict):
            raise ValueError(f"metric_params={params!r} is not supported (None or a dict)")
        p = self.p
        if "p" in params:
            if p is not None:
                warnings.warn("Parameter p is found in metric_params. The corresponding parameter from "
                              "__init__ is ignored.", SyntaxWarning, stacklevel=4)
            p = params["p"]
        other = sorted(set(params) - {"p"})
        if other:
            raise ValueError(f"metric_params keys {other} are not supported (only 'p', which must be 2)")
        if p is not None and (isinstance(p, bool) or not isinstance(p, numbers.Real) or not p > 0):
            raise ValueError(f"p={p!r} is not supported (a number > 0; 2 with metric='minkowski')")
        if metric == "minkowski" and p not in (None, 2):
            raise ValueError(f"metric='minkowski' needs p=2 (Euclidean), got p={p!r}: streamknn supports "
                             "no other Minkowski distance")
        return _METRICS[metric]

    def _check_params(self):
        if self.algorithm not in _ALGORITHMS:
            raise ValueError(f"algorithm={self.algorithm!r} is not supported (choose one of {list(_ALGORITHMS)}; "
                             "every one runs streamknn's exact search)")
        if isinstance(self.leaf_size, bool) or not isinstance(self.leaf_size, numbers.Integral) \
                or self.leaf_size < 1:
            raise ValueError(f"leaf_size={self.leaf_size!r} is not supported (an integer >= 1; it changes nothing)")
        if self.backend not in ("auto", "cpu", "cuda"):
            raise ValueError(f"backend={self.backend!r} is not supported (choose 'auto', 'cpu' or 'cuda')")
        if self.n_neighbors is not None:
            _check_k(self.n_neighbors)
        self._cpu_threads()
        kind = self._metric_kind()
        weights = getattr(self, "weights", None)
        if not (weights in (None, "uniform", "distance") or callable(weights)):
            raise ValueError(f"weights={weights!r} is not supported (choose 'uniform', 'distance', None "
                             "or a callable)")
        if weights == "distance" and kind == "ip":
            raise ValueError(f"weights='distance' needs non-negative distances; metric={self.metric!r} "
                             "reports -<q, x>")
        return kind

    def _cpu_threads(self):
        """The reference set's cpu_threads for n_jobs, with joblib's meaning of negative values
        (-1: every hardware thread, -2: all but one, ...); capped at the library's maximum."""
        n_jobs = self.n_jobs
        if n_jobs is None:
            return 0
        if isinstance(n_jobs, bool) or not isinstance(n_jobs, numbers.Integral) or n_jobs == 0:
            raise ValueError(f"n_jobs={n_jobs!r} is not supported (None, a positive count, or -1, -2, ... "
                             f"for all hardware threads, all but one, ...)")
        if n_jobs == -1:
            return 0
        if n_jobs < 0:
            return max(1, (os.cpu_count() or 1) + 1 + int(n_jobs))
        return min(int(n_jobs), _streamknn.max_cpu_threads)

    # ---- data -------------------------------------------------------------------------------------
    def _rows(self, X, kind=None):
        """X in the library's units (of the metric kind `kind`, else the fitted one): degrees for
        haversine, unit rows for cosine, else X itself (the binding reads float32 and C-ordered
        float64 rows in place, rounding each value once as it stores it)."""
        kind = kind or self._kind
        if kind == "haversine":
            return np.ascontiguousarray(np.asarray(X, dtype=np.float64) * _HAVERSINE_IN, dtype=np.float32)
        if kind == "cosine":
            X = np.asarray(X, dtype=np.float64)
            norms = np.sqrt(np.einsum("ij,ij->i", X, X))
            norms[norms == 0] = 1.0  # a zero vector stays zero: distance 1 to everything
            return np.ascontiguousarray(X / norms[:, None], dtype=np.float32)
        return X

    def _load_rows(self, X, kind=None):
        """(metric kind, reference set) of validated rows X (ids 0..n-1), one batch, one publish;
        the set is None for haversine rows of another width (as scikit-learn's brute force: the
        queries then fail). `kind`: _check_params()'s, where the caller has checked the
        parameters already (checked once: a metric_params warning is given once). The library
        checks every row here (InvalidArgument names the first bad one); nothing of the estimator
        changes, so a refused refit leaves the fitted estimator as it was."""
        kind = self._check_params() if kind is None else kind
        if X.shape[0] == 0:
            raise ValueError("n_samples must be greater than 0")
        if kind == "cosine" or (kind == "haversine" and X.shape[1] != 2):
            # Rows normalised here would turn an infinity into NaN before the library sees it;
            # rows of the wrong width reach no library check.
            assert_all_finite(X, input_name="X")
        if kind == "haversine" and X.shape[1] != 2:
            return kind, None
        try:
            return kind, _streamknn.ReferenceSet.from_points(
                np.arange(X.shape[0], dtype=np.uint64), self._rows(X, kind), metric=_STORE_METRIC[kind],
                backend=self.backend, queue_capacity=_PARTIAL_FIT_QUEUE, cpu_threads=self._cpu_threads())
        except _streamknn.InvalidArgument as refused:
            raise ValueError(_as_input_error(str(refused))) from refused

    def _fit_rows(self, X, loaded):
        """The estimator fitted on validated rows X and what _load_rows made of them. The points
        carry no targets: predictions aggregate the neighbours' targets on the host, with
        scikit-learn's arithmetic in float64."""
        self._kind, store = loaded
        self._fit_metric = self.metric
        self._fit_X = X
        self.n_samples_fit_ = X.shape[0]
        self._fit_method = "brute"
        self.effective_metric_ = "euclidean" if self._kind == "l2" else self.metric
        self.effective_metric_params_ = {}
        self._store = store  # one step, no update queue; partial_fit pushes through a small one
        return self

    def _append_rows(self, X):
        """partial_fit: rows X appended with ids n_samples_fit_.., published together."""
        if self._store is None:
            raise ValueError("Haversine distance only valid in 2 dimensions")
        ids = np.arange(self.n_samples_fit_, self.n_samples_fit_ + X.shape[0], dtype=np.uint64)
        self._store.insert(ids, self._rows(X))
        report = self._store.publish()
        if report.rejected:  # ids are fresh row numbers: a rejection is a bug, never user error
            raise RuntimeError(f"streamknn: internal error, the reference set rejected {report.rejected[:3]}")
        self._fit_X = np.concatenate([self._fit_X, X])
        self.n_samples_fit_ = self._fit_X.shape[0]

    def _validate_X(self, X, *, reset):
        """X validated as scikit-learn does (sparse densified), or a fitted estimator's rows."""
        rows = _fitted_rows(X) if reset else None
        if rows is not None:
            rows = _densify(rows, self._metric_kind(), f"{type(self).__name__}.fit")
            rows = np.ascontiguousarray(rows) if rows.dtype in _FLOATS else np.ascontiguousarray(rows, np.float32)
            self.n_features_in_ = rows.shape[1]
            return rows
        checks = _LIBRARY_CHECKS_ROWS if reset else {}  # a fit's rows: _load_rows checks them
        X = _validate_data(self, X, reset=reset, accept_sparse="csr", dtype=_FLOATS, **checks)
        return _densify(X, self._metric_kind(), type(self).__name__)

    # ---- queries ----------------------------------------------------------------------------------
    def _search(self, rows, k):
        """(distances float64 in scikit-learn's units, indices int64) of rows already in the
        library's units."""
        if self._store is None:
            raise ValueError("Haversine distance only valid in 2 dimensions")
        dist, ids, _ = self._store.search(rows, k)
        dist = dist.astype(np.float64)
        if self._kind == "cosine":
            np.clip(dist + 1.0, 0.0, 2.0, out=dist)
        elif self._kind == "haversine":
            dist *= _HAVERSINE_OUT
        return dist, ids.astype(np.int64)

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """Indices of (and distances to) the n_neighbors nearest training rows of each query.

        As scikit-learn: X=None queries the training rows themselves, each excluding itself.
        Distances are float64 (radians for haversine); indices are int64 training-row numbers.
        """
        check_is_fitted(self)
        k = self.n_neighbors if n_neighbors is None else n_neighbors
        _check_k(k)
        query_is_train = X is None
        if query_is_train:
            X, search_k = self._fit_X, k + 1
        else:
            X, search_k = self._validate_X(X, reset=False), k
        if search_k > self.n_samples_fit_:
            raise ValueError(f"Expected n_neighbors <= n_samples_fit, but n_neighbors = {search_k}, "
                             f"n_samples_fit = {self.n_samples_fit_}, n_samples = {X.shape[0]}")
        if self._kind == "haversine" and X.shape[1] != 2:
            raise ValueError("Haversine distance only valid in 2 dimensions")
        dist, ind = self._search(self._rows(X), search_k)
        if query_is_train:
            # Drop each row's own index, or (duplicates) its first neighbour, as scikit-learn does.
            keep = ind != np.arange(ind.shape[0])[:, None]
            keep[keep.all(axis=1), 0] = False
            ind = ind[keep].reshape(ind.shape[0], k)
            dist = dist[keep].reshape(dist.shape[0], k)
        return (dist, ind) if return_distance else ind

    def kneighbors_graph(self, X=None, n_neighbors=None, mode="connectivity"):
        """The k-neighbours graph as a scipy CSR matrix (n_queries, n_samples_fit): ones
        (mode='connectivity') or distances (mode='distance'), as scikit-learn's."""
        check_is_fitted(self)
        if n_neighbors is None:
            n_neighbors = self.n_neighbors
        if mode == "connectivity":
            ind = self.kneighbors(X, n_neighbors, return_distance=False)
            data = np.ones(ind.size)
        elif mode == "distance":
            data, ind = self.kneighbors(X, n_neighbors, return_distance=True)
            data = np.ravel(data)
        else:
            raise ValueError('Unsupported mode, must be one of "connectivity", or "distance" but got '
                             f'"{mode}" instead')
        n_queries = ind.shape[0]
        indptr = np.arange(0, n_queries * n_neighbors + 1, n_neighbors)
        return sparse.csr_matrix((data, ind.ravel(), indptr), shape=(n_queries, self.n_samples_fit_))

    def _neighbour_weights(self, X):
        """(indices, weights or None) of X's n_neighbors nearest rows, weighted as scikit-learn."""
        if self.weights in (None, "uniform"):
            return self.kneighbors(X, return_distance=False), None
        dist, ind = self.kneighbors(X)
        return ind, _get_weights(dist, self.weights)

    # ---- pickling: the reference set travels as a checkpoint (docs/durability.md) ----------------
    def __getstate__(self):
        state = dict(super().__getstate__())
        store = state.pop("_store", None)
        if store is not None:
            state["_store_checkpoint"] = store.to_bytes()
        return state

    def __setstate__(self, state):
        state = dict(state)
        checkpoint = state.pop("_store_checkpoint", None)
        super().__setstate__(state)
        self._store = None
        if checkpoint is not None:
            # On the backend the estimator asks for here ('auto': a GPU where one is usable), with
            # this machine's threads: the points, targets and epoch are the pickled store's.
            self._store = _streamknn.ReferenceSet.from_bytes(
                checkpoint, backend=self.backend, cpu_threads=self._cpu_threads())


class _StreamNeighborsBase(_StreamNeighborsCore, _KNeighborsMixin):
    """The k-neighbours estimators' base: scikit-learn's isinstance checks see a KNeighborsMixin (after
    the core in the method order, so that kneighbors is streamknn's)."""
