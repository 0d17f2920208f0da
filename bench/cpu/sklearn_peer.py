#!/usr/bin/python3
"""scikit-learn brute-force peer for bench_cpu_peers (run by that program, not by hand).

Reads one reference set (N x D float32, raw) and its query sets, fits
NearestNeighbors(algorithm='brute') once, then for every Q and every query set times
kneighbors() with time.perf_counter (monotonic) after one warm-up call, repeating until
both --min-reps calls and --budget-ms have passed. Prints one line per timed call:
    T <q> <set> <seconds>
and writes the neighbour indices of set 0 of every Q (int64, Q x K, in --qs order) to --ids,
so the C++ program can check that the answers agree. The first line names the versions, the
BLAS library actually loaded and the thread count.
"""
import argparse
import os
import sys
import time

import numpy as np
import sklearn
from sklearn.neighbors import NearestNeighbors


def loaded_blas():
    libs = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            base = os.path.basename(path)
            if base.startswith("lib") and ("blas" in base or "lapack" in base):
                libs.add(os.path.realpath(path))
    return ",".join(sorted(libs)) or "none"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--queries", required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--d", type=int, required=True)
    ap.add_argument("--k", type=int, required=True)
    ap.add_argument("--qs", required=True)
    ap.add_argument("--sets", type=int, required=True)
    ap.add_argument("--min-reps", type=int, default=5)
    ap.add_argument("--budget-ms", type=float, default=300)
    a = ap.parse_args()

    qs = [int(x) for x in a.qs.split(",")]
    data = np.fromfile(a.data, dtype=np.float32).reshape(a.n, a.d)
    queries = np.fromfile(a.queries, dtype=np.float32)
    nn = NearestNeighbors(n_neighbors=a.k, algorithm="brute").fit(data)
    nn.kneighbors(data[:8])  # loads BLAS and the OpenMP runtime before we look at them
    try:
        from threadpoolctl import threadpool_info
        threads = ";".join(f"{i['internal_api']}={i['num_threads']}" for i in threadpool_info())
    except ImportError:
        threads = "unknown"
    print(f"# sklearn {sklearn.__version__} numpy {np.__version__} blas {loaded_blas()} threads {threads}",
          flush=True)

    offset = 0
    ids_out = []
    for q in qs:
        for s in range(a.sets):
            x = queries[offset:offset + q * a.d].reshape(q, a.d)
            offset += q * a.d
            _, ind = nn.kneighbors(x)  # warm-up
            if s == 0:
                ids_out.append(ind.astype(np.int64))
            reps, spent = 0, 0.0
            while reps < a.min_reps or spent < a.budget_ms * 1e-3:
                t0 = time.perf_counter()
                nn.kneighbors(x)
                dt = time.perf_counter() - t0
                print(f"T {q} {s} {dt:.9f}")
                reps += 1
                spent += dt
            sys.stdout.flush()
    if offset != queries.size:
        sys.exit(f"sklearn_peer: read {offset} query floats of {queries.size}")
    np.concatenate(ids_out).tofile(a.ids)


if __name__ == "__main__":
    main()
