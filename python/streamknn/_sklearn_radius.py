"""RadiusNeighborsClassifier, RadiusNeighborsRegressor and radius_neighbors_graph on streamknn
(scikit-learn API): the training rows within a radius come from ReferenceSet.radius_search
(exactly; see _radius_mixin), and predictions aggregate their targets on the host with
scikit-learn's arithmetic, outlier_label included.
"""

import warnings

import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from ._radius_mixin import _check_radius, _RadiusMixin
from ._sklearn import _graph_source, _Supervised, KNeighborsClassifier, KNeighborsRegressor, NearestNeighbors
from ._sklearn_base import _MultiOutputTags, _StreamNeighborsCore

__all__ = ["RadiusNeighborsClassifier", "RadiusNeighborsRegressor", "radius_neighbors_graph"]


def _radius_weights(dist, weights):
    """scikit-learn's weights of per-query distance arrays (an object array): None for uniform,
    1/d (a query with a zero distance weighs its zero-distance neighbours 1, the rest 0), or
    weights(dist)."""
    if weights in (None, "uniform"):
        return None
    if weights == "distance":
        out = np.empty(len(dist), dtype=object)
        for i, d in enumerate(dist):
            if np.any(d == 0.0):
                out[i] = (d == 0.0).astype(np.float64)
            else:
                with np.errstate(divide="ignore"):
                    out[i] = 1.0 / d
        return out
    return weights(dist)


class _RadiusEstimator(_MultiOutputTags, _RadiusMixin, _StreamNeighborsCore):
    """scikit-learn's radius-estimator constructor over a streamknn reference set."""

    n_neighbors = None  # the k-neighbours checks of the shared base do not apply
    _validate_Xy = _Supervised._validate_Xy

    def __init__(self, radius=1.0, *, weights="uniform", algorithm="auto", leaf_size=30, p=2, metric="minkowski",
                 metric_params=None, n_jobs=None, backend="auto"):
        self.radius = radius
        self.weights = weights
        self.algorithm = algorithm
        self.leaf_size = leaf_size
        self.p = p
        self.metric = metric
        self.metric_params = metric_params
        self.n_jobs = n_jobs
        self.backend = backend

    def _check_params(self):
        _check_radius(self.radius)
        return super()._check_params()


class RadiusNeighborsClassifier(ClassifierMixin, _RadiusEstimator):
    """Classifier voting among the training rows within a radius, on streamknn (scikit-learn API).

    Parameters as scikit-learn's RadiusNeighborsClassifier (radius, weights, algorithm, leaf_size,
    p, metric, outlier_label, metric_params, n_jobs) plus ``backend``; metrics as
    KNeighborsClassifier. outlier_label: None (a query without neighbours raises ValueError),
    'most_frequent', or a label (one per output for multi-output y) given to such queries.
    """

    def __init__(self, radius=1.0, *, weights="uniform", algorithm="auto", leaf_size=30, p=2, metric="minkowski",
                 outlier_label=None, metric_params=None, n_jobs=None, backend="auto"):
        super().__init__(radius, weights=weights, algorithm=algorithm, leaf_size=leaf_size, p=p, metric=metric,
                         metric_params=metric_params, n_jobs=n_jobs, backend=backend)
        self.outlier_label = outlier_label

    _encode = KNeighborsClassifier._encode
    _as_outputs = staticmethod(KNeighborsClassifier._as_outputs)

    def fit(self, X, y):
        """Fits the reference set on X and labels y (n_samples[, n_outputs]), as KNeighborsClassifier."""
        KNeighborsClassifier.fit(self, X, y)
        self._set_outlier_label()
        return self

    def partial_fit(self, X, y, classes=None):
        """Adds rows without refitting, as KNeighborsClassifier.partial_fit."""
        KNeighborsClassifier.partial_fit(self, X, y, classes=classes)
        self._set_outlier_label()
        return self

    def _set_outlier_label(self):
        classes = self.classes_ if self.outputs_2d_ else [self.classes_]
        codes = self._y.reshape(self._y.shape[0], -1)
        label = self.outlier_label
        if label is None:
            self.outlier_label_ = None
            return
        if isinstance(label, str) and label == "most_frequent":
            self.outlier_label_ = [classes_k[np.bincount(codes[:, k]).argmax()] for k, classes_k in enumerate(classes)]
            return
        if np.ndim(label) > 0 and not isinstance(label, str):
            if len(label) != len(classes):
                raise ValueError(f"The length of outlier_label: {label} is inconsistent with the output length: "
                                 f"{len(classes)}")
            labels = list(label)
        else:
            labels = [label] * len(classes)
        for classes_k, label_k in zip(classes, labels):
            if np.ndim(label_k) > 0 and not isinstance(label_k, str):
                raise TypeError(f"The outlier_label of classes {classes_k} is supposed to be a scalar, got {label_k}.")
            if np.append(classes_k, label_k).dtype != classes_k.dtype:
                raise TypeError(f"The dtype of outlier_label {label_k} is inconsistent with classes {classes_k} in y.")
        self.outlier_label_ = labels

    def predict_proba(self, X):
        """Class probabilities (n_queries, n_classes) from the training rows within the radius (a
        list per output); a query without any takes the outlier label's probability 1."""
        check_is_fitted(self)
        dist, ind = self.radius_neighbors(X)
        n = len(ind)
        outliers = np.flatnonzero([len(i) == 0 for i in ind])
        inliers = np.flatnonzero([len(i) > 0 for i in ind])
        if self.outlier_label_ is None and outliers.size > 0:
            raise ValueError(f"No neighbors found for test samples {outliers!r}, you can try using larger radius, "
                             "giving a label for outliers, or considering removing them from your dataset.")
        weights = _radius_weights(dist, self.weights)
        codes = self._y.reshape(self._y.shape[0], -1)
        classes = self.classes_ if self.outputs_2d_ else [self.classes_]
        probas = []
        for k, classes_k in enumerate(classes):
            proba = np.zeros((n, classes_k.size))
            for i in inliers:
                proba[i] = np.bincount(codes[ind[i], k], None if weights is None else weights[i],
                                       minlength=classes_k.size)
            if outliers.size > 0:
                where = np.flatnonzero(classes_k == self.outlier_label_[k])
                if where.size == 1:
                    proba[outliers, where[0]] = 1.0
                else:
                    warnings.warn(f"Outlier label {self.outlier_label_[k]} is not in training classes. All class "
                                  "probabilities of outliers will be assigned with 0.")
            normalizer = proba.sum(axis=1)[:, np.newaxis]
            normalizer[normalizer == 0.0] = 1.0
            probas.append(proba / normalizer)
        return probas if self.outputs_2d_ else probas[0]

    def predict(self, X):
        """Class labels (n_queries[, n_outputs]) by (weighted) vote of the training rows within the radius."""
        probas = self.predict_proba(X)
        classes = self.classes_ if self.outputs_2d_ else [self.classes_]
        if not self.outputs_2d_:
            probas = [probas]
        out = np.empty((probas[0].shape[0], len(classes)), dtype=classes[0].dtype)
        for k, proba in enumerate(probas):
            out[:, k] = classes[k].take(proba.argmax(axis=1))
            empty = np.flatnonzero((proba == 0).all(axis=1))
            if empty.size:
                out[empty, k] = self.outlier_label_[k]
        return out if self.outputs_2d_ else out.ravel()


class RadiusNeighborsRegressor(RegressorMixin, _RadiusEstimator):
    """Regressor averaging the targets of the training rows within a radius, on streamknn
    (scikit-learn API; parameters as scikit-learn's RadiusNeighborsRegressor plus ``backend``).
    A query without any predicts NaN, with a warning, as scikit-learn's."""

    fit = KNeighborsRegressor.fit
    partial_fit = KNeighborsRegressor.partial_fit

    def predict(self, X):
        """The (weighted) mean target of the training rows within the radius of each query."""
        check_is_fitted(self)
        dist, ind = self.radius_neighbors(X)
        weights = _radius_weights(dist, self.weights)
        y = np.asarray(self._y, dtype=np.float64).reshape(self._y.shape[0], -1)
        empty = np.full_like(y[0], np.nan)
        if weights is None:
            pred = np.array([np.mean(y[i, :], axis=0) if len(i) else empty for i in ind])
        else:
            pred = np.array([np.average(y[i, :], axis=0, weights=weights[q]) if len(i) else empty
                             for q, i in enumerate(ind)])
        if np.any(np.isnan(pred)):
            warnings.warn("One or more samples have no neighbors within specified radius; predicting NaN.")
        return pred.ravel() if self._y_1d else pred


def radius_neighbors_graph(X, radius, *, mode="connectivity", metric="minkowski", p=2, metric_params=None,
                           include_self=False, n_jobs=None, backend="auto"):
    """scikit-learn's sklearn.neighbors.radius_neighbors_graph on streamknn: X is data (a
    NearestNeighbors is fitted on it) or a fitted radius-neighbours estimator whose parameters
    must equal these."""
    X = _graph_source(X, "radius_neighbors_graph", metric, p, metric_params,
                      lambda X: NearestNeighbors(radius=radius, metric=metric, p=p, metric_params=metric_params,
                                                 n_jobs=n_jobs, backend=backend).fit(X))
    if include_self == "auto":
        include_self = mode == "connectivity"
    return X.radius_neighbors_graph(X=X._fit_X if include_self else None, radius=radius, mode=mode)
