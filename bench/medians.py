#!/usr/bin/env python3
"""Prints the median of each figure of a benchmark's figures file (lines of
NAME<TAB>VALUE, a figure's runs on lines of the same name), in the order
the figures first appear, with every run's value."""
import statistics, sys

width = int(sys.argv[2]) if len(sys.argv) > 2 else 48
rows, order = {}, []
for line in open(sys.argv[1]):
    name, v = line.rstrip("\n").split("\t")
    if name not in rows:
        rows[name] = []
        order.append(name)
    rows[name].append(float(v))
for name in order:
    print(f"{name:{width}} {statistics.median(rows[name]):12.2f}   runs: " + " ".join(f"{x:.3g}" for x in rows[name]))
