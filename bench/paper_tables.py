#!/usr/bin/env python3
"""Markdown tables of one complete run at the paper's shapes, as docs/performance.md prints them.

    python3 bench/paper_tables.py bench/reference/h200

Reads the run's search.csv (ours: median ms, q/s, achieved over floor) and compare.csv (the
PyTorch peers of the same run and FAISS, measured separately) and prints, per K, one row per
shape and Q, then each shape's Q = 1 share of the floor and its Q = 16 / Q = 1 time. Standard
library only, so it runs here and on the GPU machine.
"""
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import read_rows  # noqa: E402  (standard library only)
from targets import by_shape  # noqa: E402

SHAPES = ["MNIST-like", "ImageNet-like", "GoogleNews-like"]


def print_tables(run):
    run = Path(run)
    search = by_shape(read_rows(run / "search.csv"))
    compare = by_shape(read_rows(run / "compare.csv"))
    ks = sorted({k for s, k, _ in search if s in SHAPES})
    for k in ks:
        print(f"K = {k}:\n")
        print("| shape | Q | ms | q/s | of floor | matmul+topk q/s | ours / it | cdist+topk q/s | ours / it "
              "| FAISS q/s (separate) |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for shape in SHAPES:
            for (s, kk, q), r in sorted(search.items(), key=lambda item: item[0][2]):
                if s != shape or kk != k:
                    continue
                c = compare.get((s, kk, q), {})
                def peer(name):
                    qps, ratio = c.get(f"{name}_host_qps", ""), c.get(f"ours_over_{name}", "")
                    if not qps:
                        return "-", "-"
                    return f"{float(qps):,.0f}", f"{float(ratio):.2f}"
                mm, mm_ratio = peer("torch-matmul-topk")
                cd, cd_ratio = peer("torch-cdist-topk")
                faiss = c.get("faiss-gpuflatl2_host_qps", "")
                faiss = f"{float(faiss):,.0f}" if faiss else "-"
                print(f"| {s} | {q} | {float(r['median_ms']):.3f} | {float(r['qps']):,.0f} | "
                      f"{100 * float(r['achieved_over_floor']):.1f}% | {mm} | {mm_ratio} | {cd} | {cd_ratio} | {faiss} |")
        print()
    print("| shape | K | Q = 1 of floor | Q = 16 time / Q = 1 time |")
    print("|---|---:|---:|---:|")
    for shape in SHAPES:
        for k in ks:
            one, sixteen = search.get((shape, k, 1)), search.get((shape, k, 16))
            if one and sixteen:
                ratio = float(sixteen["median_ms"]) / float(one["median_ms"])
                print(f"| {shape} | {k} | {100 * float(one['achieved_over_floor']):.1f}% | {ratio:.3f}× |")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print_tables(sys.argv[1])


if __name__ == "__main__":
    main()
