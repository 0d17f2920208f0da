"""Shared fixtures of the Python suite.

STREAMKNN_TEST_BACKEND picks the backend every test builds its stores on: 'cpu' (default),
'cuda' (a machine with a CUDA device; tests skip when none is usable) or 'auto'. Seeds are fixed and
printed on failure through the test ids; STREAMKNN_TEST_SEED overrides the base seed.
"""
import os

import numpy as np
import pytest

import streamknn

BACKEND = os.environ.get("STREAMKNN_TEST_BACKEND", "cpu")
SEED = int(os.environ.get("STREAMKNN_TEST_SEED", "20240611"))


def pytest_report_header(config):
    try:
        import sklearn
        sklearn_version = sklearn.__version__
    except ImportError:
        sklearn_version = "absent"
    return (f"streamknn {streamknn.__version__} from {os.path.dirname(streamknn.__file__)}; "
            f"backend={BACKEND}; cuda_available={streamknn.cuda_available()}; seed={SEED}; "
            f"numpy {np.__version__}; scikit-learn {sklearn_version}")


@pytest.fixture(scope="session")
def backend():
    """The backend name to build stores with (skips the test when CUDA is asked for but absent)."""
    if BACKEND == "cuda" and not streamknn.cuda_available():
        pytest.skip("STREAMKNN_TEST_BACKEND=cuda but no CUDA device is usable")
    return BACKEND


@pytest.fixture
def rng(request):
    """A generator seeded from the base seed and the test's name (reproducible per test)."""
    return np.random.default_rng([SEED, sum(map(ord, request.node.name))])
