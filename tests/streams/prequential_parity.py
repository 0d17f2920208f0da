#!/usr/bin/python3
"""`streamknn run --input` against a plain test-then-train loop over scikit-learn.

For each of scikit-learn's bundled data sets (iris, wine, breast-cancer, digits; diabetes and
linnerud for regression), written to CSV in their original row order, and each (k, weights,
window) below, the loop predicts point i with KNeighborsClassifier / KNeighborsRegressor
(algorithm='brute') fitted on the visible points (the last `window` before i, or all of them),
with n_neighbors = min(k, points visible) since the library uses the neighbours that exist. The
runner's predictions file must agree on every point:
  * point 0 sees nothing: the runner leaves its prediction empty;
  * where the k-th and (k+1)-th nearest are at exactly the same distance, scikit-learn's pick is
    unspecified, so those points are checked against the library's documented rule (ties to the
    smaller id, here the arrival index) computed with numpy, and counted;
  * every other point must match scikit-learn: the same class, or the same value within 1e-5.

Usage: prequential_parity.py PATH/TO/streamknn [cpu|cuda]   (exit 77 = skipped: no scikit-learn)
"""
import csv
import os
from fractions import Fraction
import subprocess
import sys
import tempfile

# One fit and one query per point: OpenMP's thread start-up would cost more than the search.
os.environ.setdefault("OMP_NUM_THREADS", "1")

try:
    import numpy as np
    from sklearn import datasets
    from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: scikit-learn / numpy not importable ({e}); install python3-sklearn, run with /usr/bin/python3")
    sys.exit(77)

RUNNER = sys.argv[1]
BACKEND = sys.argv[2] if len(sys.argv) > 2 else "cpu"
TOL = 1e-5
CONFIGS = [  # (k, weights, window)
    (1, "uniform", 0),
    (5, "distance", 0),
    (5, "uniform", 40),
    (5, "uniform", 100),  # iris point 138: an exact tie that float32 rounding once ordered wrongly
    (15, "distance", 100),
]


def write_csv(path, X, y):
    with open(path, "w") as f:
        f.write(",".join([f"f{i}" for i in range(X.shape[1])] + ["target"]) + "\n")
        for row, t in zip(X, y):
            f.write(",".join("%.9g" % v for v in row) + ",%.9g\n" % t)


def run_runner(task, k, weights, window, path, tmp):
    out = os.path.join(tmp, "predictions.csv")
    cmd = [RUNNER, "run", "--input", path, "--task", task, "--k", str(k), "--weights", weights,
           "--window", str(window), "--batch", "32", "--backend", BACKEND, "--predictions", out, "--no-progress"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["index", "prediction", "truth"], rows[0]
    return rows[1:]


def exact_order(Xv, q, k):
    """Indices of Xv by (exact squared distance to q, index), and those squared distances: exact
    (fractions of the float32 values) for every point that float64 cannot tell from the k-th,
    float64 for the rest (each of which lies beyond the k-th by far more than float64's error)."""
    d64 = ((Xv.astype(np.float64) - q.astype(np.float64)) ** 2).sum(axis=1)
    kth = np.sort(d64)[min(k, len(d64)) - 1]
    near = np.nonzero(d64 <= kth * (1 + 1e-9) + 1e-300)[0]
    key = [(float(v), i) for i, v in enumerate(d64)]
    qf = [Fraction(float(v)) for v in q]
    for i in near:
        key[i] = (sum((Fraction(float(x)) - c) ** 2 for x, c in zip(Xv[i], qf)), int(i))
    order = sorted(range(len(key)), key=lambda i: key[i])
    return order, [key[i][0] for i in order]


def rule_prediction(task, weights, Xv, yv, q, k):
    """The library's rule: the k smallest (exact distance, arrival index)."""
    order, sq = exact_order(Xv, q, k)
    idx = np.array(order[:k])
    dk = np.sqrt(np.array([float(s) for s in sq[:k]]))
    if weights == "uniform":
        w = np.ones(len(idx))
    else:
        zero = dk == 0
        w = zero.astype(float) if zero.any() else 1.0 / dk
    if task == "classify":
        classes = np.unique(yv)
        votes = np.array([w[yv[idx] == c].sum() for c in classes])
        return classes[int(np.argmax(votes))]  # argmax: first (smallest) class among equal votes
    return (w * yv[idx]).sum() / w.sum()


def boundary_tied(Xv, q, k):
    if k >= len(Xv):
        return False
    _, sq = exact_order(Xv, q, k + 1)
    return sq[k - 1] == sq[k]


def main():
    if BACKEND != "cpu":
        probe = subprocess.run([RUNNER, "run", "--backend", BACKEND, "--points", "2", "--no-progress"],
                               capture_output=True, text=True)
        if probe.returncode != 0:
            print(f"SKIPPED: the {BACKEND} backend cannot run here: {probe.stderr.strip()}")
            return 77
    cases = [
        ("iris", datasets.load_iris, "classify"),
        ("wine", datasets.load_wine, "classify"),
        ("breast_cancer", datasets.load_breast_cancer, "classify"),
        ("digits", datasets.load_digits, "classify"),
        ("diabetes", datasets.load_diabetes, "regress"),
        ("linnerud", datasets.load_linnerud, "regress"),
    ]
    failures = compared = tied = empty = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, loader, task in cases:
            X, y = loader(return_X_y=True)
            if y.ndim > 1:
                y = y[:, 0]  # one target column (linnerud's weight)
            X = X.astype(np.float32)  # the library stores float32: give scikit-learn the same numbers
            y = y.astype(np.float32).astype(np.float64) if task == "regress" else y.astype(np.int64)
            path = os.path.join(tmp, f"{name}.csv")
            write_csv(path, X, y)
            for k, weights, window in CONFIGS:
                got = run_runner(task, k, weights, window, path, tmp)
                if len(got) != len(X):
                    print(f"  {name}: {len(got)} prediction rows for {len(X)} points")
                    failures += 1
                    continue
                bad = 0
                for i in range(len(X)):
                    lo = max(0, i - window) if window else 0
                    Xv, yv = X[lo:i], y[lo:i]
                    index, prediction, truth = got[i]
                    if int(index) != i:
                        ok = False
                    elif len(Xv) == 0:
                        empty += 1
                        ok = prediction == ""
                    else:
                        kk = min(k, len(Xv))
                        if boundary_tied(Xv, X[i], kk):
                            tied += 1
                            want = rule_prediction(task, weights, Xv, yv, X[i], kk)
                        else:
                            compared += 1
                            Model = KNeighborsClassifier if task == "classify" else KNeighborsRegressor
                            model = Model(n_neighbors=kk, weights=weights, algorithm="brute").fit(Xv, yv)
                            want = model.predict(X[i:i + 1])[0]
                        if task == "classify":
                            ok = prediction != "" and int(prediction) == int(want)
                        else:
                            ok = prediction != "" and abs(float(prediction) - want) <= TOL * max(1.0, abs(want))
                    if not ok:
                        bad += 1
                        if bad <= 3:
                            print(f"  MISMATCH {name} k={k} {weights} window={window} point {i}: "
                                  f"runner {got[i]}, expected {want if len(Xv) else 'no prediction'}")
                status = "ok" if bad == 0 else f"{bad} MISMATCHES"
                print(f"{name:14s} {task:8s} k={k:2d} {weights:8s} window={window:3d} {len(X):5d} points: {status}")
                failures += bad
    print(f"{compared} predictions compared with scikit-learn, {tied} boundary-tied ones with the (distance, id) "
          f"rule, {empty} first points without a prediction")
    if failures:
        print(f"FAILED: {failures} mismatches")
        return 1
    print("all predictions match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
