#!/usr/bin/python3
"""bench/plot_performance.py: the figures of docs/performance.md, drawn from one run folder.

    /usr/bin/python3 bench/plot_performance.py [RUN] [--faiss CSV] [--out docs/img]

RUN is a folder written by bench/run_suite.sh (default: bench/reference/h200, the current
reference card). Needs matplotlib (Debian's python3-matplotlib: /usr/bin/python3). Writes into --out:
  qps-vs-q-k64.png          queries/s against Q per paper shape, K = 64, log y: streamknn and the
                            PyTorch peers of the same run (RUN/search.csv, RUN/peers.csv, host to
                            host); FAISS GpuIndexFlatL2 only with --faiss, marked "measured separately"
  achieved-over-floor.png   achieved / floor per shape and Q (RUN/search.csv, RUN/lowdim.csv); the
                            floor is max(store bytes / read bandwidth, 3 N D Q flops / FP32 rate),
                            both measured in the same run
"""
import argparse
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import read_rows  # noqa: E402  (standard library only, no torch at import)

PAPER_SHAPES = [("MNIST-like", 70000, 784), ("ImageNet-like", 1275219, 128), ("GoogleNews-like", 3000000, 300)]
PEER_STYLE = {"torch-matmul-topk": ("PyTorch matmul + topk", "tab:green", "s"),
              "torch-cdist-topk": ("PyTorch cdist + topk", "tab:olive", "D")}


def device_of(path):
    """The card named on a CSV's `# device,NAME,...` line, or None."""
    with open(path) as f:
        for line in f:
            if line.startswith("# device,"):
                return line[len("# device,"):].split(",")[0]
    return None


def series(rows, n, d, k, variant=None, peer=None):
    """(Q list, rows) of one shape and K, sorted by Q."""
    sel = [r for r in rows if int(r["N"]) == n and int(r["D"]) == d and int(r["K"]) == k
           and (variant is None or r.get("variant") == variant) and (peer is None or r.get("peer") == peer)]
    sel.sort(key=lambda r: int(r["Q"]))
    return [int(r["Q"]) for r in sel], sel


def caption(fig, paths, extra=""):
    text = "Source: " + ", ".join(paths) + (("\n" + extra) if extra else "")
    fig.text(0.01, 0.01, text, fontsize=7, va="bottom", ha="left", wrap=True, color="0.25")


def q_axis(ax, qs):
    ax.set_xscale("log", base=2)
    ax.set_xticks(qs)
    ax.set_xticklabels([str(q) for q in qs])
    ax.set_xlabel("queries per batch Q")
    ax.grid(True, which="both", alpha=0.3)


def plot_qps(args):
    search = os.path.join(args.run, "search.csv")
    peers_path = os.path.join(args.run, "peers.csv")
    ours = read_rows(search)
    peers = read_rows(peers_path) if os.path.exists(peers_path) else []
    faiss = read_rows(args.faiss) if args.faiss else []
    fig, axes = plt.subplots(1, 3, figsize=(15, 5.2))
    for ax, (shape, n, d) in zip(axes, PAPER_SHAPES):
        qs, rows = series(ours, n, d, 64)
        all_q = set(qs)
        ax.plot(qs, [float(r["qps"]) for r in rows], "-", marker="o", color="tab:blue", label="streamknn")
        for peer, (label, color, marker) in PEER_STYLE.items():
            pq, sel = series(peers, n, d, 64, variant="host", peer=peer)
            if pq:
                all_q |= set(pq)
                ax.plot(pq, [float(r["qps"]) for r in sel], "-", marker=marker, color=color,
                        label=f"{label} (same run)")
        if faiss:
            fq, sel = series(faiss, n, d, 64, variant="host")
            all_q |= set(fq)
            ax.plot(fq, [float(r["qps"]) for r in sel], ":", marker="x", color="tab:red",
                    label="FAISS GpuIndexFlatL2 - measured separately, not in the same run")
        ax.set_yscale("log")
        ax.set_title(f"{shape} ({n:,} x {d})", fontsize=10)
        ax.set_ylabel("queries / s (log)")
        q_axis(ax, sorted(all_q))
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=3, fontsize=8, bbox_to_anchor=(0.5, 0.955))
    fig.suptitle(f"Exact k-NN throughput, K = 64, host to host, {device_of(search) or 'GPU'}", fontsize=11)
    caption(fig, [search, peers_path] + ([args.faiss] if faiss else []))
    fig.tight_layout(rect=(0, 0.06, 1, 0.9))
    return save(fig, args.out, "qps-vs-q-k64.png")


def plot_floor(args):
    panels = [(os.path.join(args.run, "search.csv"), [64, 128], "linear"),
              (os.path.join(args.run, "lowdim.csv"), [16], "log")]
    panels = [p for p in panels if os.path.exists(p[0])]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.8), squeeze=False)
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink"]
    for ax, (path, ks, scale) in zip(axes[0], panels):
        rows = read_rows(path)
        shapes = []
        for r in rows:
            key = (r["shape"], int(r["N"]), int(r["D"]))
            if key not in shapes:
                shapes.append(key)
        all_q = set()
        for i, (shape, n, d) in enumerate(shapes):
            for k, style in zip(ks, ["-", "--"]):
                qs, sel = series(rows, n, d, k)
                if qs:
                    all_q |= set(qs)
                    ax.plot(qs, [float(r["achieved_over_floor"]) for r in sel], style, marker="o",
                            color=colors[i % len(colors)], label=f"{shape}, K={k}")
        ax.set_yscale(scale)
        if scale == "linear":
            ax.set_ylim(0, 1.05)
        ax.axhline(1.0, color="0.5", lw=0.8)
        ax.set_ylabel("achieved / floor  (1 = at the floor)")
        ax.set_title(os.path.basename(path) + (" (the spatial index above 1)" if scale == "log" else ""),
                     fontsize=10)
        q_axis(ax, sorted(all_q))
        ax.legend(fontsize=7)
    fig.suptitle(f"Search time against the floor, {device_of(panels[0][0]) or 'GPU'}: "
                 "max(N D 4 B / read bandwidth, 3 N D Q / FP32 rate), both measured in the same run",
                 fontsize=10)
    caption(fig, [p for p, _, _ in panels])
    fig.tight_layout(rect=(0, 0.06, 1, 0.95))
    return save(fig, args.out, "achieved-over-floor.png")


def save(fig, out, name):
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, name)
    fig.savefig(path, dpi=110, metadata={"Software": None})  # no version string: stable bytes across runs
    plt.close(fig)
    print(f"wrote {path}")
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", nargs="?", default="bench/reference/h200")
    ap.add_argument("--faiss", default=None, help="FAISS GpuIndexFlatL2 CSV, e.g. bench/reference/peers/faiss-gpuflat-h100.csv")
    ap.add_argument("--out", default="docs/img")
    args = ap.parse_args(argv)
    # Paths given relative to where this runs stay so; the defaults are the repository's. Work from
    # the repository root so that captions name repository paths wherever this runs from.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for name in ("run", "faiss", "out"):
        value = getattr(args, name)
        if value and value != ap.get_default(name):
            path = os.path.abspath(value)
            setattr(args, name, os.path.relpath(path, root) if path.startswith(root + os.sep) else path)
    os.chdir(root)
    for fn in (plot_qps, plot_floor):
        fn(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
