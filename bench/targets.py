#!/usr/bin/env python3
"""bench/targets.py: the Performance issue's targets, read off complete runs' CSVs.

    python3 bench/targets.py RUN [RUN ...] [--cpu bench/results/cpu/cpu-peers.csv] [--markdown]

RUN is a folder written by bench/run_gpu_benchmarks.sh (search.csv, compare.csv, latency*.csv,
lowdim.csv, updates*.csv). Prints one row per target and one column per run: the figure the
target is judged on and whether it is met. Standard library only (no GPU, no numpy), so the
docs' targets table can be checked anywhere against the committed CSVs. A run without a file a
target needs shows "-" for that target.

    python3 bench/targets.py selftest      # checks the rules on made-up rows

--doc FILE (with --markdown) exits 1 unless FILE holds that table verbatim: ctest runs it on
docs/performance.md, so the targets table there is the one these CSVs give.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import read_rows  # noqa: E402  (standard library only)

PAPER_SHAPES = ["GoogleNews-like", "ImageNet-like", "MNIST-like"]


def _rows(run, name):
    path = os.path.join(run, name)
    return read_rows(path) if os.path.exists(path) else None


def by_shape(rows):
    """bench_search rows keyed by (shape, K, Q); {} for a missing CSV."""
    return {(r["shape"], int(r["K"]), int(r["Q"])): r for r in rows or ()}


def q1_of_floor(search, shape, minimum):
    """Q = 1 achieved / floor at K = 64 and 128 (the worse of the two decides)."""
    vals = [search.get((shape, k, 1)) for k in (64, 128)]
    if not all(vals):
        return None
    fr = [float(v["achieved_over_floor"]) for v in vals]
    return "%.1f / %.1f%%" % (100 * fr[0], 100 * fr[1]), min(fr) >= minimum


def through_q16(search, shape):
    """The slowest batch of Q = 2..16 against one query's time, K = 64 and 128 (<= 1.5x)."""
    out = []
    for k in (64, 128):
        one = search.get((shape, k, 1))
        batches = [r for (s, kk, q), r in search.items() if s == shape and kk == k and 1 < q <= 16]
        if not one or not batches:
            return None
        out.append(max(float(r["median_ms"]) for r in batches) / float(one["median_ms"]))
    return "%.3f / %.3fx" % tuple(out), max(out) <= 1.5


def peer_ratio(compare, column, qs, minimum, shapes=PAPER_SHAPES):
    """The smallest ours/peer ratio over the paper shapes, K = 64 and 128, Q in qs."""
    worst = None
    for r in compare or ():
        if r["shape"] in shapes and int(r["Q"]) in qs and r.get(column):
            ratio = float(r[column])
            if worst is None or ratio < worst[0]:
                worst = (ratio, "%s K=%s Q=%s" % (r["shape"], r["K"], r["Q"]))
    if worst is None:
        return None
    return "%.3fx (%s)" % worst, worst[0] >= minimum


def lowdim_q1(lowdim, latency):
    """1,000,000 x 2, K = 16, Q = 1 against the plain round trip (raw) of the latency run: <= 2x."""
    one = lowdim.get(("low-dim 1M x 2", 16, 1))
    raw = {r["path"]: r for r in latency or ()}
    if not one or "raw" not in raw:
        return None
    us = 1000 * float(one["median_ms"])
    ratio = us / float(raw["raw"]["p50_us"])
    graph = us / float(raw["raw_graph"]["p50_us"]) if "raw_graph" in raw else float("nan")
    return "%.1f us: %.2fx the round trip (%.2fx its graph)" % (us, ratio, graph), ratio <= 2.0


def lowdim_q1024(lowdim):
    """1,000,000 x 2, K = 16, Q = 1,024 at >= 50% of the FP32 rate (counted as brute-force pairs)."""
    r = lowdim.get(("low-dim 1M x 2", 16, 1024))
    if not r:
        return None
    fr = float(r["achieved_over_floor"])
    return "%.3f ms, %.0f%%" % (float(r["median_ms"]), 100 * fr), fr >= 0.5


def one_query(latency, latency_haversine):
    """One query host to host on 100,000 x 2, K = 16: p50 <= 25 us and p99 <= 50 us."""
    cells, met = [], True
    for rows in (latency, latency_haversine):
        row = next((r for r in rows or () if r["path"] == "streamknn"), None)
        if row is None:
            continue
        p50, p99 = float(row["p50_us"]), float(row["p99_us"])
        cells.append("%s %.1f / %.1f us" % (row["metric"], p50, p99))
        met = met and p50 <= 25 and p99 <= 50
    return ("; ".join(cells), met) if cells else None


def updates(rows):
    """>= 10 M moves/s while queries run with query p99 within 2x of the update-free p99, at every
    load that reaches 10 M/s (batch rows and the streaming row alike)."""
    if not rows:
        return None
    base = next((r for r in rows if int(r["batch"]) == 0 and r["queries"] == "1"), None)
    loaded = [r for r in rows if int(r["batch"]) > 0 and r["queries"] == "1" and r["moves_per_s"]]
    if base is None or not loaded:
        return None
    p99 = float(base["query_p99_us"])
    fast = [r for r in loaded if float(r["moves_per_s"]) >= 1e7]
    streaming = next((r for r in loaded if int(r["producers"]) > 0), None)
    worst = max(fast, key=lambda r: float(r["query_p99_us"])) if fast else None
    cell = "%.1f M/s streaming" % (float(streaming["moves_per_s"]) / 1e6) if streaming else ""
    if worst is not None:
        what = "streaming" if int(worst["producers"]) > 0 else "batches of %s" % worst["batch"]
        cell += "; worst p99 at >= 10 M/s %.2fx (%s)" % (float(worst["query_p99_us"]) / p99, what)
    met = worst is not None and all(float(r["query_p99_us"]) <= 2 * p99 for r in fast)
    return cell, met


def cpu_faiss(rows):
    """CPU backend >= FAISS CPU IndexFlatL2 at every Q (bench_cpu_peers' highdim rows)."""
    ratios = [float(r["ours_over_peer"]) for r in rows or () if r["part"] == "highdim" and r["peer"] == "faiss"]
    if not ratios:
        return None
    return "%.2f-%.2fx" % (min(ratios), max(ratios)), min(ratios) >= 1.0


def targets(run, cpu_rows=None):
    """[(target, (figure, met) or None)] for one run folder."""
    search, compare = by_shape(_rows(run, "search.csv")), _rows(run, "compare.csv")
    lowdim, latency = by_shape(_rows(run, "lowdim.csv")), _rows(run, "latency.csv")
    out = [
        ("Q = 1 >= 85% of floor, GoogleNews-like (K 64 / 128)", q1_of_floor(search, "GoogleNews-like", 0.85)),
        ("Q = 1 >= 85% of floor, ImageNet-like", q1_of_floor(search, "ImageNet-like", 0.85)),
        ("Q = 1 >= 70% of floor, MNIST-like", q1_of_floor(search, "MNIST-like", 0.70)),
    ]
    for shape in PAPER_SHAPES:
        out.append(("through Q = 16 within 1.5x of one query, %s" % shape, through_q16(search, shape)))
    out += [
        ("ahead of PyTorch matmul + topk, Q 1..64", peer_ratio(compare, "ours_over_torch-matmul-topk",
                                                              {1, 2, 4, 8, 12, 16, 32, 64}, 1.0)),
        (">= 2x PyTorch matmul + topk at Q = 8 and 12", peer_ratio(compare, "ours_over_torch-matmul-topk",
                                                                  {8, 12}, 2.0)),
        ("1M x 2, Q = 1: <= 2x a launch round trip", lowdim_q1(lowdim, latency)),
        ("1M x 2, Q = 1,024: >= 50% of FP32", lowdim_q1024(lowdim)),
        ("one query: p50 <= 25 us, p99 <= 50 us", one_query(latency, _rows(run, "latency-haversine.csv"))),
        (">= 10 M moves/s, query p99 <= 2x", updates(_rows(run, "updates.csv"))),
        ("ahead of FAISS GpuIndexFlatL2 (measured separately)",
         peer_ratio(compare, "ours_over_faiss-gpuflatl2", {1, 2, 4, 8, 12, 16, 32, 64}, 1.0)),
    ]
    if cpu_rows is not None:
        out.append(("CPU backend >= FAISS CPU IndexFlatL2", cpu_faiss(cpu_rows)))
    return out


def _cell(result):
    if result is None:
        return "-"
    figure, met = result
    return "%s: %s" % ("met" if met else "NOT met", figure)


def selftest():
    search = by_shape([
        {"shape": "MNIST-like", "K": "64", "Q": "1", "median_ms": "0.1", "achieved_over_floor": "0.72"},
        {"shape": "MNIST-like", "K": "128", "Q": "1", "median_ms": "0.1", "achieved_over_floor": "0.69"},
        {"shape": "MNIST-like", "K": "64", "Q": "16", "median_ms": "0.15", "achieved_over_floor": "0.5"},
        {"shape": "MNIST-like", "K": "128", "Q": "8", "median_ms": "0.16", "achieved_over_floor": "0.5"},
    ])
    assert q1_of_floor(search, "MNIST-like", 0.70)[1] is False  # the worse K decides
    assert q1_of_floor(search, "MNIST-like", 0.65)[1] is True
    assert through_q16(search, "MNIST-like")[1] is False  # K = 128 Q = 8: 1.6x
    assert through_q16(search, "ImageNet-like") is None
    compare = [{"shape": "GoogleNews-like", "K": "128", "Q": "12", "ours_over_x": "1.92"},
               {"shape": "GoogleNews-like", "K": "64", "Q": "8", "ours_over_x": "2.3"},
               {"shape": "low-dim 1M x 2", "K": "16", "Q": "8", "ours_over_x": "0.5"}]
    assert peer_ratio(compare, "ours_over_x", {8, 12}, 2.0) == ("1.920x (GoogleNews-like K=128 Q=12)", False)
    ups = [{"batch": "0", "queries": "1", "moves_per_s": "", "query_p99_us": "40", "producers": "0"},
           {"batch": "1000", "queries": "1", "moves_per_s": "7e6", "query_p99_us": "400", "producers": "0"},
           {"batch": "800000", "queries": "1", "moves_per_s": "3e7", "query_p99_us": "50", "producers": "4"}]
    assert updates(ups)[1] is True  # the slow row at 7 M/s does not count
    ups[1]["moves_per_s"] = "1.2e7"
    assert updates(ups)[1] is False  # now it does
    print("targets.py selftest: ok")


def main(argv=None):
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["selftest"]:
        selftest()
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="complete-run folders (bench/run_gpu_benchmarks.sh output)")
    ap.add_argument("--cpu", help="bench_cpu_peers CSV (the CPU target)")
    ap.add_argument("--markdown", action="store_true", help="a markdown table instead of plain text")
    ap.add_argument("--doc", help="with --markdown: exit 1 unless this file holds the table verbatim")
    args = ap.parse_args(argv)
    cpu_rows = read_rows(args.cpu) if args.cpu else None
    columns = [targets(run, cpu_rows) for run in args.runs]
    names = [os.path.basename(os.path.normpath(run)) for run in args.runs]
    if args.markdown:
        lines = ["| target | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for i, (target, _) in enumerate(columns[0]):
            lines.append("| %s | %s |" % (target, " | ".join(_cell(col[i][1]) for col in columns)))
        table = "\n".join(lines) + "\n"
        if args.doc:
            with open(args.doc) as f:
                if table not in f.read():
                    sys.stderr.write("%s does not hold the targets table of %s verbatim; paste this:\n%s"
                                     % (args.doc, " ".join(args.runs), table))
                    return 1
            print("%s: the targets table matches %s" % (args.doc, " ".join(names)))
            return 0
        sys.stdout.write(table)
    else:
        for i, (target, _) in enumerate(columns[0]):
            print(target)
            for name, col in zip(names, columns):
                print("    %-22s %s" % (name, _cell(col[i][1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
