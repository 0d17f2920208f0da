"""scikit-learn estimators over streamknn: KNeighborsClassifier, KNeighborsRegressor,
NearestNeighbors, KNeighborsTransformer and kneighbors_graph (the radius estimators are in
_sklearn_radius).

Drop-in for scikit-learn's classes of the same names: the same constructor (n_neighbors,
weights, algorithm, leaf_size, metric, p, metric_params, n_jobs), plus ``backend`` ('auto' |
'cpu' | 'cuda') and ``partial_fit`` (adds samples to the fitted reference set without refitting).
``algorithm`` and ``leaf_size`` only change speed in scikit-learn: any valid value is accepted
and the exact search serves it. Options outside the library raise ValueError naming what is
supported (see _sklearn_base for the metrics).

Differences from scikit-learn, all documented in docs/python.md:

* The search runs in float32 (inputs are converted once); distances come back as float64.
* Neighbours at equal distance are ordered by training row (the id), so ties go to the earlier
  row; scikit-learn leaves the order of equal distances unspecified.
* Sparse input is densified (refused where it would not fit in memory).
* n_jobs: the CPU backend's search threads, read at fit (None, like -1: every hardware thread,
  as scikit-learn's brute-force search, whose distance kernels use every core whatever n_jobs).
"""

import warnings

import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin, TransformerMixin
from sklearn.exceptions import DataConversionWarning
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_array, check_consistent_length, check_is_fitted

try:  # get_feature_names_out as scikit-learn's transformer ('kneighborstransformer0', ...)
    from sklearn.base import ClassNamePrefixFeaturesOutMixin as _FeaturesOut
except ImportError:  # pragma: no cover - scikit-learn < 1.1
    _FeaturesOut = object

from ._radius_mixin import _check_radius, _RadiusMixin
from ._sklearn_base import (_LIBRARY_CHECKS_ROWS, _densify, _fitted_rows, _MultiOutputTags, _StreamNeighborsBase,
                            _validate_data)

__all__ = ["KNeighborsClassifier", "KNeighborsRegressor", "NearestNeighbors", "KNeighborsTransformer",
           "kneighbors_graph"]


class _Supervised(_MultiOutputTags, _StreamNeighborsBase):
    """fit / partial_fit input handling of the classifier and the regressor."""

    def _validate_Xy(self, X, y, *, reset):
        """(X, y) validated as scikit-learn does (sparse X densified), X possibly a fitted
        neighbours estimator or tree (reset only)."""
        kind = self._check_params()
        rows = _fitted_rows(X) if reset else None
        if rows is not None:
            X = self._validate_X(X, reset=True)
            y = check_array(y, ensure_2d=False, dtype=np.float64 if isinstance(self, RegressorMixin) else None)
            check_consistent_length(X, y)
            return X, y
        checks = _LIBRARY_CHECKS_ROWS if reset else {}  # a fit's rows: _load_rows checks them
        X, y = _validate_data(self, X, y, accept_sparse="csr", dtype=[np.float32, np.float64],
                              multi_output=True, y_numeric=isinstance(self, RegressorMixin), reset=reset, **checks)
        return _densify(X, kind, type(self).__name__), y


def _unique_inverse(y):
    """np.unique(y, return_inverse=True) with int32 codes; for integer labels spanning a range
    of at most a few times their count, by a count per value instead of a sort (O(n): about a
    fifth of the sort's time for 100,000 labels), with the same classes and codes."""
    if y.ndim == 1 and y.size and y.dtype.kind in "iu" and y.dtype.isnative:
        lo, hi = y.min(), y.max()
        span = int(hi) - int(lo) + 1
        if span <= 4 * y.size + 1024:
            # Differences in int64 (signed) or in y's unsigned type (y >= lo): never through float64.
            base = y.astype(np.int64, copy=False) if y.dtype.kind == "i" else y
            offset = (base - base.dtype.type(lo)).astype(np.intp, copy=False)
            present = np.bincount(offset, minlength=span) > 0
            classes = (np.flatnonzero(present).astype(base.dtype) + base.dtype.type(lo)).astype(y.dtype, copy=False)
            return classes, (np.cumsum(present, dtype=np.int32) - 1)[offset]
    classes, codes = np.unique(y, return_inverse=True)
    return classes, codes.astype(np.int32, copy=False)


class KNeighborsClassifier(ClassifierMixin, _Supervised):
    """k-nearest-neighbour classifier on streamknn (scikit-learn API).

    Parameters
    ----------
    n_neighbors : int, default=5
    weights : {'uniform', 'distance'}, callable or None, default='uniform'
        'distance' weighs neighbours by 1/distance (neighbours at distance 0 take all the weight);
        a callable maps the (n_queries, n_neighbors) distances to weights of that shape.
    algorithm : {'auto', 'ball_tree', 'kd_tree', 'brute'}, default='auto'
        Accepted for scikit-learn compatibility; every value runs the exact search.
    leaf_size : int, default=30
        Accepted for scikit-learn compatibility; changes nothing.
    metric : {'minkowski', 'euclidean', 'l2', 'cosine', 'haversine', 'ip'}, default='minkowski'
    p : float, default=2
        Only p=2 (Euclidean) is supported with metric='minkowski'.
    metric_params : dict, default=None
        Only {'p': 2}.
    n_jobs : int, default=None
        Threads a CPU-backend search uses, read at fit: None or -1 every hardware thread, -2 all
        but one (joblib's convention), n > 0 that many (at most 1024). The answers do not depend
        on it; the CUDA backend ignores it.
    backend : {'auto', 'cpu', 'cuda'}, default='auto'
        'auto' runs on a CUDA device where one is usable, else on the CPU (same answers).

    Attributes: classes_ (a list of arrays for multi-output y), outputs_2d_, n_features_in_,
    feature_names_in_, n_samples_fit_, effective_metric_, effective_metric_params_.

    ``fit`` stores the rows with ids 0..n-1; ``partial_fit`` appends rows (labels must be among
    ``classes_``, or among ``classes=`` given to the first ``partial_fit``). Equal-distance
    neighbours are ordered by training row. Class ties go to the class that sorts first.
    """

    def _encode(self, y):
        """y (n,) against classes_ as int32 codes; unknown labels refused."""
        encoded = np.minimum(np.searchsorted(self.classes_, y), len(self.classes_) - 1)
        unknown = self.classes_[encoded] != y
        if np.any(unknown):
            bad = np.unique(np.asarray(y)[unknown])
            raise ValueError(
                f"y contains labels {list(bad[:5])} not in classes_ {list(self.classes_)}; pass every "
                "class with classes= to the first partial_fit call, or fit again")
        return encoded.astype(np.int32)

    @staticmethod
    def _as_outputs(y):
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[1] == 1:
            warnings.warn(
                "A column-vector y was passed when a 1d array was expected. Please change the shape "
                "of y to (n_samples,), for example using ravel().", DataConversionWarning, stacklevel=4)
            y = y.ravel()
        check_classification_targets(y)
        return y

    def fit(self, X, y):
        """Fits the reference set on X (n_samples, n_features) and labels y (n_samples[, n_outputs])."""
        X, y = self._validate_Xy(X, y, reset=True)
        y = self._as_outputs(y)
        if y.ndim == 2:  # scikit-learn's multi-output classification: the host votes per output
            classes, codes = [], np.empty(y.shape, dtype=np.int32)
            for j in range(y.shape[1]):
                column_classes, codes[:, j] = _unique_inverse(y[:, j])
                classes.append(column_classes)
        else:
            classes, codes = _unique_inverse(y)
        loaded = self._load_rows(X)  # before anything changes: a refused row leaves the old fit
        self.outputs_2d_ = y.ndim == 2
        self.classes_, self._y = classes, codes
        return self._fit_rows(X, loaded)

    def partial_fit(self, X, y, classes=None):
        """Adds rows to the reference set without refitting (the first call fits).

        classes: every label the calls will use (as scikit-learn's SGDClassifier); optional on
        the first call (then the labels of that call), ignored afterwards. One output only.
        """
        first = not hasattr(self, "classes_")
        X, y = self._validate_Xy(X, y, reset=first)
        y = self._as_outputs(y)
        if y.ndim != 1:
            raise ValueError(f"partial_fit takes one output (y of shape (n_samples,)), got shape {y.shape}")
        if first:
            loaded = self._load_rows(X)
            self.classes_ = np.unique(y) if classes is None else np.unique(np.asarray(classes))
            self.outputs_2d_ = False
            self._y = self._encode(y)
            return self._fit_rows(X, loaded)
        if self.outputs_2d_:
            raise ValueError("partial_fit cannot extend an estimator fitted on multi-output y")
        codes = self._encode(y)
        self._append_rows(X)
        self._y = np.concatenate([self._y, codes])
        return self

    def _host_proba(self, X):
        """scikit-learn's predict_proba, from the neighbours' labels and weights (one array per output)."""
        ind, weights = self._neighbour_weights(X)
        codes = self._y.reshape(self._y.shape[0], -1)
        classes = self.classes_ if self.outputs_2d_ else [self.classes_]
        if weights is None:
            weights = np.ones_like(ind, dtype=np.float64)
        rows, probas = np.arange(ind.shape[0]), []
        for j, classes_j in enumerate(classes):
            labels = codes[:, j][ind]
            proba = np.zeros((ind.shape[0], classes_j.size))
            for i, idx in enumerate(labels.T):
                proba[rows, idx] += weights[:, i]
            normalizer = proba.sum(axis=1)[:, np.newaxis]
            normalizer[normalizer == 0.0] = 1.0
            probas.append(proba / normalizer)
        return probas

    def predict(self, X):
        """Class labels (n_queries[, n_outputs]) by (weighted) majority vote of the n_neighbors nearest rows."""
        probas = self._host_proba(X)
        if not self.outputs_2d_:
            return self.classes_[np.argmax(probas[0], axis=1)]
        out = np.empty((probas[0].shape[0], len(probas)), dtype=self.classes_[0].dtype)
        for j, proba in enumerate(probas):
            out[:, j] = self.classes_[j][np.argmax(proba, axis=1)]
        return out

    def predict_proba(self, X):
        """Class probabilities (n_queries, n_classes) in the order of classes_ (a list per output)."""
        probas = self._host_proba(X)
        return probas if self.outputs_2d_ else probas[0]


class KNeighborsRegressor(RegressorMixin, _Supervised):
    """k-nearest-neighbour regressor on streamknn (scikit-learn API).

    Parameters as KNeighborsClassifier. y may have several outputs (n_samples, n_outputs);
    'uniform' predicts the mean of the neighbours' targets, 'distance' the 1/distance-weighted
    mean (neighbours at distance 0 take all the weight), a callable its weighted mean.

    Attributes: n_features_in_, feature_names_in_, n_samples_fit_, effective_metric_.
    """

    def fit(self, X, y):
        """Fits the reference set on X (n_samples, n_features) and y (n_samples[, n_outputs])."""
        X, y = self._validate_Xy(X, y, reset=True)
        loaded = self._load_rows(X)  # before anything changes: a refused row leaves the old fit
        self._y = y
        self._y_1d = np.ndim(y) == 1
        self._n_outputs = 1 if self._y_1d else y.shape[1]
        return self._fit_rows(X, loaded)

    def partial_fit(self, X, y):
        """Adds rows to the reference set without refitting (the first call fits)."""
        if not hasattr(self, "n_samples_fit_"):
            return self.fit(X, y)
        X, y = self._validate_Xy(X, y, reset=False)
        outputs = 1 if np.ndim(y) == 1 else y.shape[1]
        if outputs != self._n_outputs:
            raise ValueError(f"y has {outputs} outputs but the estimator was fitted with {self._n_outputs}")
        self._append_rows(X)
        y_all = np.concatenate([self._y.reshape(len(self._y), -1), y.reshape(len(y), -1)])
        self._y = y_all.ravel() if self._y_1d else y_all
        return self

    def predict(self, X):
        """Predicted targets (n_queries,) or (n_queries, n_outputs), as y was at fit."""
        ind, weights = self._neighbour_weights(X)
        y = np.asarray(self._y, dtype=np.float64).reshape(self._y.shape[0], -1)
        if weights is None:
            pred = np.mean(y[ind], axis=1)
        else:
            pred = np.empty((ind.shape[0], y.shape[1]))
            denom = np.sum(weights, axis=1)
            for j in range(y.shape[1]):
                pred[:, j] = np.sum(y[ind, j] * weights, axis=1) / denom
        return pred.ravel() if self._y_1d else pred


class NearestNeighbors(_RadiusMixin, _StreamNeighborsBase):
    """Unsupervised neighbour search on streamknn (scikit-learn API): fit, kneighbors,
    kneighbors_graph, radius_neighbors, radius_neighbors_graph (exact; see _radius_mixin).
    Other parameters as KNeighborsClassifier (no weights)."""

    def __init__(self, *, n_neighbors=5, radius=1.0, algorithm="auto", leaf_size=30, metric="minkowski", p=2,
                 metric_params=None, n_jobs=None, backend="auto"):
        self.n_neighbors = n_neighbors
        self.radius = radius
        self.algorithm = algorithm
        self.leaf_size = leaf_size
        self.metric = metric
        self.p = p
        self.metric_params = metric_params
        self.n_jobs = n_jobs
        self.backend = backend

    def fit(self, X, y=None):
        """Fits the reference set on X (n_samples, n_features); y is ignored."""
        kind = self._check_params()
        if getattr(self, "radius", None) is not None:
            _check_radius(self.radius)
        X = self._validate_X(X, reset=True)
        return self._fit_rows(X, self._load_rows(X, kind))

    def partial_fit(self, X, y=None):
        """Adds rows to the reference set without refitting (the first call fits)."""
        if not hasattr(self, "n_samples_fit_"):
            return self.fit(X)
        self._append_rows(self._validate_X(X, reset=False))
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


class KNeighborsTransformer(_FeaturesOut, TransformerMixin, NearestNeighbors):
    """X into a sparse graph of k nearest neighbours (scikit-learn API): transform(X) is
    kneighbors_graph(X, n_neighbors + (mode == 'distance'), mode), as scikit-learn's."""

    def __init__(self, *, mode="distance", n_neighbors=5, algorithm="auto", leaf_size=30, metric="minkowski", p=2,
                 metric_params=None, n_jobs=None, backend="auto"):
        self.mode = mode
        self.n_neighbors = n_neighbors
        self.algorithm = algorithm
        self.leaf_size = leaf_size
        self.metric = metric
        self.p = p
        self.metric_params = metric_params
        self.n_jobs = n_jobs
        self.backend = backend

    def fit(self, X, y=None):
        """Fits the reference set on X; y is ignored."""
        if self.mode not in ("distance", "connectivity"):
            raise ValueError(f"mode={self.mode!r} is not supported (choose 'distance' or 'connectivity')")
        super().fit(X)
        self._n_features_out = self.n_samples_fit_
        return self

    def transform(self, X):
        """The (n_queries, n_samples_fit) CSR graph of each row's neighbours."""
        check_is_fitted(self)
        add_one = self.mode == "distance"
        return self.kneighbors_graph(X, mode=self.mode, n_neighbors=self.n_neighbors + add_one)

    def fit_transform(self, X, y=None):
        return self.fit(X).transform(X)


def _graph_source(X, method, metric, p, metric_params, fit):
    """The estimator a graph function reads: X where it is a fitted estimator with `method` (its
    metric, p and metric_params must equal these, as scikit-learn checks), else fit(X)."""
    if not hasattr(X, method):
        return fit(X)
    for name, value in (("metric", metric), ("p", p), ("metric_params", metric_params)):
        if getattr(X, name) != value:
            raise ValueError(f"Got {value} for {name}, while the estimator has {getattr(X, name)} for the "
                             "same parameter.")
    return X


def kneighbors_graph(X, n_neighbors, *, mode="connectivity", metric="minkowski", p=2, metric_params=None,
                     include_self=False, n_jobs=None, backend="auto"):
    """scikit-learn's sklearn.neighbors.kneighbors_graph on streamknn: X is data (a
    NearestNeighbors is fitted on it) or a fitted k-neighbours estimator whose parameters must
    equal these."""
    X = _graph_source(X, "kneighbors_graph", metric, p, metric_params,
                      lambda X: NearestNeighbors(n_neighbors=n_neighbors, metric=metric, p=p,
                                                 metric_params=metric_params, n_jobs=n_jobs, backend=backend).fit(X))
    if include_self == "auto":
        include_self = mode == "connectivity"
    return X.kneighbors_graph(X=X._fit_X if include_self else None, n_neighbors=n_neighbors, mode=mode)
