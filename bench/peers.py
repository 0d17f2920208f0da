#!/usr/bin/env python3
"""bench/peers.py: exact k-NN with PyTorch at bench_search's shapes, and the comparison table.

On a machine with a GPU (PyTorch with CUDA), in the same run as bench_search (bench/run_suite.sh
does this; RUN is its output folder):

    python3 bench/peers.py run --ceilings RUN/search.csv --csv RUN/peers.csv
        [--shapes mnist,imagenet,googlenews] [--k 64,128] [--q 1,2,4,8,12,16,32,64]
        [--reps 30] [--sets 3] [--warmup 3] [--peers matmul,cdist] [--budget-s 240]

Anywhere (standard library only), the one table: ours against every peer:

    python3 bench/peers.py table --ours RUN/search.csv [RUN/lowdim.csv] --peers RUN/peers.csv \
        --faiss bench/reference/peers/faiss-gpuflat-h100.csv --csv RUN/compare.csv
    python3 bench/peers.py selftest      # checks the table logic

Without a GPU, the whole `run` path with a numpy stand-in for PyTorch at small N (checks the
loops, the exactness check and the CSV; its timings mean nothing):

    /usr/bin/python3 bench/peers.py run --dry-run --csv /tmp/peers-dry.csv

The peers (fp32 throughout; TF32 is switched off, `torch.backends.cuda.matmul.allow_tf32 =
False`, and a matmul that TF32 could not get exact proves it before anything is timed):
  torch-matmul-topk  d2 = |x|^2 - 2 q x^T (torch.addmm; the reference norms |x|^2 computed once,
                     as an index would), torch.topk(k, largest=False), then sqrt(d2 + |q|^2) of
                     the k kept: the usual PyTorch brute force.
  torch-cdist-topk   torch.cdist(q, x) (default compute_mode: at these sizes PyTorch takes its
                     matmul path, rebuilding the augmented reference matrix on every call), then
                     torch.topk(k, largest=False).
Neither is direct-form like streamknn (|x|^2 - 2qx + |q|^2 cancels), so their distances can
differ in the last bits and near-ties can swap; the `# check` lines of the CSV give the overlap
of one query's top-K with a float64 direct-form brute force.

Timing, like bench_search: random uniform [0,1) reference (fixed seed, generated on the device),
`sets` query sets drawn from numpy on the host, `warmup` untimed searches, then `reps` timed
ones cycling over the sets; median, p10, p90. Two variants:
  host    numpy queries in, numpy answers (distances and ids) out, wall clock (time.perf_counter),
          as bench_search times streamknn (host to host);
  device  queries already on the device, answers left there; CUDA events around the search.
The floor columns use the read bandwidth and FP32 rate that bench_search measured in the same
run (its `# device` line, --ceilings); without it they stay empty.

Output columns: bench_search's (shape,N,D,K,Q,median_ms,p10_ms,p90_ms,qps,floor_ms,
achieved_over_floor) then peer,variant.
"""
import argparse
import csv
import os
import time

SHAPES = {  # bench_search's names and sizes (bench/search.cpp)
    "mnist": ("MNIST-like", 70000, 784),
    "imagenet": ("ImageNet-like", 1275219, 128),
    "googlenews": ("GoogleNews-like", 3000000, 300),
    "small": ("small", 100000, 128),
    "tiny": ("tiny (fixed cost)", 1000, 16),
    "gis100k": ("low-dim 100k x 2", 100000, 2),
    "gis1m": ("low-dim 1M x 2", 1000000, 2),
    "gis10m": ("low-dim 10M x 2", 10000000, 2),
}
PEERS = {"matmul": "torch-matmul-topk", "cdist": "torch-cdist-topk"}
COLUMNS = ["shape", "N", "D", "K", "Q", "median_ms", "p10_ms", "p90_ms", "qps", "floor_ms",
           "achieved_over_floor", "peer", "variant"]


# ---------------------------------------------------------------------------------------------
# CSV helpers (standard library only)

def read_rows(path):
    """Rows of a CSV whose comment lines start with '#' (anywhere in the file)."""
    with open(path, newline="") as f:
        lines = [line for line in f if line.strip() and not line.startswith("#")]
    return list(csv.DictReader(lines))


def read_comments(path):
    with open(path) as f:
        return [line.rstrip("\n") for line in f if line.startswith("#")]


def read_ceilings(path):
    """(device line, read_gbps, fp32_tflops) from bench_search's '# device,NAME,read_gbps,X,fp32_tflops,Y'."""
    for line in read_comments(path):
        parts = line[1:].strip().split(",")
        if parts and parts[0] == "device" and "read_gbps" in parts and "fp32_tflops" in parts:
            bw = float(parts[parts.index("read_gbps") + 1])
            fl = float(parts[parts.index("fp32_tflops") + 1])
            return line, bw, fl
    raise SystemExit(f"{path}: no '# device,...,read_gbps,X,fp32_tflops,Y' line (is it a bench_search CSV?)")


def floor_ms(n, d, q, read_gbps, fp32_tflops):
    """bench_search's floor: max(store bytes / read bandwidth, 3 N D Q flops / FP32 rate)."""
    return max(n * d * 4 / (read_gbps * 1e9), 3.0 * n * d * q / (fp32_tflops * 1e12)) * 1e3


def summarise(ms):
    """median, p10, p90 exactly as bench_search takes them (sorted[n/2], sorted[n/10], sorted[9n/10])."""
    s = sorted(ms)
    return s[len(s) // 2], s[len(s) // 10], s[len(s) * 9 // 10]


# ---------------------------------------------------------------------------------------------
# Engines: PyTorch on the GPU, numpy as the stand-in for --dry-run

class TorchEngine:
    def __init__(self):
        import numpy as np
        import torch
        if not torch.cuda.is_available():
            raise SystemExit("peers.py run: torch.cuda.is_available() is False (use --dry-run without a GPU)")
        self.np, self.torch = np, torch
        # Exact fp32 like streamknn: no TF32 rounding of the matmul inputs. One API only (mixing
        # allow_tf32 with fp32_precision makes newer PyTorch raise): the legacy flag, or the new
        # one where the legacy flag is gone. The matmul check in run() proves the effect.
        try:
            torch.backends.cuda.matmul.allow_tf32 = False
            self.tf32_api = "torch.backends.cuda.matmul.allow_tf32 = False"
        except (AttributeError, RuntimeError):
            torch.backends.cuda.matmul.fp32_precision = "ieee"
            self.tf32_api = "torch.backends.cuda.matmul.fp32_precision = 'ieee'"
        self.dev = torch.device("cuda")
        self.name = torch.cuda.get_device_name(0)
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def describe(self):
        t = self.torch
        try:
            tf32 = t.backends.cuda.matmul.allow_tf32
        except Exception as e:  # a newer PyTorch may refuse to read a flag set the other way
            tf32 = f"unreadable ({type(e).__name__})"
        return [f"# torch,{t.__version__},cuda,{t.version.cuda},device,{self.name}",
                f"# tf32_off_by,{self.tf32_api},allow_tf32 reads,{tf32}"]

    def matmul_check(self):
        """max |A I - A| for A = 1 + j 2^-22 (exact in fp32, j < 2^12; TF32 keeps 10 mantissa bits
        and rounds every entry to 1 or 1 + 2^-10 multiples), so 0 means full fp32 inputs."""
        t = self.torch
        g = t.Generator(device="cuda").manual_seed(5)
        a = 1 + t.randint(1, 1 << 12, (512, 512), generator=g, device=self.dev).float() * 2.0 ** -22
        return float(((a @ t.eye(512, device=self.dev)) - a).abs().max())

    def reference(self, n, d, seed):
        t = self.torch
        g = t.Generator(device="cuda").manual_seed(seed)
        x = t.rand(n, d, generator=g, device=self.dev, dtype=t.float32)
        xnorm = t.einsum("ij,ij->i", x, x)  # once, as an index keeps its norms
        return x, xnorm

    def release(self):
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()

    def upload(self, qh):
        return self.torch.from_numpy(qh).to(self.dev)

    def download(self, res):
        return res[0].cpu().numpy(), res[1].cpu().numpy()  # .cpu() waits for the search

    def sync(self):
        self.torch.cuda.synchronize()

    def matmul_topk(self, ref, q, k):
        t = self.torch
        x, xnorm = ref
        d2 = t.addmm(xnorm.unsqueeze(0), q, x.t(), beta=1, alpha=-2)  # |x|^2 - 2 q.x
        vals, idx = t.topk(d2, k, dim=1, largest=False)
        qnorm = t.einsum("ij,ij->i", q, q).unsqueeze(1)
        return (vals + qnorm).clamp_min_(0).sqrt_(), idx

    def cdist_topk(self, ref, q, k):
        d = self.torch.cdist(q, ref[0])
        return self.torch.topk(d, k, dim=1, largest=False)

    def time_device(self, fn):
        self.start.record()
        fn()
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end)

    def exact(self, ref, qh, k):
        """float64 direct-form brute force of one query (row 0 of qh): (distances, ids) ascending."""
        t = self.torch
        x = ref[0]
        q = t.from_numpy(qh[:1]).to(self.dev).double()
        parts = [((c.double() - q) ** 2).sum(1) for c in x.split(1 << 18)]
        d2 = t.cat(parts)
        vals, idx = t.topk(d2, k, largest=False)
        return vals.sqrt().cpu().numpy(), idx.cpu().numpy()


class NumpyEngine:
    """--dry-run stand-in: same interface, numpy on the host. Only checks the plumbing."""

    def __init__(self):
        import numpy as np
        self.np = np
        self.name = "numpy stand-in (dry run, timings meaningless)"

    def describe(self):
        return [f"# dry-run,numpy,{self.np.__version__}"]

    def matmul_check(self):
        np = self.np
        rng = np.random.default_rng(5)
        a = (1 + rng.integers(1, 1 << 12, (512, 512)) * 2.0 ** -22).astype(np.float32)
        return float(np.abs(a @ np.eye(512, dtype=np.float32) - a).max())

    def reference(self, n, d, seed):
        np = self.np
        x = np.random.default_rng(seed).random((n, d), dtype=np.float32)
        return x, np.einsum("ij,ij->i", x, x)

    def release(self):
        pass

    def upload(self, qh):
        return qh.copy()

    def download(self, res):
        return res[0].copy(), res[1].copy()

    def sync(self):
        pass

    def _topk(self, d, k):
        np = self.np
        part = np.argpartition(d, k - 1, axis=1)[:, :k]
        order = np.argsort(np.take_along_axis(d, part, 1), axis=1, kind="stable")
        idx = np.take_along_axis(part, order, 1)
        return np.take_along_axis(d, idx, 1), idx

    def matmul_topk(self, ref, q, k):
        np = self.np
        x, xnorm = ref
        vals, idx = self._topk(xnorm[None, :] - 2 * (q @ x.T), k)
        qnorm = np.einsum("ij,ij->i", q, q)[:, None]
        return np.sqrt(np.maximum(vals + qnorm, 0)), idx

    def cdist_topk(self, ref, q, k):
        np = self.np
        d = np.stack([np.sqrt(((ref[0] - row) ** 2).sum(1)) for row in q])  # direct form, row by row
        return self._topk(d, k)

    def time_device(self, fn):
        a = time.perf_counter()
        fn()
        return (time.perf_counter() - a) * 1e3

    def exact(self, ref, qh, k):
        np = self.np
        d2 = ((ref[0].astype(np.float64) - qh[0].astype(np.float64)) ** 2).sum(1)
        idx = np.argsort(d2, kind="stable")[:k]
        return np.sqrt(d2[idx]), idx


# ---------------------------------------------------------------------------------------------
# run

def run(args):
    engine = NumpyEngine() if args.dry_run else TorchEngine()
    np = engine.np
    ceilings = read_ceilings(args.ceilings) if args.ceilings else None
    err = engine.matmul_check()
    print(f"peers.py on {engine.name}: TF32 check, max |A I - A| = {err:.3g} (0: full fp32 matmul inputs)", flush=True)
    if err != 0:
        raise SystemExit(f"max |A I - A| = {err:.3g}, not 0: the matmul rounds its fp32 inputs (TF32?); refusing to time")
    t_begin = time.perf_counter()
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    ks = [int(v) for v in args.k.split(",")]
    qs = [int(v) for v in args.q.split(",")]
    os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
    out = open(args.csv, "w", newline="")
    if ceilings:
        out.write(ceilings[0] + f",from,{os.path.basename(args.ceilings)}\n")
    for line in engine.describe():
        out.write(line + "\n")
    out.write(f"# tf32_check,max_abs(A I - A) for A = 1 + j 2^-22,{err:.3g}\n")
    out.write(f"# timing,warmup,{args.warmup},reps,{args.reps},sets,{args.sets},host=perf_counter host to host,"
              f"device=CUDA events device to device\n")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    print(f"{'peer':<18} {'variant':<7} {'shape':<16} {'N':>8} {'D':>4} {'K':>4} {'Q':>3} {'ms':>9} {'q/s':>10} "
          f"{'floor%':>7}", flush=True)
    rng = np.random.default_rng(1234)
    stopped = False
    for key in args.shapes.split(","):
        name, n, d = SHAPES[key]
        if args.dry_run:
            n = min(n, args.dry_run_n)
        if time.perf_counter() - t_begin > args.budget_s:
            stopped = True
            break
        ref = engine.reference(n, d, 42)
        engine.sync()
        fns = {"matmul": engine.matmul_topk, "cdist": engine.cdist_topk}
        for k in ks:
            # Exactness check: one query's top-K against float64 direct form, per peer.
            qh = rng.random((1, d), dtype=np.float32)
            exact_d, exact_i = engine.exact(ref, qh, k)
            for p in peers:
                dist, ids = engine.download(fns[p](ref, engine.upload(qh), k))
                overlap = len(set(ids[0].tolist()) & set(exact_i.tolist()))
                max_err = float(np.abs(dist[0].astype(np.float64) - exact_d).max())
                out.write(f"# check,{name},{PEERS[p]},K={k},Q=1,id_overlap={overlap}/{k},"
                          f"max_abs_dist_err={max_err:.3g},kth_dist_float64={exact_d[-1]:.6g}\n")
            for q in qs:
                sets = [rng.random((q, d), dtype=np.float32) for _ in range(args.sets)]
                dev_sets = [engine.upload(s) for s in sets]
                for p in peers:
                    fn = fns[p]
                    for _ in range(args.warmup):
                        engine.download(fn(ref, engine.upload(sets[0]), k))
                    for v in variants:
                        ms = []
                        for r in range(args.reps):
                            if v == "host":
                                engine.sync()
                                a = time.perf_counter()
                                res = engine.download(fn(ref, engine.upload(sets[r % args.sets]), k))
                                ms.append((time.perf_counter() - a) * 1e3)
                                if res[1].shape != (q, k):
                                    raise SystemExit(f"{PEERS[p]}: result shape {res[1].shape}, expected {(q, k)}")
                            else:
                                qd = dev_sets[r % args.sets]
                                ms.append(engine.time_device(lambda: fn(ref, qd, k)))
                        med, p10, p90 = summarise(ms)
                        fl = floor_ms(n, d, q, ceilings[1], ceilings[2]) if ceilings else None
                        writer.writerow([name, n, d, k, q, f"{med:.5f}", f"{p10:.5f}", f"{p90:.5f}",
                                         f"{q / (med * 1e-3):.1f}", "" if fl is None else f"{fl:.5f}",
                                         "" if fl is None else f"{fl / med:.4f}", PEERS[p], v])
                        out.flush()
                        pct = "" if fl is None else f"{100 * fl / med:6.1f}%"
                        print(f"{PEERS[p]:<18} {v:<7} {name:<16} {n:>8} {d:>4} {k:>4} {q:>3} {med:>9.4f} "
                              f"{q / (med * 1e-3):>10.0f} {pct:>7}", flush=True)
                del dev_sets
        ref = fns = None  # frees the device copy before the next shape
        engine.release()
    if stopped:
        out.write(f"# stopped,time budget of {args.budget_s} s spent before every shape ran\n")
        print(f"peers.py: stopped, time budget of {args.budget_s} s spent", flush=True)
    out.close()
    print(f"peers.py: wrote {args.csv} in {time.perf_counter() - t_begin:.0f} s", flush=True)


# ---------------------------------------------------------------------------------------------
# table

def _key(row):
    return int(row["N"]), int(row["D"]), int(row["K"]), int(row["Q"])


def compare(ours, peers=(), faiss=(), variant="host"):
    """Rows of the comparison: one per row of `ours` (bench_search CSV rows, dicts of strings).

    peers: rows of a peers.py CSV; faiss: rows of the FAISS CSV (columns shape,N,D,K,Q,variant,
    median_ms,qps). Matching is on (N, D, K, Q) only (the FAISS shape names differ).
    Ratios are ours q/s over peer q/s: above 1, streamknn answers more queries per second.
    Returns (peer_names, rows), each row a dict with shape,N,D,K,Q,ours_qps and per peer
    '<peer>_host_qps', '<peer>_device_qps' and 'ours_over_<peer>' (for `variant`), None when absent.
    """
    index = {}
    names = []
    for r in peers:
        index[(r["peer"], r["variant"]) + _key(r)] = float(r["qps"])
        if r["peer"] not in names:
            names.append(r["peer"])
    if faiss:
        names.append("faiss-gpuflatl2")
        for r in faiss:
            index[("faiss-gpuflatl2", r["variant"]) + _key(r)] = float(r["qps"])
    rows = []
    for r in ours:
        key = _key(r)
        out = {"shape": r["shape"], "N": key[0], "D": key[1], "K": key[2], "Q": key[3], "ours_qps": float(r["qps"])}
        for p in names:
            host = index.get((p, "host") + key)
            dev = index.get((p, "device") + key)
            out[f"{p}_host_qps"] = host
            out[f"{p}_device_qps"] = dev
            chosen = host if variant == "host" else dev
            out[f"ours_over_{p}"] = out["ours_qps"] / chosen if chosen else None
        rows.append(out)
    return names, rows


def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


def _cell(column, v):
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.1f}" if column.endswith("_qps") else f"{v:.4f}"
    return v


def format_table(names, rows, variant="host"):
    short = {"torch-matmul-topk": "matmul+topk", "torch-cdist-topk": "cdist+topk", "faiss-gpuflatl2": "FAISS*"}
    head = f"{'shape':<16} {'K':>4} {'Q':>4} {'ours q/s':>10}"
    for p in names:
        head += f" | {short.get(p, p)[:12]:>12} {'ours/it':>7}"
    lines = [head, "-" * len(head)]
    for r in rows:
        line = f"{r['shape']:<16} {r['K']:>4} {r['Q']:>4} {r['ours_qps']:>10.0f}"
        for p in names:
            line += f" | {_fmt(r[f'{p}_{variant}_qps'], '12.0f'):>12} {_fmt(r[f'ours_over_{p}'], '7.2f'):>7}"
        lines.append(line)
    notes = [f"q/s = Q / median search time, {variant} to host" if variant == "host" else
             "q/s = Q / median search time; peers device to device"]
    notes.append("ours/it > 1: streamknn answers more queries per second than that peer (same shape, K, Q).")
    if "faiss-gpuflatl2" in names:
        notes.append("* FAISS 1.15.0 GpuIndexFlatL2 on the same card type, MEASURED SEPARATELY, NOT IN THE SAME RUN "
                     "(bench/reference/peers/README.md).")
    if any(p.startswith("torch") for p in names):
        notes.append("PyTorch peers: same run as bench_search (bench/peers.py; fp32, TF32 off).")
    return "\n".join(lines + [""] + notes)


def device_of(path):
    """The card named by a CSV's '# device,NAME,...' line, or None."""
    with open(path) as f:
        for line in f:
            if line.startswith("# device,"):
                return line.split(",")[1].strip()
    return None


def same_card(ours_path, faiss_path):
    """False where both CSVs name their card and the names differ (FAISS is then left out)."""
    a, b = device_of(ours_path), device_of(faiss_path)
    return a is None or b is None or a == b


def table(args):
    ours = [row for path in args.ours for row in read_rows(path)]
    peers = read_rows(args.peers) if args.peers and os.path.exists(args.peers) else []
    if args.peers and not os.path.exists(args.peers):
        print(f"(no peers CSV at {args.peers}: PyTorch columns left out)")
    faiss = read_rows(args.faiss) if args.faiss and os.path.exists(args.faiss) else []
    if args.faiss and not os.path.exists(args.faiss):
        print(f"(no FAISS CSV at {args.faiss}: FAISS columns left out)")
    if faiss and not same_card(args.ours[0], args.faiss):
        print(f"(the FAISS CSV is of an {device_of(args.faiss)}, ours of an {device_of(args.ours[0])}: "
              "FAISS columns left out)")
        faiss = []
    names, rows = compare(ours, peers, faiss, args.variant)
    print(format_table(names, rows, args.variant))
    if args.csv:
        cols = ["shape", "N", "D", "K", "Q", "ours_qps"]
        for p in names:
            cols += [f"{p}_host_qps", f"{p}_device_qps", f"ours_over_{p}"]
        with open(args.csv, "w", newline="") as f:
            f.write(f"# ours,{' '.join(args.ours)}\n# peers,{args.peers or ''}\n")
            if faiss:
                f.write(f"# faiss,{args.faiss},measured separately not in the same run\n")
            f.write(f"# ratio,ours_qps / peer {args.variant} qps\n")
            w = csv.writer(f, lineterminator="\n")
            w.writerow(cols)
            for r in rows:
                w.writerow([_cell(c, r[c]) for c in cols])
        print(f"wrote {args.csv}")


# ---------------------------------------------------------------------------------------------
# self-test of the table logic (runs anywhere): python3 bench/peers.py selftest

def selftest(_args):
    ours = [{"shape": "MNIST-like", "N": "70000", "D": "784", "K": "64", "Q": "8", "qps": "28000.0"},
            {"shape": "ImageNet-like", "N": "1275219", "D": "128", "K": "64", "Q": "8", "qps": "18000.0"}]
    peers = [{"shape": "MNIST-like", "N": "70000", "D": "784", "K": "64", "Q": "8", "qps": "14000.0",
              "peer": "torch-matmul-topk", "variant": "host"},
             {"shape": "MNIST-like", "N": "70000", "D": "784", "K": "64", "Q": "8", "qps": "20000.0",
              "peer": "torch-matmul-topk", "variant": "device"}]
    faiss = [{"shape": "MNIST", "N": "70000", "D": "784", "K": "64", "Q": "8", "variant": "host", "qps": "7000"}]
    names, rows = compare(ours, peers, faiss)
    assert names == ["torch-matmul-topk", "faiss-gpuflatl2"], names
    assert rows[0]["ours_over_torch-matmul-topk"] == 2.0
    assert rows[0]["torch-matmul-topk_device_qps"] == 20000.0
    assert rows[0]["ours_over_faiss-gpuflatl2"] == 4.0
    assert rows[1]["ours_over_torch-matmul-topk"] is None and rows[1]["faiss-gpuflatl2_host_qps"] is None
    text = format_table(names, rows)
    assert "MEASURED SEPARATELY" in text and "2.00" in text and "4.00" in text
    assert summarise([5, 1, 4, 2, 3]) == (3, 1, 5)
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        def csv_of(name, device):
            path = os.path.join(d, name)
            with open(path, "w") as f:
                f.write((f"# device,{device},sm_90\n" if device else "") + "shape,qps\n")
            return path
        assert same_card(csv_of("a", "NVIDIA H100 80GB HBM3"), csv_of("b", "NVIDIA H100 80GB HBM3"))
        assert not same_card(csv_of("c", "NVIDIA H200"), csv_of("d", "NVIDIA H100 80GB HBM3"))
        assert same_card(csv_of("e", None), csv_of("f", "NVIDIA H100 80GB HBM3"))
    assert abs(floor_ms(3000000, 300, 1, 3075.0, 56.48) - 1.17073) < 1e-4  # search-final.csv's floor
    print(text)
    print("selftest: ok")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="time the PyTorch peers (GPU; --dry-run: numpy stand-in)")
    r.add_argument("--shapes", default="mnist,imagenet,googlenews")
    r.add_argument("--k", default="64,128")
    r.add_argument("--q", default="1,2,4,8,12,16,32,64")
    r.add_argument("--reps", type=int, default=30)
    r.add_argument("--sets", type=int, default=3)
    r.add_argument("--warmup", type=int, default=3)
    r.add_argument("--peers", default="matmul,cdist", help="comma list of: matmul, cdist")
    r.add_argument("--variants", default="host,device", help="comma list of: host, device")
    r.add_argument("--ceilings", help="bench_search CSV of the same run (its '# device' line gives the floor)")
    r.add_argument("--csv", default="peers.csv")
    r.add_argument("--budget-s", type=float, default=1e9, help="start no new shape after this many seconds")
    r.add_argument("--dry-run", action="store_true", help="numpy stand-in, N capped at --dry-run-n")
    r.add_argument("--dry-run-n", type=int, default=2000)
    t = sub.add_parser("table", help="print the comparison table (standard library only)")
    t.add_argument("--ours", required=True, nargs="+", help="bench_search CSV(s): their rows, in order")
    t.add_argument("--peers", help="peers.py CSV (same run)")
    t.add_argument("--faiss", help="FAISS CSV (measured separately)")
    t.add_argument("--variant", default="host", choices=["host", "device"],
                   help="peer variant the ratios use (ours is always host to host)")
    t.add_argument("--csv", help="write the table as CSV here")
    sub.add_parser("selftest", help="check the table logic (standard library only)")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        unknown = [p for p in args.peers.split(",") if p and p not in PEERS]
        if unknown:
            ap.error(f"unknown peer(s) {unknown}; choose from {list(PEERS)}")
        unknown = [s for s in args.shapes.split(",") if s not in SHAPES]
        if unknown:
            ap.error(f"unknown shape(s) {unknown}; choose from {list(SHAPES)}")
        run(args)
    elif args.cmd == "table":
        table(args)
    else:
        selftest(args)


if __name__ == "__main__":
    main()
