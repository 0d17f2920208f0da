"""``streamknn.KMeans``: scikit-learn's ``KMeans`` (Lloyd) on the library's exact K-means.

The data are clustered as float32 (as the library stores vectors). Every labelling is exact: each
point gets its nearest centroid by (exact squared distance of the float32 values, centroid index),
ties to the smaller index. The centroids are float64 means rounded once to float32 (given back in
the input's dtype). The loop is scikit-learn's: stop when the labels do not change, or when the
total squared movement of the centroids is at most ``tol`` times the data's mean per-feature
variance; empty clusters take the points farthest from their centroids. With the same starting
centroids, labels and inertia equal scikit-learn's ``KMeans(algorithm='lloyd')`` up to the float32
rounding of the centroids (docs/kmeans.md).
"""

import numbers
import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin, TransformerMixin
from sklearn.metrics.pairwise import euclidean_distances
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from . import _streamknn
from ._arrays import on_device, to_host
from ._device import _parts as _device_parts
from ._device import genuine_framework
from ._sklearn_base import _validate_data

_BACKENDS = ("auto", "cpu", "cuda")


def _device_rows(X):
    """(contiguous float32 rows on X's device, their pointer, the device's ordinal, its framework's
    current stream, the fitted centroids' NumPy dtype) for a CuPy array or PyTorch CUDA tensor."""
    if X.ndim != 2:
        raise ValueError(f"Expected 2D array, got a {X.ndim}-D device array instead")
    if "complex" in str(X.dtype):
        raise ValueError(f"X must hold real numbers, got {X.dtype}")
    dtype = np.float64 if "float64" in str(X.dtype) else np.float32
    rows, ptr, _, _, _, device, stream, _ = _device_parts(X, X.shape[1], contiguous=True)  # float32, on the device
    return rows, ptr, device, stream, dtype


class KMeans(ClusterMixin, TransformerMixin, BaseEstimator):
    """Exact K-means (Lloyd's algorithm with Hamerly's bounds) on the CPU or a CUDA device.

    Parameters follow scikit-learn's ``KMeans``: ``n_clusters``, ``init`` ('k-means++', 'random',
    an array (n_clusters, n_features) or a callable ``init(X, n_clusters, random_state)``),
    ``n_init`` ('auto': 1 for 'k-means++' and given centroids, 10 for 'random'), ``max_iter``,
    ``tol``, ``random_state``, ``verbose`` (above 0: a line on stdout after every Lloyd iteration
    of every start, with the labels it changed and the centroids' squared movement; the results do
    not depend on it); plus ``backend`` ('auto', 'cpu', 'cuda') and ``cpu_threads`` (0: one per
    hardware thread; results do not depend on it).

    Attributes: ``cluster_centers_``, ``labels_``, ``inertia_``, ``n_iter_``, ``n_features_in_``,
    ``backend_`` (the backend that ran); after ``fit`` of a ``ReferenceSet``, also ``ids_`` (the
    point of each label) and ``epoch_`` (the snapshot clustered).
    """

    def __init__(self, n_clusters=8, *, init="k-means++", n_init="auto", max_iter=300, tol=1e-4,
                 random_state=None, verbose=0, backend="auto", cpu_threads=0):
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.verbose = verbose
        self.backend = backend
        self.cpu_threads = cpu_threads

    # ---- parameters -------------------------------------------------------------------------
    def _check_params(self, n_samples):
        if not isinstance(self.n_clusters, numbers.Integral) or self.n_clusters < 1:
            raise ValueError(f"n_clusters={self.n_clusters!r} must be an integer >= 1")
        if n_samples < self.n_clusters:
            raise ValueError(f"n_samples={n_samples} should be >= n_clusters={self.n_clusters}.")
        if not isinstance(self.max_iter, numbers.Integral) or self.max_iter < 1:
            raise ValueError(f"max_iter={self.max_iter!r} must be an integer >= 1")
        if not isinstance(self.tol, numbers.Real) or not np.isfinite(self.tol) or self.tol < 0:
            raise ValueError(f"tol={self.tol!r} must be a finite number >= 0")
        if not isinstance(self.verbose, numbers.Integral) or self.verbose < 0:
            raise ValueError(f"verbose={self.verbose!r} must be an integer >= 0")
        if self.backend not in _BACKENDS:
            raise ValueError(f"backend={self.backend!r} must be one of {_BACKENDS}")
        given = not isinstance(self.init, str)
        if isinstance(self.init, str) and self.init not in ("k-means++", "random"):
            raise ValueError(f"init={self.init!r} must be 'k-means++', 'random', an array or a callable")
        if self.n_init == "auto":
            n_init = 10 if isinstance(self.init, str) and self.init == "random" else 1
        elif isinstance(self.n_init, numbers.Integral) and self.n_init >= 1:
            n_init = int(self.n_init)
        else:
            raise ValueError(f"n_init={self.n_init!r} must be 'auto' or an integer >= 1")
        if given and n_init != 1:
            warnings.warn(f"Explicit initial center position passed: performing only one init in {type(self).__name__} "
                          f"instead of n_init={n_init}.", RuntimeWarning, stacklevel=3)
            n_init = 1
        return n_init

    def _given_centroids(self, X, random_state, n_features=None):
        """The starting centroids an array or callable init gives for X (n_features: X's, where X
        has no shape)."""
        n_features = X.shape[1] if n_features is None else n_features
        init = self.init(X, self.n_clusters, random_state) if callable(self.init) else self.init
        centers = np.asarray(init, dtype=np.float64)
        if centers.shape != (self.n_clusters, n_features):
            raise ValueError(f"The shape of the initial centers {centers.shape} does not match the number of clusters "
                             f"{self.n_clusters} and features {n_features}.")
        return np.ascontiguousarray(centers, dtype=np.float32)

    # ---- fitting ----------------------------------------------------------------------------
    def fit(self, X, y=None):
        """Clusters X (n_samples, n_features); returns self.

        X may be a CuPy array or a PyTorch CUDA tensor: the CUDA backend then reads it in place
        (``KMeans::fit_device``, after the work queued on the framework's current stream), and the
        fitted attributes are NumPy arrays as for host data. ``predict``, ``transform`` and
        ``score`` take such arrays too, copied to the host once.

        X may also be a ``streamknn.ReferenceSet`` (an L2 store): the points of its published
        snapshot are clustered where they are (a CUDA store's on its device), and ``ids_`` names
        the point of each label, ``epoch_`` the snapshot. Starts are 'k-means++', 'random' or an
        array (a callable init is given the store).
        """
        if isinstance(X, _streamknn.ReferenceSet):
            return self._fit_store(X)
        if genuine_framework(X) is not None and on_device(X):
            return self._fit_device(X)
        X = _validate_data(self, X, accept_sparse=False, dtype=[np.float64, np.float32], order="C")
        n_init = self._check_params(X.shape[0])
        random_state = check_random_state(self.random_state)
        X32 = np.ascontiguousarray(X, dtype=np.float32)
        kind, given, seed = self._start(X, random_state)
        result = _streamknn.kmeans_fit(
            X32, self.n_clusters, max_iter=self.max_iter, tol=float(self.tol), n_init=n_init, init=kind,
            init_centroids=given, seed=seed, backend=self.backend, cpu_threads=self.cpu_threads,
            on_iteration=self._progress())
        return self._fitted(result, X.dtype)

    def _progress(self):
        """The library's on_iteration for ``verbose`` (None when quiet): one line per iteration."""
        if not self.verbose:
            return None

        def report(start, iteration, changed, shift, last):
            end = " (last)" if last else ""
            print(f"Start {start}, iteration {iteration}: {changed} labels changed, "
                  f"centroid shift {shift:.6g}{end}", flush=True)
        return report

    def _start(self, X, random_state):
        """(init kind, given centroids or None, seed) for the library."""
        if isinstance(self.init, str):
            kind, given = self.init, None
        else:
            kind, given = "given", self._given_centroids(X, random_state)
        return kind, given, int(random_state.randint(np.iinfo(np.int32).max))

    def _fit_device(self, X):
        """fit() of a CuPy array or PyTorch CUDA tensor, read in place on its device."""
        if self.backend == "cpu":
            raise ValueError("backend='cpu' cannot cluster device-resident X; pass a NumPy array or use "
                             "backend='auto' or 'cuda'")
        rows, ptr, device, stream, dtype = _device_rows(X)
        self.n_features_in_ = int(rows.shape[1])
        if hasattr(self, "feature_names_in_"):  # as scikit-learn's reset: a device array has no names
            del self.feature_names_in_
        n_init = self._check_params(rows.shape[0])
        random_state = check_random_state(self.random_state)
        kind, given, seed = self._start(rows, random_state)
        result = _streamknn.kmeans_fit_device(
            ptr, int(rows.shape[0]), int(rows.shape[1]), stream, self.n_clusters, max_iter=self.max_iter,
            tol=float(self.tol), n_init=n_init, init=kind, init_centroids=given, seed=seed, backend=self.backend,
            cpu_threads=self.cpu_threads, cuda_device=device, on_iteration=self._progress())
        del rows  # alive until the fit has returned (it reads the rows in place)
        return self._fitted(result, dtype)

    def _fit_store(self, store):
        """fit() of a ReferenceSet's published snapshot, read in place."""
        n, dim = len(store), store.dim
        self.n_features_in_ = int(dim)
        if hasattr(self, "feature_names_in_"):  # as scikit-learn's reset: a store has no feature names
            del self.feature_names_in_
        n_init = self._check_params(n)
        random_state = check_random_state(self.random_state)
        if isinstance(self.init, str):
            kind, given = self.init, None
        else:
            kind, given = "given", self._given_centroids(store, random_state, n_features=dim)
        seed = int(random_state.randint(np.iinfo(np.int32).max))
        result = _streamknn.kmeans_fit_set(
            store, self.n_clusters, max_iter=self.max_iter, tol=float(self.tol), n_init=n_init, init=kind,
            init_centroids=given, seed=seed, backend=self.backend, cpu_threads=self.cpu_threads,
            on_iteration=self._progress())
        self._fitted(result, np.float32)
        self.ids_, self.epoch_ = result[6], int(result[7])
        return self

    def _fitted(self, result, dtype):
        centers, labels, inertia, n_iter, _, backend, _, _ = result
        self.cluster_centers_ = centers.astype(dtype)
        self.labels_ = labels
        self.inertia_ = float(inertia)
        self.n_iter_ = int(n_iter)
        self.backend_ = backend
        return self

    def fit_predict(self, X, y=None):
        """fit(X).labels_."""
        return self.fit(X).labels_

    # ---- using the centroids ------------------------------------------------------------------
    def _checked(self, X):
        check_is_fitted(self)
        if on_device(X):  # a CuPy array or PyTorch CUDA tensor: the centroids' work is on the host
            X = to_host(X)
        return _validate_data(self, X, accept_sparse=False, dtype=[np.float64, np.float32], order="C", reset=False)

    def _labels(self, X):
        return _streamknn.kmeans_predict(np.ascontiguousarray(self.cluster_centers_, dtype=np.float32),
                                         np.ascontiguousarray(X, dtype=np.float32), backend=self.backend,
                                         cpu_threads=self.cpu_threads)

    def predict(self, X):
        """The exact nearest centroid of each row of X (ties to the smaller index)."""
        return self._labels(self._checked(X))

    def transform(self, X):
        """Euclidean distances of each row of X to every centroid, (n_samples, n_clusters)."""
        X = self._checked(X)
        return euclidean_distances(X, self.cluster_centers_.astype(X.dtype))

    def score(self, X, y=None):
        """Minus the inertia of X on the fitted centroids (float64)."""
        X = self._checked(X)
        labels = self._labels(X)
        diff = np.asarray(X, dtype=np.float64) - self.cluster_centers_.astype(np.float64)[labels]
        return -float(np.einsum("ij,ij->", diff, diff))
