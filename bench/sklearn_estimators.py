#!/usr/bin/python3
"""streamknn's scikit-learn estimators against scikit-learn's own, same data, same machine.

    PYTHONPATH=build/python /usr/bin/python3 bench/sklearn_estimators.py [--n 100000] [--d 32]
        [--queries 10000] [--k 10] [--reps 7] [--backend cpu] [--fit-only]

Times (median of --reps calls, time.perf_counter, one warm-up call first) for
KNeighborsClassifier / KNeighborsRegressor / NearestNeighbors: fit on n x d float64 rows
(standard normal), predict (kneighbors for NearestNeighbors) of --queries rows, kneighbors of
those rows, and one query row at a time (mean over 200 calls). scikit-learn runs
algorithm='brute' (its fastest exact search at this width) and, for the fit, also its default
'auto'. Prints a Markdown table and the BLAS library scikit-learn loaded.

--fit-only times fit alone (the same estimator refitted, as above) on float32 and float64 input,
C- and Fortran-ordered (the same values), streamknn against scikit-learn's 'brute' fit.
"""
import argparse
import os
import time

import numpy as np
import sklearn
from sklearn import neighbors as skn

import streamknn


def loaded_blas():
    libs = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            base = os.path.basename(line.split()[-1])
            if base.startswith("lib") and ("blas" in base or "lapack" in base):
                libs.add(base)
    return ",".join(sorted(libs)) or "none"


def median_ms(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def one_query_ms(model, Q, calls=200):
    model.kneighbors(Q[:1])
    start = time.perf_counter()
    for i in range(calls):
        model.kneighbors(Q[i % len(Q):i % len(Q) + 1])
    return 1e3 * (time.perf_counter() - start) / calls


def fit_table(a, X, targets):
    """Fit times per estimator, input dtype and memory order: streamknn, scikit-learn, ratio."""
    print("| estimator | input | streamknn fit | scikit-learn fit | ratio |")
    print("|---|---|---:|---:|---:|")
    for name, y in targets.items():
        ours = getattr(streamknn, name)(n_neighbors=a.k, backend=a.backend)
        ref = getattr(skn, name)(n_neighbors=a.k, algorithm="brute")
        for dtype in (np.float32, np.float64):
            for order in ("C", "F"):
                Xi = np.asarray(X, dtype=dtype, order=order)
                mine = median_ms(lambda: ours.fit(Xi, y), a.reps)
                theirs = median_ms(lambda: ref.fit(Xi, y), a.reps)
                print(f"| {name} | {np.dtype(dtype).name} {order} | {mine:.2f} | {theirs:.2f} | "
                      f"{mine / theirs:.1f}x |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--d", type=int, default=32)
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--fit-only", action="store_true", help="time fit alone, per input dtype and order")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    X = rng.standard_normal((a.n, a.d))
    Q = rng.standard_normal((a.queries, a.d))
    targets = {"KNeighborsClassifier": rng.integers(0, 10, a.n), "KNeighborsRegressor": rng.standard_normal(a.n),
               "NearestNeighbors": None}
    print(f"n={a.n} d={a.d} queries={a.queries} k={a.k}; scikit-learn {sklearn.__version__} "
          f"(BLAS {loaded_blas()}), numpy {np.__version__}, streamknn {streamknn.__version__} "
          f"backend={a.backend}, {os.cpu_count()} CPUs; ms, median of {a.reps}")
    if a.fit_only:
        return fit_table(a, X, targets)
    print("| estimator | library | fit | fit (sklearn auto) | predict | kneighbors | 1 query |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, y in targets.items():
        ours = getattr(streamknn, name)(n_neighbors=a.k, backend=a.backend)
        ref = getattr(skn, name)(n_neighbors=a.k, algorithm="brute")
        auto = getattr(skn, name)(n_neighbors=a.k)
        for label, model in (("streamknn", ours), ("scikit-learn", ref)):
            fit = median_ms(lambda: model.fit(X, y), a.reps)
            fit_auto = median_ms(lambda: auto.fit(X, y), a.reps) if model is ref else float("nan")
            predict = median_ms(lambda: model.predict(Q), a.reps) if y is not None else float("nan")
            kneighbors = median_ms(lambda: model.kneighbors(Q), a.reps)
            single = one_query_ms(model, Q)
            cells = [f"{v:.1f}" if v == v else "-" for v in (fit, fit_auto, predict, kneighbors)]
            print(f"| {name} | {label} | " + " | ".join(cells) + f" | {single:.2f} |")


if __name__ == "__main__":
    main()
