"""scikit-learn estimators over streamknn: KNeighborsClassifier and KNeighborsRegressor.

Drop-in for scikit-learn's estimators of the same names where the parameters apply
(n_neighbors, weights, metric, p, n_jobs), plus ``backend`` ('auto' | 'cpu' | 'cuda') and
``partial_fit`` (adds samples to the fitted reference set without refitting).

Differences from scikit-learn, all documented in docs/python.md:

* Computation is float32 (inputs are converted once); distances come back as float32.
* Neighbours at equal distance are ordered by training row (the id), so ties go to the earlier
  row; scikit-learn leaves the order of equal distances unspecified.
* metric: 'minkowski' (p=2 only), 'euclidean'/'l2', 'cosine' (zero vectors refused), 'haversine'
  ((latitude, longitude) in radians and distances in radians, as scikit-learn).
* weights: 'uniform' or 'distance' (no callables).
* n_jobs: the CPU backend's search threads, read at fit (None, like -1: every hardware thread,
  as scikit-learn's brute-force search, whose distance kernels use every core whatever n_jobs).
"""

import numbers
import os
import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import DataConversionWarning
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

try:  # scikit-learn >= 1.6: a function (BaseEstimator._validate_data was removed in 1.6)
    from sklearn.utils.validation import validate_data as _sklearn_validate_data
except ImportError:  # scikit-learn < 1.6: the estimator's method
    _sklearn_validate_data = None

from . import _streamknn
from ._arrays import queue_capacity_for

# scikit-learn metric name -> (library metric, scale applied to inputs, scale applied to distances)
_HAVERSINE_IN = 180.0 / np.pi                       # radians -> degrees
_HAVERSINE_OUT = 1.0 / _streamknn.earth_radius_metres  # metres -> radians of arc
_METRICS = {
    "euclidean": "l2",
    "l2": "l2",
    "minkowski": "l2",  # p must be 2
    "cosine": "cosine",
    "haversine": "haversine",
}


def _validate_data(estimator, X, y="no_validation", **check_params):
    """scikit-learn's input validation (check_array / check_X_y, n_features_in_ and
    feature_names_in_ set at reset=True and checked otherwise), on every supported version."""
    if _sklearn_validate_data is not None:
        return _sklearn_validate_data(estimator, X, y, **check_params)
    return estimator._validate_data(X, y, **check_params)


class _StreamKNeighborsBase(BaseEstimator):
    """Shared fit / partial_fit / kneighbors / pickling for the two estimators."""

    def __init__(self, n_neighbors=5, *, weights="uniform", metric="minkowski", p=2, backend="auto",
                 n_jobs=None):
        self.n_neighbors = n_neighbors
        self.weights = weights
        self.metric = metric
        self.p = p
        self.backend = backend
        self.n_jobs = n_jobs

    # ---- parameters -------------------------------------------------------------------------------
    def _library_metric(self):
        if not isinstance(self.metric, str) or self.metric not in _METRICS:
            raise ValueError(
                f"metric={self.metric!r} is not supported (choose one of {sorted(_METRICS)})")
        if self.metric == "minkowski" and self.p != 2:
            raise ValueError(f"metric='minkowski' needs p=2 (Euclidean), got p={self.p!r}")
        return _METRICS[self.metric]

    def _check_params(self):
        if self.weights not in ("uniform", "distance"):
            raise ValueError(f"weights={self.weights!r} is not supported (choose 'uniform' or 'distance')")
        if self.backend not in ("auto", "cpu", "cuda"):
            raise ValueError(f"backend={self.backend!r} is not supported (choose 'auto', 'cpu' or 'cuda')")
        self._check_k(self.n_neighbors, "n_neighbors")
        self._cpu_threads()
        return self._library_metric()

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

    @staticmethod
    def _check_k(k, name):
        if isinstance(k, bool) or not isinstance(k, numbers.Integral):
            raise TypeError(f"{name} does not take {type(k).__name__} value, enter integer value")
        if not 1 <= k <= _streamknn.max_k:
            raise ValueError(f"Expected {name} in [1, {_streamknn.max_k}], got {k}")

    # ---- data -------------------------------------------------------------------------------------
    def _query_rows(self, X):
        """X in the library's units (float32, C order; degrees for haversine)."""
        if self._fit_metric == "haversine":
            X = np.asarray(X, dtype=np.float64) * _HAVERSINE_IN
        return np.ascontiguousarray(X, dtype=np.float32)

    def _target_kwargs(self):
        raise NotImplementedError

    def _encode_targets(self, y):
        raise NotImplementedError

    def _build_store(self, X, targets):
        """A fresh reference set holding rows X (ids 0..n-1) with their encoded targets."""
        metric = self._check_params()
        kwargs = self._target_kwargs()
        width = X.shape[1] + kwargs.get("n_outputs", 0)
        store = _streamknn.ReferenceSet(
            X.shape[1], metric, backend=self.backend, capacity_hint=max(1, X.shape[0]),
            queue_capacity=queue_capacity_for(X.shape[0], width), cpu_threads=self._cpu_threads(), **kwargs)
        self._load(store, 0, X, targets)
        return store

    def _load(self, store, first_id, X, targets):
        ids = np.arange(first_id, first_id + X.shape[0], dtype=np.uint64)
        store.insert(ids, self._query_rows(X), targets)
        report = store.publish()
        if report.rejected:  # ids are fresh row numbers: a rejection is a bug, never user error
            raise RuntimeError(f"streamknn: internal error, the reference set rejected {report.rejected[:3]}")

    def _make_model(self, store):
        raise NotImplementedError

    def _current_model(self):
        """The model for the current n_neighbors / weights (set_params after fit takes effect at
        predict, as in scikit-learn) without changing the estimator's state."""
        if self._model_params == (self.n_neighbors, self.weights):
            return self._model
        self._check_params()
        return self._make_model(self._store)

    def _fit(self, X, y, *, reset):
        targets = self._encode_targets(y)
        if reset:
            self._fit_metric = self.metric  # the units of the stored rows, whatever set_params does later
            self._fit_X = np.ascontiguousarray(X, dtype=np.float32)
            self._y = targets
            self._store = self._build_store(self._fit_X, self._y)
        else:
            rows = np.ascontiguousarray(X, dtype=np.float32)
            self._load(self._store, self._fit_X.shape[0], rows, targets)
            self._fit_X = np.concatenate([self._fit_X, rows])
            self._y = np.concatenate([self._y, targets])
        self._model = self._make_model(self._store)
        self._model_params = (self.n_neighbors, self.weights)
        self.n_samples_fit_ = self._fit_X.shape[0]
        self.effective_metric_ = "euclidean" if _METRICS[self._fit_metric] == "l2" else self._fit_metric
        return self

    # ---- queries ----------------------------------------------------------------------------------
    def _check_query(self, X, n_neighbors=None):
        check_is_fitted(self)
        X = _validate_data(self, X, reset=False, dtype=np.float32, order="C")
        k = self.n_neighbors if n_neighbors is None else n_neighbors
        self._check_k(k, "n_neighbors")
        if k > self.n_samples_fit_:
            raise ValueError(
                f"Expected n_neighbors <= n_samples_fit, but n_neighbors = {k}, "
                f"n_samples_fit = {self.n_samples_fit_}, n_samples = {X.shape[0]}")
        return self._query_rows(X), k

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """Indices of (and distances to) the n_neighbors nearest training rows of each query.

        As scikit-learn: X=None queries the training rows themselves, each excluding itself.
        Distances are float32 (radians for haversine); indices are int64 training-row numbers.
        """
        check_is_fitted(self)
        k = self.n_neighbors if n_neighbors is None else n_neighbors
        self._check_k(k, "n_neighbors")
        query_is_train = X is None
        if query_is_train:
            if k + 1 > self.n_samples_fit_:
                raise ValueError(
                    f"Expected n_neighbors < n_samples_fit when querying the training set, but "
                    f"n_neighbors = {k}, n_samples_fit = {self.n_samples_fit_}")
            rows, search_k = self._query_rows(self._fit_X), k + 1
        else:
            rows, search_k = self._check_query(X, k)
        dist, ids, _ = self._store.search(rows, search_k)
        ind = ids.astype(np.int64)
        if query_is_train:
            # Drop each row's own index, or (duplicates) its first neighbour, as scikit-learn does.
            keep = ind != np.arange(ind.shape[0])[:, None]
            no_self = keep.all(axis=1)
            keep[no_self, 0] = False
            ind = ind[keep].reshape(ind.shape[0], k)
            dist = dist[keep].reshape(dist.shape[0], k)
        if self._fit_metric == "haversine":
            dist = (dist * _HAVERSINE_OUT).astype(np.float32)
        return (dist, ind) if return_distance else ind

    # ---- pickling: the reference set travels as a checkpoint (docs/durability.md) ----------------
    def __getstate__(self):
        state = super().__getstate__()
        state = dict(state)
        store = state.pop("_store", None)
        state.pop("_model", None)
        if store is not None:
            state["_store_checkpoint"] = store.to_bytes()
        return state

    def __setstate__(self, state):
        state = dict(state)
        checkpoint = state.pop("_store_checkpoint", None)
        super().__setstate__(state)
        if checkpoint is not None:
            # On the backend the estimator asks for here ('auto': a GPU where one is usable), with
            # this machine's threads: the points, targets and epoch are the pickled store's.
            self._store = _streamknn.ReferenceSet.from_bytes(
                checkpoint, backend=self.backend, cpu_threads=self._cpu_threads())
        elif "_fit_X" in state:  # a pickle of an older version: rebuilt from the training rows
            self._store = self._build_store(self._fit_X, self._y)
        if "_fit_X" in state:
            self._model = self._make_model(self._store)
            self._model_params = (self.n_neighbors, self.weights)


class KNeighborsClassifier(ClassifierMixin, _StreamKNeighborsBase):
    """k-nearest-neighbour classifier on streamknn (scikit-learn API).

    Parameters
    ----------
    n_neighbors : int, default=5
    weights : {'uniform', 'distance'}, default='uniform'
        'distance' weighs neighbours by 1/distance; neighbours at distance 0 take all the weight.
    metric : {'minkowski', 'euclidean', 'l2', 'cosine', 'haversine'}, default='minkowski'
    p : int, default=2
        Only p=2 (Euclidean) is supported with metric='minkowski'.
    backend : {'auto', 'cpu', 'cuda'}, default='auto'
        'auto' runs on a CUDA device where one is usable, else on the CPU (same answers).
    n_jobs : int, default=None
        Threads a CPU-backend search uses, read at fit: None or -1 every hardware thread, -2 all
        but one (joblib's convention), n > 0 that many (at most 1024). The answers do not depend
        on it; the CUDA backend ignores it.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int
    feature_names_in_ : ndarray of str (when X had string column names)
    n_samples_fit_ : int
    effective_metric_ : str

    ``fit`` stores the rows with ids 0..n-1; ``partial_fit`` appends rows (labels must be among
    ``classes_``, or among ``classes=`` given to the first ``partial_fit``). Equal-distance
    neighbours are ordered by training row. Class ties go to the class that sorts first.
    """

    def _target_kwargs(self):
        return {"n_classes": len(self.classes_)}

    def _encode_targets(self, y):
        encoded = np.searchsorted(self.classes_, y)
        encoded = np.minimum(encoded, len(self.classes_) - 1)
        unknown = self.classes_[encoded] != y
        if np.any(unknown):
            bad = np.unique(np.asarray(y)[unknown])
            raise ValueError(
                f"y contains labels {list(bad[:5])} not in classes_ {list(self.classes_)}; pass every "
                "class with classes= to the first partial_fit call, or fit again")
        return encoded.astype(np.int32)

    def _make_model(self, store):
        return _streamknn.KnnClassifier(store, self.n_neighbors, self.weights)

    def _validate_targets(self, y):
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[1] == 1:
            warnings.warn(
                "A column-vector y was passed when a 1d array was expected. Please change the shape "
                "of y to (n_samples,), for example using ravel().", DataConversionWarning, stacklevel=3)
            y = y.ravel()
        elif y.ndim != 1:
            raise ValueError(f"y must be 1-D (multi-output classification is not supported), got shape {y.shape}")
        check_classification_targets(y)
        return y

    def fit(self, X, y):
        """Fits the reference set on X (n_samples, n_features) and labels y (n_samples,)."""
        self._check_params()
        X, y = _validate_data(self, X, y, dtype=np.float32, order="C", multi_output=True)
        y = self._validate_targets(y)
        self.classes_ = np.unique(y)
        return self._fit(X, y, reset=True)

    def partial_fit(self, X, y, classes=None):
        """Adds rows to the reference set without refitting (the first call fits).

        classes: every label the calls will use (as scikit-learn's SGDClassifier); optional on
        the first call (then the labels of that call), ignored afterwards.
        """
        first = not hasattr(self, "classes_")
        self._check_params()
        X, y = _validate_data(self, X, y, dtype=np.float32, order="C", multi_output=True, reset=first)
        y = self._validate_targets(y)
        if first:
            self.classes_ = np.unique(y) if classes is None else np.unique(np.asarray(classes))
        return self._fit(X, y, reset=first)

    def predict(self, X):
        """Class labels (n_queries,) by (weighted) majority vote of the n_neighbors nearest rows."""
        rows, _ = self._check_query(X)
        labels, _ = self._current_model().predict(rows)
        return self.classes_[labels]

    def predict_proba(self, X):
        """Class probabilities (n_queries, n_classes), columns in the order of classes_."""
        rows, _ = self._check_query(X)
        _, proba, _ = self._current_model().predict_proba(rows)
        return proba.astype(np.float64)

    # Tags. Both spellings in this class (scikit-learn's check_estimator_tags_renamed looks for
    # __sklearn_tags__ next to _more_tags): __sklearn_tags__ for scikit-learn >= 1.6, _more_tags
    # for older versions (1.6 ignores it when __sklearn_tags__ is defined).
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = False  # y is 1-D (a column vector is raveled with a warning)
        return tags

    def _more_tags(self):
        return {"multioutput": False}


class KNeighborsRegressor(RegressorMixin, _StreamKNeighborsBase):
    """k-nearest-neighbour regressor on streamknn (scikit-learn API).

    Parameters as KNeighborsClassifier. y may have several outputs (n_samples, n_outputs);
    'uniform' predicts the mean of the neighbours' targets, 'distance' the 1/distance-weighted
    mean (neighbours at distance 0 take all the weight).

    Attributes: n_features_in_, feature_names_in_, n_samples_fit_, effective_metric_.
    """

    def _target_kwargs(self):
        return {"n_outputs": self._n_outputs}

    def _encode_targets(self, y):
        y = np.asarray(y, dtype=np.float32)
        return np.ascontiguousarray(y.reshape(y.shape[0], -1))

    def _make_model(self, store):
        aggregate = "mean" if self.weights == "uniform" else "weighted_mean"
        return _streamknn.KnnRegressor(store, self.n_neighbors, aggregate)

    def fit(self, X, y):
        """Fits the reference set on X (n_samples, n_features) and y (n_samples[, n_outputs])."""
        self._check_params()
        X, y = _validate_data(self, X, y, dtype=np.float32, order="C", multi_output=True, y_numeric=True)
        self._y_1d = np.ndim(y) == 1
        self._n_outputs = 1 if self._y_1d else y.shape[1]
        return self._fit(X, y, reset=True)

    def partial_fit(self, X, y):
        """Adds rows to the reference set without refitting (the first call fits)."""
        first = not hasattr(self, "n_samples_fit_")
        self._check_params()
        X, y = _validate_data(self, X, y, dtype=np.float32, order="C", multi_output=True, y_numeric=True,
                                   reset=first)
        outputs = 1 if np.ndim(y) == 1 else y.shape[1]
        if first:
            self._y_1d = np.ndim(y) == 1
            self._n_outputs = outputs
        elif outputs != self._n_outputs:
            raise ValueError(f"y has {outputs} outputs but the estimator was fitted with {self._n_outputs}")
        return self._fit(X, y, reset=first)

    def predict(self, X):
        """Predicted targets (n_queries,) or (n_queries, n_outputs), as y was at fit."""
        rows, _ = self._check_query(X)
        values, _ = self._current_model().predict(rows)
        values = values.astype(np.float64)
        return values.ravel() if self._y_1d else values

    # Tags: see KNeighborsClassifier.
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True  # y may be (n_samples, n_outputs)
        return tags

    def _more_tags(self):
        return {"multioutput": True}
