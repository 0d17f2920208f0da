#!/usr/bin/python3
"""Predictions of streamknn's KnnClassifier / KnnRegressor against scikit-learn's
KNeighborsClassifier / KNeighborsRegressor(algorithm='brute') on scikit-learn's bundled data
sets (iris, wine, breast-cancer, digits; diabetes and linnerud for regression), for k in
{1, 5, 15} and both weightings.

Where the k-th and (k+1)-th neighbours of a query are at exactly the same distance, the k
nearest are not unique and scikit-learn picks among them in an unspecified order (argpartition).
For those queries the check is against streamknn's documented rule (ties to the smaller id,
here the training row index) computed here with numpy; every other query must match
scikit-learn exactly: same label, probabilities and values within 1e-5.

Usage: parity.py PATH/TO/knn_predict [cpu|cuda]    (exit 77 = skipped: scikit-learn missing)
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from sklearn import datasets
    from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: scikit-learn / numpy not importable ({e}); install python3-sklearn")
    sys.exit(77)

TOOL = sys.argv[1]
BACKEND = sys.argv[2] if len(sys.argv) > 2 else "cpu"
TOL = 1e-5


def split(X, y, seed):
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(X))
    cut = int(0.7 * len(X))
    return X[order[:cut]], y[order[:cut]], X[order[cut:]], y[order[cut:]]


def run_tool(task, k, weights, n, Xtr, ytr, Xte, tmp):
    train = os.path.join(tmp, "train.csv")
    test = os.path.join(tmp, "test.csv")
    out = os.path.join(tmp, "out.csv")
    np.savetxt(train, np.column_stack([Xtr, ytr.reshape(len(Xtr), -1)]), delimiter=",", fmt="%.9g")
    np.savetxt(test, Xte, delimiter=",", fmt="%.9g")
    subprocess.run([TOOL, task, str(k), weights, str(n), train, test, out, BACKEND], check=True)
    return np.loadtxt(out, delimiter=",", ndmin=2)


def rule_neighbours(Xtr, q, k):
    """streamknn's rule: k smallest (distance, index); exact distances in float64."""
    d = np.sqrt(((Xtr.astype(np.float64) - q.astype(np.float64)) ** 2).sum(axis=1))
    order = np.lexsort((np.arange(len(d)), d))
    return d, order[:k]


def boundary_tied(d, k):
    s = np.sort(d)
    return k < len(s) and s[k - 1] == s[k]


def rule_prediction(task, weights, Xtr, ytr, q, k, classes):
    d, idx = rule_neighbours(Xtr, q, k)
    dk = d[idx]
    if weights == "uniform":
        w = np.ones(k)
    else:
        zero = dk == 0
        w = zero.astype(float) if zero.any() else 1.0 / dk
    if task == "classify":
        votes = np.zeros(len(classes))
        for wi, label in zip(w, ytr[idx]):
            votes[int(label)] += wi
        return int(np.argmax(votes)), votes / votes.sum()
    return (w[:, None] * ytr[idx].reshape(k, -1)).sum(axis=0) / w.sum()


def main():
    cases = [
        ("iris", datasets.load_iris, "classify"),
        ("wine", datasets.load_wine, "classify"),
        ("breast_cancer", datasets.load_breast_cancer, "classify"),
        ("digits", datasets.load_digits, "classify"),
        ("diabetes", datasets.load_diabetes, "regress"),
        ("linnerud", datasets.load_linnerud, "regress"),
    ]
    failures = 0
    compared = tied = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, loader, task in cases:
            X, y = loader(return_X_y=True)
            X = X.astype(np.float32)  # streamknn stores float32: give scikit-learn the same numbers
            y = y.astype(np.float64)
            Xtr, ytr, Xte, yte = split(X, y, seed=len(name))
            classes = np.unique(ytr)
            for k in (1, 5, 15):
                if k > len(Xtr):  # scikit-learn refuses k > n_samples
                    continue
                for weights in ("uniform", "distance"):
                    if task == "classify":
                        # Labels are 0..C-1 in every bundled set; streamknn takes them as they are.
                        n = int(classes.max()) + 1
                        model = KNeighborsClassifier(n_neighbors=k, weights=weights, algorithm="brute").fit(Xtr, ytr)
                        want_label = model.predict(Xte)
                        want_proba = np.zeros((len(Xte), n))
                        want_proba[:, model.classes_.astype(int)] = model.predict_proba(Xte)
                    else:
                        n = 1 if ytr.ndim == 1 else ytr.shape[1]
                        model = KNeighborsRegressor(n_neighbors=k, weights=weights, algorithm="brute").fit(Xtr, ytr)
                        want_value = model.predict(Xte).reshape(len(Xte), -1)
                    got = run_tool(task, k, weights, n, Xtr, ytr, Xte, tmp)
                    bad = 0
                    for i, q in enumerate(Xte):
                        d, _ = rule_neighbours(Xtr, q, k)
                        if boundary_tied(d, k):
                            tied += 1
                            want = rule_prediction(task, weights, Xtr, ytr, q, k, np.arange(n))
                            if task == "classify":
                                ok = got[i, 0] == want[0] and np.allclose(got[i, 1:], want[1], atol=TOL)
                            else:
                                ok = np.allclose(got[i], want, rtol=TOL, atol=TOL)
                        else:
                            compared += 1
                            if task == "classify":
                                ok = got[i, 0] == want_label[i] and np.allclose(got[i, 1:], want_proba[i], atol=TOL)
                            else:
                                ok = np.allclose(got[i], want_value[i], rtol=TOL, atol=TOL)
                        if not ok:
                            bad += 1
                            if bad <= 3:
                                print(f"  MISMATCH {name} k={k} {weights} query {i}: got {got[i]}")
                    status = "ok" if bad == 0 else f"{bad} MISMATCHES"
                    print(f"{name:14s} {task:8s} k={k:2d} {weights:8s} {len(Xte):4d} queries: {status}")
                    failures += bad
    print(f"{compared} predictions compared with scikit-learn, {tied} boundary-tied ones with the (distance, id) rule")
    if failures:
        print(f"FAILED: {failures} mismatches")
        return 1
    print("all predictions match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
