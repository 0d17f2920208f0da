#!/usr/bin/python3
"""Draws a prequential run's score over the stream from its predictions file.

    plot_stream.py PREDICTIONS.csv OUT.png [--task classify|regress] [--window N] [--title TEXT]

PREDICTIONS.csv is what `streamknn run --predictions` writes (index,prediction,truth). The plot
shows the score over a moving window of N points (default: about 1/50 of the stream, at least 100)
and the cumulative prequential score: accuracy for classification, absolute error (MAE) for
regression. Rows with an empty prediction (no visible neighbour) are left out, as the runner
leaves them out of its scores. The task is guessed from the file when not given: numbers that
are not all integers mean regression.

Needs Debian's python3-matplotlib and python3-numpy (run with /usr/bin/python3).
"""
import argparse
import csv
import sys

try:
    import numpy as np
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt
except ImportError as e:  # pragma: no cover
    print(f"plot_stream.py: {e}; install python3-matplotlib and python3-numpy and run with /usr/bin/python3",
          file=sys.stderr)
    sys.exit(1)


def load(path):
    index, predicted, truth = [], [], []
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header != ["index", "prediction", "truth"]:
            sys.exit(f"plot_stream.py: {path}, line 1: expected the header index,prediction,truth, got {header}")
        for line, row in enumerate(reader, start=2):
            if len(row) != 3:
                sys.exit(f"plot_stream.py: {path}, line {line}: {len(row)} fields, expected 3")
            if row[1] == "":
                continue
            index.append(int(row[0]))
            predicted.append(row[1])
            truth.append(row[2])
    if not index:
        sys.exit(f"plot_stream.py: {path}: no scored predictions to plot")
    return np.array(index), predicted, truth


def is_regression(values):
    try:
        return any(float(v) != int(float(v)) for v in values)
    except ValueError:
        return False


def moving_mean(x, n):
    c = np.cumsum(np.insert(x, 0, 0.0))
    out = np.full(len(x), np.nan)
    out[n - 1:] = (c[n:] - c[:-n]) / n
    return out


def nice(n):
    """n rounded down to 1, 2 or 5 times a power of ten, so the legend reads "last 2000 points"."""
    scale = 10 ** (len(str(n)) - 1)
    return max(m * scale for m in (1, 2, 5) if m * scale <= n)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("predictions")
    parser.add_argument("out")
    parser.add_argument("--task", choices=["classify", "regress"])
    parser.add_argument("--window", type=int, default=0)
    parser.add_argument("--title", default="")
    args = parser.parse_args()

    index, predicted, truth = load(args.predictions)
    task = args.task or ("regress" if is_regression(truth) else "classify")
    n = args.window or nice(max(100, len(index) // 50))
    n = min(n, len(index))
    if task == "classify":
        score = np.array([p == t for p, t in zip(predicted, truth)], dtype=float)
        label, cumulative_label = f"accuracy over the last {n} points", "cumulative (prequential) accuracy"
        ylabel = "accuracy"
    else:
        score = np.abs(np.array(predicted, dtype=float) - np.array(truth, dtype=float))
        label, cumulative_label = f"MAE over the last {n} points", "cumulative (prequential) MAE"
        ylabel = "absolute error"
    cumulative = np.cumsum(score) / np.arange(1, len(score) + 1)

    fig, ax = plt.subplots(figsize=(8, 4), dpi=100)
    ax.plot(index, moving_mean(score, n), lw=1, label=label)
    ax.plot(index, cumulative, lw=1.5, label=cumulative_label)
    ax.set_xlabel("point (arrival order)")
    ax.set_ylabel(ylabel)
    if task == "classify":
        ax.set_ylim(max(0.0, float(np.nanmin(moving_mean(score, n))) - 0.05), 1.0)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right" if task == "classify" else "upper right")
    ax.set_title(args.title or args.predictions, fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out)
    print(f"plot_stream.py: wrote {args.out} ({len(index)} scored points, moving window {n})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
