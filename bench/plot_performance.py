#!/usr/bin/python3
"""bench/plot_performance.py: the performance figures, drawn from the committed CSVs.

    /usr/bin/python3 bench/plot_performance.py [--results bench/results/h100]
        [--faiss bench/results/peers/faiss-gpuflat-h100.csv] [--peers CSV ...] [--out docs/img]

(Debian's python3-matplotlib: /usr/bin/python3, not a python3 that cannot see Debian's packages.)
Writes into --out:
  qps-vs-q-k64.png          (a) queries/s against Q per shape, K = 64, log y: streamknn (latest run and
                                previous lock version), FAISS GpuIndexFlatL2 when its CSV is there
                                (marked "measured separately"), PyTorch peers when a peers CSV is
  achieved-over-floor.png   (b) achieved / floor per shape and Q (the floor: store bytes / measured
                                read bandwidth, or 3 N D Q flops / measured FP32 rate)
  latency-one-query.png     (c) one query end to end: raw floor, raw floor as a CUDA graph,
                                streamknn; p50 / p99 / p99.9 (LATENCY_RUN/latency.csv)
  sample-pass.png           (d) queries/s with the sample pass forced on and off
Each figure's title names the CSVs it was drawn from, and its caption the command that produced
each (from bench/results/h100/README.md). Peers CSVs: by default the LATEST run's peers.csv
(bench/peers.py run output, copied in after a GPU run); rows of its host variant are drawn, with
the streamknn line of the same run when a search.csv sits beside it.
"""
import argparse
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MAIN_SHAPES = [("MNIST-like", 70000, 784), ("ImageNet-like", 1275219, 128), ("GoogleNews-like", 3000000, 300)]
PEER_STYLE = {"torch-matmul-topk": ("PyTorch matmul + topk", "tab:green", "s"),
              "torch-cdist-topk": ("PyTorch cdist + topk", "tab:olive", "D")}


from peers import read_rows  # noqa: E402  (the same directory: standard library only, no torch at import)

# The folder (under --results) of the latest complete run of bench/run_gpu_benchmarks.sh.
LATEST = os.path.join("run-2026-11-28-s29", "complete-7a90e7c")
# The run of docs/performance.md's one-query table and low-dimension panel: session 28's, whose
# code those paths still run (7a90e7c changed only the sample pass of batches of 9+ queries).
LATENCY_RUN = os.path.join("run-2026-11-28-s28", "complete-8f4cce1")
LOWDIM_RUN = LATENCY_RUN  # the spatial index under Auto


def device_of(path):
    with open(path) as f:
        for line in f:
            if line.startswith("# device,"):
                return line[len("# device,"):].split(",")[0]
    return None


def commands(results):
    """{csv file name: command} from the results README's table rows | `file` | code | `command` |."""
    out = {}
    path = os.path.join(results, "README.md")
    if os.path.exists(path):
        for line in open(path):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) >= 3:
                cmd = re.findall(r"`([^`]*)`", cells[-1])
                for name in re.findall(r"`([^`]+\.csv)`", cells[0]):
                    if cmd:
                        out[name] = cmd[0]
    return out


def series(rows, n, d, k, variant=None, peer=None):
    """(Q list, rows) of one shape and K, sorted by Q."""
    sel = [r for r in rows if int(r["N"]) == n and int(r["D"]) == d and int(r["K"]) == k
           and (variant is None or r.get("variant") == variant) and (peer is None or r.get("peer") == peer)]
    sel.sort(key=lambda r: int(r["Q"]))
    return [int(r["Q"]) for r in sel], sel


def caption(fig, sources, cmds, extra=""):
    parts = []
    for label, path in sources:
        name = os.path.basename(path)
        cmd = cmds.get(name)
        parts.append(f"{label}: {path}" + (f"  ({cmd})" if cmd else ""))
    text = "Source: " + ";  ".join(parts) + (("\n" + extra) if extra else "")
    fig.text(0.01, 0.01, text, fontsize=7, va="bottom", ha="left", wrap=True, color="0.25")


def q_axis(ax, qs):
    ax.set_xscale("log", base=2)
    ax.set_xticks(qs)
    ax.set_xticklabels([str(q) for q in qs])
    ax.set_xlabel("queries per batch Q")
    ax.grid(True, which="both", alpha=0.3)


def plot_qps(args, cmds):
    final = os.path.join(args.results, LATEST, "search.csv")
    lock = os.path.join(args.results, "search-all-q-lock-version.csv")
    ours = [(p, lab, st) for p, lab, st in [(final, f"streamknn ({LATEST})", "-"),
                                            (lock, "streamknn (previous lock version)", "--")] if os.path.exists(p)]
    faiss = read_rows(args.faiss) if args.faiss and os.path.exists(args.faiss) else []
    peers = [(p, read_rows(p)) for p in args.peers if os.path.exists(p)]
    # A peers CSV copied in from a run_gpu_benchmarks.sh folder sits beside that run's search.csv:
    # draw it too, so that the PyTorch lines have the streamknn line of the same run to compare with.
    for p, _ in peers:
        same_run = os.path.join(os.path.dirname(p), "search.csv")
        if os.path.exists(same_run) and all(os.path.abspath(same_run) != os.path.abspath(o[0]) for o in ours):
            ours.append((same_run, f"streamknn (same run as the PyTorch peers: {same_run})", "-."))
    fig, axes = plt.subplots(1, 3, figsize=(15, 5.2))
    all_q = set()
    for ax, (shape, n, d) in zip(axes, MAIN_SHAPES):
        for path, label, style in ours:
            qs, rows = series(read_rows(path), n, d, 64)
            all_q |= set(qs)
            ax.plot(qs, [float(r["qps"]) for r in rows], style, marker="o",
                    color="tab:purple" if style == "-." else "tab:blue", alpha=0.6 if style == "--" else 1,
                    label=label)
        for path, rows in peers:
            for peer, (label, color, marker) in PEER_STYLE.items():
                qs, sel = series(rows, n, d, 64, variant="host", peer=peer)
                if qs:
                    all_q |= set(qs)
                    ax.plot(qs, [float(r["qps"]) for r in sel], "-", marker=marker, color=color,
                            label=f"{label} (host to host, same run as bench_search)")
        if faiss:
            qs, sel = series(faiss, n, d, 64, variant="host")
            all_q |= set(qs)
            ax.plot(qs, [float(r["qps"]) for r in sel], ":", marker="x", color="tab:red",
                    label="FAISS GpuIndexFlatL2 (host pointers) - measured separately, not in the same run")
        ax.set_yscale("log")
        ax.set_title(f"{shape} ({n:,} x {d})", fontsize=10)
        ax.set_ylabel("queries / s (log)")
        q_axis(ax, sorted(all_q))
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=2, fontsize=8, bbox_to_anchor=(0.5, 0.955))
    device = device_of(final) if os.path.exists(final) else None
    fig.suptitle(f"Exact k-NN throughput, K = 64, host to host, {device or 'GPU'}: "
                 f"{os.path.basename(final)}, {os.path.basename(lock)}"
                 + (f", {os.path.basename(args.faiss)}" if faiss else "")
                 + "".join(f", {os.path.basename(p)}" for p, _ in peers), fontsize=11)
    sources = [("streamknn latest", final), ("lock version", lock)] + [("streamknn, same run as PyTorch", p)
                                                                        for p, _, st in ours if st == "-."]
    if faiss:
        sources.append(("FAISS, measured separately", args.faiss))
    sources += [("PyTorch", p) for p, _ in peers]
    caption(fig, sources, cmds, "" if peers else "No PyTorch peers CSV yet (bench/peers.py has not been run on the GPU).")
    fig.tight_layout(rect=(0, 0.07, 1, 0.9))
    return save(fig, args.out, "qps-vs-q-k64.png")


def plot_floor(args, cmds):
    panels = [(os.path.join(LATEST, "search.csv"), [64, 128], "linear"),
              ("search-all-q-lock-version.csv", [64, 128], "linear"), (os.path.join(LOWDIM_RUN, "lowdim.csv"), [16], "log")]
    panels = [(os.path.join(args.results, f), ks, scale) for f, ks, scale in panels
              if os.path.exists(os.path.join(args.results, f))]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.8), squeeze=False)
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
                if not qs:
                    continue
                all_q |= set(qs)
                ax.plot(qs, [float(r["achieved_over_floor"]) for r in sel], style, marker="o", color=colors[i % 6],
                        label=f"{shape}, K={k}")
        ax.set_yscale(scale)
        if scale == "linear":
            ax.set_ylim(0, 1.05)
        ax.axhline(1.0, color="0.5", lw=0.8)
        ax.set_ylabel("achieved / floor  (1 = at the hardware floor)")
        ax.set_title(os.path.basename(path), fontsize=10)
        q_axis(ax, sorted(all_q))
        ax.legend(fontsize=7)
    fig.suptitle("Search time against the floor: max(N D 4 B / read bandwidth, 3 N D Q / FP32 rate), "
                 "both measured in the same run", fontsize=11)
    caption(fig, [(os.path.basename(p), p) for p, _, _ in panels], cmds)
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    return save(fig, args.out, "achieved-over-floor.png")


def plot_latency(args, cmds):
    path = os.path.join(args.results, LATENCY_RUN, "latency.csv")
    rows = {r["path"]: r for r in read_rows(path)}
    names = [("raw", "raw floor:\nH2D + empty kernel + D2H"), ("raw_graph", "raw floor\nas a CUDA graph"),
             ("streamknn", "streamknn search\n(host to host)")]
    stats = [("p50_us", "p50"), ("p99_us", "p99"), ("p999_us", "p99.9")]
    fig, ax = plt.subplots(figsize=(9, 5))
    width = 0.26
    for j, (col, label) in enumerate(stats):
        xs = [i + (j - 1) * width for i in range(len(names))]
        vals = [float(rows[key][col]) for key, _ in names]
        bars = ax.bar(xs, vals, width, label=label, color=["tab:blue", "tab:orange", "tab:red"][j])
        for b, v in zip(bars, vals):
            ax.text(b.get_x() + b.get_width() / 2, v, f"{v:.1f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([label for _, label in names])
    ax.set_ylabel("microseconds per query")
    r = rows["streamknn"]
    ax.set_title(f"One query end to end: {int(r['n']):,} x 2 store ({r['metric']}), k = {r['k']} - "
                 f"{os.path.basename(path)}", fontsize=10)
    ax.legend()
    ax.grid(True, axis="y", alpha=0.3)
    caption(fig, [("latency", path)], cmds)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return save(fig, args.out, "latency-one-query.png")


def plot_sample_pass(args, cmds):
    on = os.path.join(args.results, "sample-pass-on.csv")
    off = os.path.join(args.results, "sample-pass-off.csv")
    rows_on, rows_off = read_rows(on), read_rows(off)
    shapes = []
    for r in rows_on:
        key = (r["shape"], int(r["N"]), int(r["D"]), int(r["K"]))
        if key not in shapes:
            shapes.append(key)
    fig, axes = plt.subplots(2, len(shapes), figsize=(5 * len(shapes), 6.6), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 2]}, sharex="col")
    for i, (shape, n, d, k) in enumerate(shapes):
        ax, ax_ratio = axes[0][i], axes[1][i]
        q_on, s_on = series(rows_on, n, d, k)
        q_off, s_off = series(rows_off, n, d, k)
        ax.plot(q_on, [float(r["qps"]) for r in s_on], "-", marker="o", color="tab:blue", label="sample pass on")
        ax.plot(q_off, [float(r["qps"]) for r in s_off], "--", marker="s", color="tab:orange", label="sample pass off")
        ax.set_yscale("log")
        ax.set_ylabel("queries / s (log)")
        ax.set_title(f"{shape} ({n:,} x {d}), K = {k}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        by_q = {int(r["Q"]): float(r["qps"]) for r in s_off}
        qs = [int(r["Q"]) for r in s_on if int(r["Q"]) in by_q]
        ratios = [float(r["qps"]) / by_q[int(r["Q"])] for r in s_on if int(r["Q"]) in by_q]
        ax_ratio.bar(qs, ratios, width=[q * 0.35 for q in qs], color=["tab:green" if v >= 1 else "tab:red" for v in ratios])
        for q, v in zip(qs, ratios):
            ax_ratio.text(q, v, f"{v:.2f}", ha="center", va="bottom", fontsize=8)
        ax_ratio.axhline(1.0, color="0.3", lw=0.8)
        ax_ratio.set_ylim(0, max(ratios + [1.0]) * 1.2)
        ax_ratio.set_ylabel("q/s on / q/s off")
        q_axis(ax_ratio, sorted(set(q_on) | set(q_off)))
    fig.suptitle(f"Sample pass forced on / off (lock version): {os.path.basename(on)} vs {os.path.basename(off)}",
                 fontsize=11)
    caption(fig, [("on", on), ("off", off)], cmds, "Bottom row: above 1 the sample pass helps, below 1 it costs.")
    fig.tight_layout(rect=(0, 0.07, 1, 0.95))
    return save(fig, args.out, "sample-pass.png")


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
    ap.add_argument("--results", default="bench/results/h100")
    ap.add_argument("--faiss", default="bench/results/peers/faiss-gpuflat-h100.csv")
    ap.add_argument("--peers", nargs="*", default=None,
                    help="peers.py CSVs (default: every bench/results/*/peers*.csv)")
    ap.add_argument("--out", default="docs/img")
    args = ap.parse_args(argv)
    # Paths given on the command line are the caller's; defaults are the repository's: work from
    # the repository root so that captions name repository paths wherever this is run from.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for name in ("results", "faiss", "out"):
        if getattr(args, name) != ap.get_default(name):
            setattr(args, name, os.path.abspath(getattr(args, name)))
    if args.peers is not None:
        args.peers = [os.path.abspath(p) for p in args.peers]
    os.chdir(root)
    if args.peers is None:
        args.peers = [p for p in [os.path.join(args.results, LATEST, "peers.csv")] if os.path.exists(p)]
    cmds = commands(args.results)
    for fn in (plot_qps, plot_floor, plot_latency, plot_sample_pass):
        fn(args, cmds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
