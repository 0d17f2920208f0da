#!/usr/bin/env python3
"""bench/report.py: the report of one benchmark run (a folder written by bench/run_suite.sh).

    bench/report.py RUN [--cpu CSV] [--plots DIR]
        the paper-shape tables (ours, PyTorch of the same run, FAISS measured separately), the
        low-dimension, latency and update summaries, then every target met / not met
    bench/report.py --copy-reference RUN DEST
        copies the run's CSVs into DEST (a bench/reference/<card>/ folder), replacing their namesakes
        and keeping DEST's other CSVs

--cpu defaults to bench/reference/cpu/cpu-peers.csv (the CPU target). --plots DIR draws the
figures of docs/performance.md into DIR (needs matplotlib: use /usr/bin/python3 on Debian).
Standard library only otherwise, so it runs on any machine that has the CSVs.
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import paper_tables  # noqa: E402  (standard library only)
import targets  # noqa: E402
from peers import read_rows  # noqa: E402


def summary(run, name, columns):
    """A few columns of a CSV as a plain table; nothing when the run lacks the file."""
    path = os.path.join(run, name)
    if not os.path.exists(path):
        return
    rows = read_rows(path)
    print(f"\n{name}:")
    print("  " + "  ".join(f"{c:>14}" for c in columns))
    for r in rows:
        print("  " + "  ".join(f"{r.get(c, ''):>14}" for c in columns))


def copy_reference(run, dest):
    csvs = sorted(glob.glob(os.path.join(run, "*.csv")))
    if not csvs:
        sys.exit(f"report.py: {run} holds no CSV (is it a bench/run_suite.sh output folder?)")
    os.makedirs(dest, exist_ok=True)
    # The run's CSVs replace their namesakes; DEST's other CSVs (separate runs: the reduced
    # screen's A/B, filters, distributed, K-means) stay.
    for f in csvs:
        if "measured-separately" in os.path.basename(f):
            continue  # FAISS's figures live in bench/reference/peers/
        shutil.copy2(f, dest)
    print(f"report.py: copied the run's CSVs from {run} into {dest}; update its README's commit")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="a bench/run_suite.sh output folder (or a bench/reference/<card>/ folder)")
    ap.add_argument("dest", nargs="?", help="with --copy-reference: the reference folder to fill")
    ap.add_argument("--cpu", default=os.path.join(HERE, "reference", "cpu", "cpu-peers.csv"))
    ap.add_argument("--plots", metavar="DIR", help="draw the figures into DIR (matplotlib)")
    ap.add_argument("--copy-reference", action="store_true", help="copy RUN's CSVs into DEST")
    args = ap.parse_args(argv)
    if not os.path.isdir(args.run):
        sys.exit(f"report.py: {args.run} is not a folder")
    if args.copy_reference:
        if not args.dest:
            sys.exit("report.py: --copy-reference needs RUN and DEST")
        copy_reference(args.run, args.dest)
        return 0
    if os.path.exists(os.path.join(args.run, "search.csv")):
        paper_tables.print_tables(args.run)
    summary(args.run, "lowdim.csv", ["shape", "K", "Q", "median_ms", "qps", "achieved_over_floor"])
    summary(args.run, "latency.csv", ["path", "n", "k", "p50_us", "p99_us", "p999_us"])
    summary(args.run, "updates.csv", ["batch", "queries", "producers", "moves_per_s", "query_p99_us"])
    print("\ntargets:")
    cpu = ["--cpu", args.cpu] if args.cpu and os.path.exists(args.cpu) else []
    status = targets.main([args.run, "--markdown"] + cpu)
    if args.plots:
        status |= subprocess.call([sys.executable, os.path.join(HERE, "plot_performance.py"),
                                   "--results", args.run, "--out", args.plots])
    return status


if __name__ == "__main__":
    sys.exit(main())
