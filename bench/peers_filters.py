#!/usr/bin/env python3
"""bench/peers_filters.py: PyTorch's mask + topk at bench_filters' shapes (docs/filters.md).

On a machine with PyTorch (CUDA where a GPU is usable), in the same run as bench_filters:

    python3 bench/peers_filters.py [--device cuda] [--points 1000000] [--radius-points 10000000]
        [--queries 1,1024] [--reps 10] [--csv peers_filters.csv]

Without PyTorch, --dry-run runs the same loops with numpy at small sizes (checks the script; its
timings mean nothing):

    /usr/bin/python3 bench/peers_filters.py --dry-run

The peers, haversine on (latitude, longitude) in degrees as unit vectors on the sphere (the chord
orders points as the great-circle distance does):
  masked-topk   d2 = |x - q|^2 over every point (addmm form), +inf where the point's attribute
                word lacks bit 0 (10% keep it), topk(16, largest=False): the filtered search;
  topk          the same without the mask: the unfiltered search;
  radius        d2 <= chord(r)^2 as a mask, then the indices of each row's hits, sorted by
                distance (the ~100 points per query bench_filters' radius search returns), against
                topk(100).
Times are medians of --reps runs (CUDA events where on the GPU, wall clock otherwise), host arrays
of queries in, answers left on the device. Printed as a table; --csv writes it.
"""
import argparse
import math
import statistics
import sys
import time

EARTH_M = 6371008.8
LAT0, LAT1, LON0, LON1 = 40.0, 50.0, 0.0, 10.0


def unit(lat, lon, xp):
    la, lo = lat * math.pi / 180, lon * math.pi / 180
    return xp.stack([xp.cos(la) * xp.cos(lo), xp.cos(la) * xp.sin(lo), xp.sin(la)], axis=1)


def radius_for(n, want):
    height = (LAT1 - LAT0) * math.pi / 180 * EARTH_M
    width = (LON1 - LON0) * math.pi / 180 * EARTH_M * math.cos((LAT0 + LAT1) / 2 * math.pi / 180)
    return math.sqrt(want / (math.pi * n / (height * width)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--points", type=int, default=1000000)
    ap.add_argument("--radius-points", type=int, default=10000000)
    ap.add_argument("--queries", default="1,1024")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--csv", default="")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    if a.dry_run:
        import numpy as np
        backend = Numpy(np)
        a.points, a.radius_points, a.queries, a.reps = 20000, 50000, "1,8", 2
    else:
        try:
            import torch
        except ImportError:
            print("bench/peers_filters.py: PyTorch is not installed (use --dry-run to check the script)")
            return 0
        backend = Torch(torch, a.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    rows = []
    for n, kind in ((a.points, "filtered"), (a.radius_points, "radius")):
        x, keep = backend.store(n, seed=1 if kind == "filtered" else 2)
        for q in (int(v) for v in a.queries.split(",")):
            qs = backend.queries(q)
            if kind == "filtered":
                rows.append(("topk", n, q, 16, backend.time(lambda: backend.topk(x, qs, 16, None), a.reps)))
                rows.append(("masked-topk 10%", n, q, 16, backend.time(lambda: backend.topk(x, qs, 16, keep), a.reps)))
            else:
                r = radius_for(n, 100)
                chord2 = (2 * math.sin(r / (2 * EARTH_M))) ** 2
                rows.append(("topk", n, q, 100, backend.time(lambda: backend.topk(x, qs, 100, None), a.reps)))
                rows.append(("radius (~100 points)", n, q, 0, backend.time(lambda: backend.radius(x, qs, chord2),
                                                                            a.reps)))
    print(f"{'peer':24} {'points':>10} {'Q':>6} {'K':>5} {'ms':>10}   ({backend.name})")
    for name, n, q, k, ms in rows:
        print(f"{name:24} {n:10d} {q:6d} {k:5d} {ms:10.3f}")
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("peer,points,queries,k,ms,device\n")
            for name, n, q, k, ms in rows:
                f.write(f"{name},{n},{q},{k},{ms},{backend.name}\n")
    return 0


class Torch:
    def __init__(self, torch, device):
        self.t, self.device, self.name = torch, device, f"torch {torch.__version__} on {device}"
        torch.backends.cuda.matmul.allow_tf32 = False

    def store(self, n, seed):
        g = self.t.Generator(device="cpu").manual_seed(seed)
        lat = LAT0 + (LAT1 - LAT0) * self.t.rand(n, generator=g, dtype=self.t.float64)
        lon = LON0 + (LON1 - LON0) * self.t.rand(n, generator=g, dtype=self.t.float64)
        x = unit(lat, lon, self.t).float().to(self.device)
        keep = (self.t.rand(n, generator=g) < 0.10).to(self.device)
        self.norms = (x * x).sum(1)
        return x, keep

    def queries(self, q):
        lat = LAT0 + 0.5 + (LAT1 - LAT0 - 1) * self.t.rand(q, dtype=self.t.float64)
        lon = LON0 + 0.5 + (LON1 - LON0 - 1) * self.t.rand(q, dtype=self.t.float64)
        return unit(lat, lon, self.t).float().numpy()

    def d2(self, x, qs):
        q = self.t.from_numpy(qs).to(self.device)
        return self.t.addmm(self.norms[None, :], q, x.T, alpha=-2.0) + (q * q).sum(1, keepdim=True)

    def topk(self, x, qs, k, keep):
        d2 = self.d2(x, qs)
        if keep is not None:
            d2 = d2.masked_fill(~keep[None, :], float("inf"))
        return self.t.topk(d2, k, largest=False)

    def radius(self, x, qs, chord2):
        d2 = self.d2(x, qs)
        hits = (d2 <= chord2).nonzero()
        order = self.t.argsort(d2[hits[:, 0], hits[:, 1]] + hits[:, 0].to(d2.dtype) * 8.0)  # by row, then distance
        return hits[order]

    def time(self, f, reps):
        f()
        ms = []
        for _ in range(reps):
            if self.device.startswith("cuda"):
                start, end = self.t.cuda.Event(enable_timing=True), self.t.cuda.Event(enable_timing=True)
                start.record()
                f()
                end.record()
                end.synchronize()
                ms.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                f()
                ms.append(1e3 * (time.perf_counter() - t0))
        return statistics.median(ms)


class Numpy:
    """The dry run's stand-in: the same steps with numpy on the CPU."""

    def __init__(self, np):
        self.np, self.name = np, "numpy (dry run)"

    def store(self, n, seed):
        g = self.np.random.default_rng(seed)
        x = unit(g.uniform(LAT0, LAT1, n), g.uniform(LON0, LON1, n), self.np).astype(self.np.float32)
        self.norms = (x * x).sum(1)
        return x, g.random(n) < 0.10

    def queries(self, q):
        g = self.np.random.default_rng(q)
        return unit(g.uniform(LAT0 + 0.5, LAT1 - 0.5, q), g.uniform(LON0 + 0.5, LON1 - 0.5, q), self.np).astype(
            self.np.float32)

    def d2(self, x, qs):
        return self.norms[None, :] - 2 * qs @ x.T + (qs * qs).sum(1)[:, None]

    def topk(self, x, qs, k, keep):
        d2 = self.d2(x, qs)
        if keep is not None:
            d2 = self.np.where(keep[None, :], d2, self.np.inf)
        return self.np.argpartition(d2, k, axis=1)[:, :k]

    def radius(self, x, qs, chord2):
        return self.np.nonzero(self.d2(x, qs) <= chord2)

    def time(self, f, reps):
        ms = []
        for _ in range(reps):
            t0 = time.perf_counter()
            f()
            ms.append(1e3 * (time.perf_counter() - t0))
        return statistics.median(ms)


if __name__ == "__main__":
    sys.exit(main())
