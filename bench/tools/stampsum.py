#!/usr/bin/env python3
"""Medians of clock64 phase stamps printed by a diagnostic build, per benchmark row.

    python3 bench/tools/stampsum.py STAMPS_LOG

The log holds '##### ROW' header lines, each followed by the kernel's 'STAMPS name=cycles ...'
lines (device printf from a diagnostic build that prints them).
Prints, per row, the number of launches and each field's median.
Standard library only, so it runs anywhere.
"""
import collections
import re
import statistics
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rows = collections.defaultdict(list)
    row = "(no row header)"
    for line in open(sys.argv[1]):
        if line.startswith("#####"):
            row = line.strip()
        elif "STAMPS" in line:
            rows[row].append(dict(re.findall(r"(\w+)=(\d+)", line)))
    for row, launches in rows.items():
        print(row, "launches", len(launches))
        fields = launches[0].keys()
        print("  " + " ".join(f"{f}={statistics.median(int(s[f]) for s in launches):.0f}" for f in fields))


if __name__ == "__main__":
    main()
