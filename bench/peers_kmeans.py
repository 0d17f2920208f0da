#!/usr/bin/env python3
"""The peers of bench_kmeans (bench/kmeans.cpp) on the same points from the same start.

    /usr/bin/python3 bench/peers_kmeans.py --grid  [--csv kmeans-peers.csv]   PyTorch Lloyd on the GPU
    /usr/bin/python3 bench/peers_kmeans.py --large                             PyTorch, 10,000,000 x 128
    /usr/bin/python3 bench/peers_kmeans.py --cpu                               scikit-learn and FAISS, 2 threads
    common: [--repeats 3] [--warmup 1] [--warmup-ms 200] [--seed 1] [--threads 2]

PyTorch's Lloyd is the usual one: distances |x|^2 - 2 x.c + |c|^2 by a matrix product (FP32; TF32
only if --tf32), argmin, the new centroids by index_add_ and bincount, a centroid without points
kept; it stops when the labels do not change, or after max_iter, as bench_kmeans does with tol=0.
Timed with CUDA events after a warm-up (--warmup fits and --warmup-ms milliseconds, as
bench_kmeans), points already on the device. scikit-learn runs
KMeans(algorithm='lloyd', tol=0) and FAISS faiss.Kmeans (every point used, as many iterations as
scikit-learn ran), both on `--threads` threads. The data generator is bench/kmeans.cpp's
(splitmix64), reproduced here bit for bit. Each row: the median and minimum seconds, iterations.
The CPU peers call whatever libblas.so.3 the system names; LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/
openblas-openmp gives them OpenBLAS, as bench/cpu does.
"""
import argparse
import csv
import statistics
import sys
import time

import numpy as np

M64 = np.uint64


def splitmix(z):
    z = z + M64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> M64(30))) * M64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> M64(27))) * M64(0x94D049BB133111EB)
    return z ^ (z >> M64(31))


def hsh(seed, tag, a, b):
    return splitmix(splitmix(splitmix(M64(seed) ^ M64(tag)) ^ a) ^ b)


def unit(h):
    return (h >> M64(40)).astype(np.float32) * np.float32(2.0 ** -24)


def make_points(n, d, blobs, seed, chunk=1 << 18):
    """bench/kmeans.cpp's make_points and make_start (float32, the same bits)."""
    with np.errstate(over="ignore"):
        j = np.arange(d, dtype=np.uint64)[None, :]
        centres = np.float32(20.0) * unit(hsh(seed, 1, np.arange(blobs, dtype=np.uint64)[:, None], j)) - np.float32(10.0)
        x = np.empty((n, d), dtype=np.float32)
        for lo in range(0, n, chunk):
            i = np.arange(lo, min(n, lo + chunk), dtype=np.uint64)
            b = (hsh(seed, 2, i, M64(0)) % M64(blobs)).astype(np.int64)
            x[lo:lo + len(i)] = centres[b] + (np.float32(2.0) * unit(hsh(seed, 3, i[:, None], j)) - np.float32(1.0))
    return x


def make_start(x, k, seed):
    with np.errstate(over="ignore"):
        rows = (hsh(seed, 4, np.arange(k, dtype=np.uint64), M64(0)) % M64(len(x))).astype(np.int64)
    return x[rows].copy()


def torch_lloyd(torch, x, c, max_iter, chunk):
    """PyTorch Lloyd on device tensors; returns (iterations, inertia)."""
    k = c.shape[0]
    x2 = (x * x).sum(1)
    labels = torch.full((x.shape[0],), -1, dtype=torch.int64, device=x.device)
    it = 0
    for it in range(1, max_iter + 1):
        c2 = (c * c).sum(1)
        new = torch.empty_like(labels)
        for lo in range(0, x.shape[0], chunk):
            xs = x[lo:lo + chunk]
            dist = x2[lo:lo + chunk, None] - 2.0 * (xs @ c.T) + c2[None, :]
            new[lo:lo + chunk] = dist.argmin(1)
        sums = torch.zeros_like(c).index_add_(0, new, x)
        counts = torch.bincount(new, minlength=k)
        c = torch.where(counts[:, None] > 0, sums / counts.clamp(min=1)[:, None].to(c.dtype), c)
        same = bool(torch.equal(new, labels))
        labels = new
        if same:
            break
    inertia = float(((x - c[labels]) ** 2).sum())
    return it, inertia


def time_torch(shape, args):
    import torch
    if not torch.cuda.is_available():
        print("peers_kmeans: no CUDA device for PyTorch; skipped", file=sys.stderr)
        return []
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    n, d, k, iters = shape
    xh = make_points(n, d, k, args.seed)
    x = torch.from_numpy(xh).cuda()
    c0 = torch.from_numpy(make_start(xh, k, args.seed)).cuda()
    chunk = max(1, min(n, (1 << 31) // (4 * k)))  # at most 2 GiB of distances at a time
    # as bench_kmeans: untimed fits until both --warmup fits and --warmup-ms have passed
    t0, done = time.perf_counter(), 0
    while done < args.warmup or (time.perf_counter() - t0) * 1e3 < args.warmup_ms:
        torch_lloyd(torch, x, c0.clone(), iters, chunk)
        torch.cuda.synchronize()
        done += 1
    times, it, inertia = [], 0, 0.0
    for _ in range(args.repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        it, inertia = torch_lloyd(torch, x, c0.clone(), iters, chunk)
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    name = "pytorch-tf32" if args.tf32 else "pytorch-fp32"
    return [(name, torch.cuda.get_device_name(), n, d, k, iters, it, times, inertia)]


def time_cpu(shape, args):
    n, d, k, iters = shape
    x = make_points(n, d, k, args.seed)
    c0 = make_start(x, k, args.seed)
    rows = []
    try:
        from sklearn.cluster import KMeans
        from threadpoolctl import threadpool_limits
    except ImportError as e:
        print(f"peers_kmeans: scikit-learn skipped ({e})", file=sys.stderr)
        KMeans = None
    sk_iters = iters
    if KMeans is not None:
        x64, c64 = x.astype(np.float64), c0.astype(np.float64)
        times = []
        with threadpool_limits(args.threads):
            for r in range(args.warmup + args.repeats):
                t = time.perf_counter()
                km = KMeans(k, init=c64, n_init=1, max_iter=iters, tol=0, algorithm="lloyd").fit(x64)
                if r >= args.warmup:
                    times.append(time.perf_counter() - t)
        sk_iters = km.n_iter_
        rows.append(("sklearn-lloyd", "cpu", n, d, k, iters, km.n_iter_, times, float(km.inertia_)))
    try:
        import faiss
    except ImportError as e:
        print(f"peers_kmeans: FAISS skipped ({e})", file=sys.stderr)
        return rows
    faiss.omp_set_num_threads(args.threads)
    times = []
    for r in range(args.warmup + args.repeats):
        km = faiss.Kmeans(d, k, niter=sk_iters, seed=args.seed, max_points_per_centroid=n, min_points_per_centroid=1)
        t = time.perf_counter()
        km.train(x, init_centroids=c0)
        if r >= args.warmup:
            times.append(time.perf_counter() - t)
    rows.append(("faiss-kmeans", "cpu", n, d, k, iters, sk_iters, times, float(km.obj[-1])))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--grid", action="store_true")
    p.add_argument("--large", action="store_true")
    p.add_argument("--cpu", action="store_true")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--warmup-ms", type=float, default=200.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tf32", action="store_true")
    p.add_argument("--csv", default="kmeans-peers.csv")
    args = p.parse_args()
    rows = []
    if args.grid:
        for k in (4, 16, 32):
            for d in (2, 16, 256):
                rows += time_torch((1000000, d, k, 300), args)
    if args.large:
        rows += time_torch((10000000, 128, 1024, 20), args)
    if args.cpu:
        rows += time_cpu((100000, 32, 64, 300), args)
    if not (args.grid or args.large or args.cpu):
        p.error("give --grid, --large or --cpu")
    with open(args.csv, "w", newline="") as f:
        out = csv.writer(f)
        f.write("# peers_kmeans " + " ".join(sys.argv[1:]) + "\n")
        out.writerow(["peer", "device", "n", "d", "k", "max_iter", "iterations", "median_s", "min_s", "inertia"])
        print(f"{'peer':<14} {'n':>9} {'d':>4} {'k':>5} {'iters':>5} {'median s':>10} {'min s':>10}")
        for name, dev, n, d, k, mi, it, times, inertia in rows:
            med, best = statistics.median(times), min(times)
            out.writerow([name, dev, n, d, k, mi, it, f"{med:.6f}", f"{best:.6f}", f"{inertia:.9g}"])
            print(f"{name:<14} {n:>9} {d:>4} {k:>5} {it:>5} {med:>10.4f} {best:>10.4f}")


if __name__ == "__main__":
    main()
