"""streamknn: exact k-nearest-neighbour classification and regression over a reference set
that changes while it is queried (CUDA where a GPU is usable, CPU otherwise, same answers).

Three levels, one library underneath:

* ``ReferenceSet`` (with ``KnnClassifier`` / ``KnnRegressor``): the library's own API, batched.
* ``KNeighborsClassifier`` / ``KNeighborsRegressor`` / ``NearestNeighbors`` /
  ``KNeighborsTransformer`` / ``kneighbors_graph`` / ``RadiusNeighborsClassifier`` /
  ``RadiusNeighborsRegressor`` / ``radius_neighbors_graph``: a drop-in for scikit-learn's (need
  scikit-learn; imported on first use, so ``import streamknn`` works without it).
* ``SlidingWindowKNNClassifier`` / ``SlidingWindowKNNRegressor``: River-style streaming models
  (``learn_one`` / ``predict_one`` on dicts, causal batches), and ``KnnQ`` for KNN-Q learning.

See docs/python.md for the whole API.
"""

from ._streamknn import (  # noqa: F401  (re-exported)
    BackendUnavailable,
    CheckpointError,
    CudaError,
    Error,
    InvalidArgument,
    KnnClassifier,
    KnnRegressor,
    OutOfMemory,
    PublishReport,
    QueueFull,
    ReferenceSet,
    Rejection,
    __version__,
    built_with_cuda,
    cuda_available,
    earth_radius_metres,
    invalid_id,
    max_cpu_threads,
    max_k,
)
from ._knnq import KnnQ  # noqa: F401
from . import _device

_device.install()  # ReferenceSet._search_dlpack: zero-copy searches of CuPy / PyTorch CUDA arrays
from ._stream import SlidingWindowKNNClassifier, SlidingWindowKNNRegressor  # noqa: F401

_SKLEARN_NAMES = ("KNeighborsClassifier", "KNeighborsRegressor", "KNeighborsTransformer", "NearestNeighbors",
                  "kneighbors_graph")
_RADIUS_NAMES = ("RadiusNeighborsClassifier", "RadiusNeighborsRegressor", "radius_neighbors_graph")

__all__ = [
    "BackendUnavailable", "CudaError", "Error", "InvalidArgument", "KnnClassifier", "KnnQ",
    "KnnRegressor", "OutOfMemory", "PublishReport", "QueueFull", "ReferenceSet", "Rejection",
    "SlidingWindowKNNClassifier", "SlidingWindowKNNRegressor", "built_with_cuda", "cuda_available",
    "earth_radius_metres", "invalid_id", "max_cpu_threads", "max_k", *_SKLEARN_NAMES, *_RADIUS_NAMES, "KMeans",
]


def __getattr__(name):
    # The scikit-learn estimators import scikit-learn, so they load on first use only.
    if name in _SKLEARN_NAMES:
        from . import _sklearn

        return getattr(_sklearn, name)
    if name in _RADIUS_NAMES:  # scikit-learn's radius estimators, on radius_search
        from . import _sklearn_radius

        return getattr(_sklearn_radius, name)
    if name == "KMeans":  # a scikit-learn estimator too (imports scikit-learn on first use)
        from ._kmeans import KMeans

        return KMeans
    if name == "DistributedReferenceSet":  # imports mpi4py (initialising MPI): on first use only
        from ._distributed import DistributedReferenceSet

        return DistributedReferenceSet
    raise AttributeError(f"module 'streamknn' has no attribute '{name}'")


def __dir__():
    return sorted(set(globals()) | set(_SKLEARN_NAMES) | set(_RADIUS_NAMES) | {"KMeans"})
