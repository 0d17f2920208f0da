"""scikit-learn's own neighbours tests, run against streamknn's classes.

The installed scikit-learn's sklearn/neighbors/tests/test_neighbors.py is loaded as a fresh
module (nothing is copied into this repository) with streamknn's KNeighborsClassifier,
KNeighborsRegressor, NearestNeighbors, KNeighborsTransformer, kneighbors_graph,
RadiusNeighborsClassifier, RadiusNeighborsRegressor and radius_neighbors_graph in place of
scikit-learn's: in `sklearn.neighbors` while the module's decorators are evaluated (so
parametrised classes are streamknn's), then through the module's own `neighbors` name. Every
test function of that file is collected here under its own name; a case that needs what
streamknn does not offer is skipped with the reason (SKIP_TESTS, skip_case). The global_dtype
fixture runs float32 and float64 (scikit-learn's runs float32 only on request).
"""
import functools
import importlib.util
import os
import types

import numpy as np
import pytest

sklearn = pytest.importorskip("sklearn")
import sklearn.neighbors as _skn  # noqa: E402

import streamknn  # noqa: E402

SOURCE = os.path.join(os.path.dirname(sklearn.__file__), "neighbors", "tests", "test_neighbors.py")
if not os.path.exists(SOURCE):
    pytest.skip(f"scikit-learn's neighbours tests are not installed ({SOURCE})", allow_module_level=True)

OURS = ("KNeighborsClassifier", "KNeighborsRegressor", "NearestNeighbors", "KNeighborsTransformer", "kneighbors_graph",
        "RadiusNeighborsClassifier", "RadiusNeighborsRegressor", "radius_neighbors_graph")
SUPPORTED_METRICS = {"euclidean", "l2", "cosine", "haversine", "minkowski"}

PRECOMPUTED = "metric='precomputed' is not supported (streamknn searches vectors)"
HELPERS = "exercises scikit-learn's own helpers only, no neighbours estimator"
SKIP_TESTS = {
    "test_precomputed_dense": PRECOMPUTED,
    "test_precomputed_sparse_knn": PRECOMPUTED,
    "test_precomputed_sparse_radius": PRECOMPUTED,
    "test_radius_neighbors_returns_array_of_objects": PRECOMPUTED,
    "test_unsupervised_radius_neighbors": "runs p=1, 3, 4 and inf: only p=2 is supported",
    "test_precomputed_sparse_invalid": PRECOMPUTED,
    "test_precomputed_cross_validation": PRECOMPUTED,
    "test_kneighbors_regressor_sparse": PRECOMPUTED,
    "test_pipeline_with_nearest_neighbors_transformer": PRECOMPUTED,
    "test_kneighbors_classifier_predict_proba": "p=1 (Manhattan): only p=2 is supported",
    "test_neighbors_minkowski_semimetric_algo_warn": "p=0.1: only p=2 is supported",
    "test_neighbors_minkowski_semimetric_algo_error": "p=0.1: only p=2 is supported",
    "test_metric_params_interface": "metric_params={'p': 3}: only p=2 is supported",
    "test_callable_metric": "callable metrics are not supported",
    "test_sparse_metric_callable": "callable metrics are not supported",
    "test_pairwise_boolean_distance": "metric='jaccard' is not supported",
    "test_non_euclidean_kneighbors": "metrics 'manhattan' and 'chebyshev' are not supported",
    "test_auto_algorithm": "checks which tree algorithm='auto' builds (_fit_method); streamknn builds none",
    "test_predict_sparse_ball_kd_tree": "expects the trees to refuse sparse queries; streamknn densifies them "
                                        "whatever the algorithm",
    "test_is_sorted_by_data": HELPERS,
    "test_sort_graph_by_row_values": HELPERS,
    "test_sort_graph_by_row_values_copy": HELPERS,
    "test_sort_graph_by_row_values_warning": HELPERS,
    "test_sort_graph_by_row_values_bad_sparse_format": HELPERS,
    "test_neighbors_distance_metric_deprecation": HELPERS,
    "test_valid_metrics_has_no_duplicate": HELPERS,
}


def skip_case(name, params):
    """The reason to skip one parametrised case, or None."""
    metric = params.get("metric")
    if metric is not None and metric not in SUPPORTED_METRICS:
        return PRECOMPUTED if metric == "precomputed" else f"metric={metric!r} is not supported"
    if metric == "minkowski" and name in ("test_neighbors_metrics", "test_kneighbors_brute_backend",
                                          "test_radius_neighbors_brute_backend",
                                          "test_valid_brute_metric_for_auto_algorithm"):
        return "runs metric='minkowski' with p=1.5, 3, inf and weights: only p=2 is supported"
    if metric == "haversine" and name == "test_neighbors_metrics":
        return "expects algorithm='kd_tree' to refuse haversine (a tree's limit; streamknn serves it)"
    return None


def _load_suite():
    """test_neighbors.py executed with streamknn's classes in sklearn.neighbors (restored after)."""
    saved = {name: getattr(_skn, name) for name in OURS}
    try:
        for name in OURS:
            setattr(_skn, name, getattr(streamknn, name))
        spec = importlib.util.spec_from_file_location("streamknn_sklearn_neighbors_suite", SOURCE)
        suite = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(suite)
    finally:
        for name, value in saved.items():
            setattr(_skn, name, value)
    namespace = types.ModuleType("sklearn.neighbors")
    namespace.__dict__.update({k: v for k, v in vars(_skn).items() if not k.startswith("__")})
    for name in OURS:
        setattr(namespace, name, getattr(streamknn, name))
    suite.neighbors = namespace
    return suite


def _wrap(name, test):
    @functools.wraps(test)  # keeps the parametrize marks; pytest reads the signature through __wrapped__
    def case(*args, **kwargs):
        reason = SKIP_TESTS.get(name) or skip_case(name, kwargs)
        if reason:
            pytest.skip(reason)
        return test(*args, **kwargs)

    return case


@pytest.fixture(params=[np.float32, np.float64], ids=["float32", "float64"])
def global_dtype(request):
    return request.param


_SUITE = _load_suite()
for _name, _test in vars(_SUITE).items():
    if _name.startswith("test_") and callable(_test):
        globals()[_name] = _wrap(_name, _test)


def test_the_suite_runs_streamknn():
    """The substitution took: the suite's names are streamknn's classes."""
    for name in OURS:
        assert getattr(_SUITE.neighbors, name) is getattr(streamknn, name)
    assert _SUITE.KNeighborsRegressor is streamknn.KNeighborsRegressor
    assert _skn.KNeighborsClassifier is not streamknn.KNeighborsClassifier  # restored
