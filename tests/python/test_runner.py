"""The River-style models against the command-line runner: `streamknn run --predictions` on a
CSV stream and SlidingWindowKNN* on the same points (one at a time, and in causal batches) give
the same prediction for every point. STREAMKNN_RUNNER names the runner (ctest sets it)."""
import csv
import math
import os
import subprocess
import tempfile

import numpy as np
import pytest

import streamknn

RUNNER = os.environ.get("STREAMKNN_RUNNER", "")
pytestmark = pytest.mark.skipif(not (RUNNER and os.path.exists(RUNNER)),
                                reason="the command-line runner (STREAMKNN_RUNNER) is not built")


def run_runner(backend, X, y, *args):
    """Runs `streamknn run` on (X, y) written as CSV; returns the predictions column."""
    with tempfile.TemporaryDirectory() as tmp:
        data, out = os.path.join(tmp, "stream.csv"), os.path.join(tmp, "predictions.csv")
        with open(data, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow([f"f{j}" for j in range(X.shape[1])] + ["target"])
            for row, t in zip(X, y):
                w.writerow([f"{v:.9g}" for v in row] + [t if isinstance(t, str) else f"{t:.9g}"])
        cmd = [RUNNER, "run", "--input", data, "--predictions", out, "--backend", backend, "--no-progress", *args]
        done = subprocess.run(cmd, capture_output=True, text=True)
        assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stdout}\n{done.stderr}"
        with open(out, newline="") as f:
            rows = list(csv.DictReader(f))
    assert [int(r["index"]) for r in rows] == list(range(len(X)))
    return [r["prediction"] for r in rows]


def data(rng, n=600, d=4):
    X = rng.normal(size=(n, d)).astype(np.float32)
    X[300:340] = X[100:140]  # exact repeats: distance ties, resolved by arrival
    return X


def one_at_a_time(model, X, y):
    out = []
    for row, t in zip(X, y):
        x = {j: float(v) for j, v in enumerate(row)}
        out.append(model.predict_one(x))
        model.learn_one(x, t)
    return out


def batched(model, X, y, batch):
    out = []
    for start in range(0, len(X), batch):
        out += model.predict_then_learn_many(X[start:start + batch], y[start:start + batch])
    return out


@pytest.mark.parametrize("weights", ["uniform", "distance"])
@pytest.mark.parametrize("window", [50, 0])
@pytest.mark.parametrize("labels", ["integers", "names"])
def test_classification_matches_the_runner(backend, rng, weights, window, labels):
    X = data(rng)
    codes = ((X[:, 0] > 0).astype(int) + 2 * (X[:, 1] > 0.3)).tolist()
    y = [[7, 3, 11, 5][c] for c in codes] if labels == "integers" else [["dog", "cat", "emu", "ant"][c] for c in codes]
    want = run_runner(backend, X, y, "--k", "5", "--weights", weights, "--window", str(window), "--batch", "16")
    size = window or None
    kwargs = dict(weights=weights, backend=backend)
    got_one = one_at_a_time(streamknn.SlidingWindowKNNClassifier(5, size, **kwargs), X, y)
    got_batch = batched(streamknn.SlidingWindowKNNClassifier(5, size, **kwargs), X, y, 37)
    as_text = ["" if p is None else str(p) for p in got_one]
    assert as_text == want
    assert got_batch == got_one


@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_regression_matches_the_runner(backend, rng, weights):
    X = data(rng, n=400, d=3)
    y = (X @ np.array([1.5, -2.0, 0.25], dtype=np.float32)).astype(np.float32)
    want = run_runner(backend, X, y, "--task", "regress", "--k", "4", "--weights", weights, "--window", "60",
                      "--batch", "32")
    aggregate = "mean" if weights == "uniform" else "weighted_mean"
    model = streamknn.SlidingWindowKNNRegressor(4, 60, aggregation_method=aggregate, backend=backend)
    got_one = one_at_a_time(model, X, y.tolist())
    got_batch = batched(streamknn.SlidingWindowKNNRegressor(4, 60, aggregation_method=aggregate, backend=backend),
                        X, y, 29)
    assert want[0] == "" and math.isnan(got_one[0]) and math.isnan(got_batch[0])
    np.testing.assert_array_equal(np.float32(got_one[1:]), np.float32([float(v) for v in want[1:]]))
    np.testing.assert_array_equal(np.float32(got_batch), np.float32(got_one))
