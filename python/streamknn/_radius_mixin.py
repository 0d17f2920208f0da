"""radius_neighbors and radius_neighbors_graph of the scikit-learn estimators (NearestNeighbors and
the radius estimators), on ReferenceSet.radius_search: exact (a training row is within the radius
when its exact distance to the query, on the float32 values the library stores, is at most the
radius; docs/filters.md states the rule for each metric). Results are scikit-learn's: object arrays
of per-query arrays (float64 distances, int64 training rows), in training-row order as scikit-learn's
brute force gives them, or by (distance, row) with sort_results; X=None queries the training rows,
each without itself.
"""

import numbers

import numpy as np
from scipy import sparse
from sklearn.utils.validation import check_is_fitted

try:  # isinstance checks of scikit-learn's own code see a radius-neighbours estimator
    from sklearn.neighbors._base import RadiusNeighborsMixin as _RadiusNeighborsMixin
except ImportError:  # pragma: no cover - a layout this package was not tested against
    _RadiusNeighborsMixin = object

from ._sklearn_base import _HAVERSINE_OUT


def _check_radius(radius):
    if isinstance(radius, bool) or not isinstance(radius, numbers.Real) or np.isnan(radius) or radius < 0:
        raise ValueError(f"The 'radius' parameter must be a float in the range [0.0, inf]. Got {radius!r} instead.")
    return float(radius)


def _objects(parts):
    out = np.empty(len(parts), dtype=object)
    out[:] = parts
    return out


class _RadiusMixin(_RadiusNeighborsMixin):
    """radius_neighbors and radius_neighbors_graph over the estimator's reference set."""

    def _library_radius(self, radius):
        """The radius in the library's units: metres for haversine, a bound on -<q, x> for cosine
        (its rows are unit vectors in an inner-product store: 1 - cos <= r iff -<q, x> <= r - 1)."""
        if self._kind == "haversine":
            return radius / _HAVERSINE_OUT
        if self._kind == "cosine":
            return radius - 1.0
        return radius

    def radius_neighbors(self, X=None, radius=None, return_distance=True, sort_results=False):
        """Training rows within radius of each query: (distances, indices) as object arrays of
        per-query float64 / int64 arrays (indices only with return_distance=False), nearest first.

        As scikit-learn: X=None queries the training rows, each excluding itself; radius=None
        uses the estimator's radius. Each query's neighbours are in training-row order, or with
        sort_results (which needs return_distance) in (distance, row) order.
        """
        check_is_fitted(self)
        if sort_results and not return_distance:
            raise ValueError("return_distance must be True if sort_results is True.")
        radius = _check_radius(self.radius if radius is None else radius)
        query_is_train = X is None
        X = self._fit_X if query_is_train else self._validate_X(X, reset=False)
        if self._store is None or (self._kind == "haversine" and X.shape[1] != 2):
            raise ValueError("Haversine distance only valid in 2 dimensions")
        offsets, ids, dist, _, _ = self._store.radius_search(self._rows(X), self._library_radius(radius))
        dist = dist.astype(np.float64)
        if self._kind == "cosine":
            np.clip(dist + 1.0, 0.0, 2.0, out=dist)
        elif self._kind == "haversine":
            dist *= _HAVERSINE_OUT
        ind = ids.astype(np.int64)
        cuts = offsets[1:-1].astype(np.int64)
        ind_parts, dist_parts = np.split(ind, cuts), np.split(dist, cuts)
        for q in range(len(ind_parts)):
            keep = ind_parts[q] != q if query_is_train else slice(None)
            ind_q, dist_q = ind_parts[q][keep], dist_parts[q][keep]
            if not sort_results:  # scikit-learn's brute force order: by training row
                order = np.argsort(ind_q, kind="stable")
                ind_q, dist_q = ind_q[order], dist_q[order]
            ind_parts[q], dist_parts[q] = ind_q, dist_q
        neigh_ind = _objects(ind_parts)
        return (_objects(dist_parts), neigh_ind) if return_distance else neigh_ind

    def radius_neighbors_graph(self, X=None, radius=None, mode="connectivity", sort_results=False):
        """The radius-neighbours graph as a scipy CSR matrix (n_queries, n_samples_fit): ones
        (mode='connectivity') or distances (mode='distance'), as scikit-learn's."""
        check_is_fitted(self)
        if mode == "connectivity":
            ind = self.radius_neighbors(X, radius, return_distance=False)
            data = None
        elif mode == "distance":
            dist, ind = self.radius_neighbors(X, radius, return_distance=True, sort_results=sort_results)
            data = np.concatenate(list(dist)) if len(dist) else np.empty(0)
        else:
            raise ValueError('Unsupported mode, must be one of "connectivity", or "distance" but got '
                             f'"{mode}" instead')
        counts = np.array([len(a) for a in ind], dtype=np.int64)
        indices = np.concatenate(list(ind)) if len(ind) else np.empty(0, dtype=np.int64)
        if data is None:
            data = np.ones(indices.size)
        indptr = np.concatenate([[0], np.cumsum(counts)])
        return sparse.csr_matrix((data, indices, indptr), shape=(len(ind), self.n_samples_fit_))
