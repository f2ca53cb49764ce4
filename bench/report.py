#!/usr/bin/env python3
"""The table and the targets of one or more runs of bench/compare.sh.

  report.py [--markdown] RUN/figures.tsv...

Each figures.tsv holds one run's figures, a line each: workload, unit,
system, value. With several runs, every figure shown is the median of the
runs', and every ratio the median of the ratios taken within each run (the
systems measured side by side, as the targets are judged). Targets are
BENCHMARKS.md's: each line says met or NOT met. With --markdown, the table
is printed as BENCHMARKS.md holds it instead, ratios against lb-nopt and
JuiceFS, and no targets.
"""
import argparse
import statistics

ORDER = ["native", "loopback", "lb-nopt", "juicefs", "ledgerfs"]
CPU = ": server CPU-s"  # the suffix of compare.sh's rows of the server's CPU-seconds
SHORT = {"native": "nat", "loopback": "lb", "lb-nopt": "lbnp", "juicefs": "jfs"}


def load(paths):
    runs, rows, units = [], [], {}
    for p in paths:
        run = {}
        with open(p) as f:
            for line in f:
                name, unit, system, value = line.rstrip("\n").split("\t")
                run[(name, system)] = float(value)
                if name not in units:
                    rows.append(name)
                    units[name] = unit
        runs.append(run)
    return runs, rows, units


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def shown(v):
    """A figure as BENCHMARKS.md shows it: three significant digits or so."""
    if v is None:
        return "–"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def main(paths, markdown=False):
    runs, rows, units = load(paths)
    systems = [s for s in ORDER if any((r, s) in run for run in runs for r in rows)]
    refs = [s for s in systems if s != "ledgerfs"]

    def value(row, system):
        return median([run.get((row, system)) for run in runs])

    def ratio(row, system, of="ledgerfs"):
        rs = []
        for run in runs:
            a, b = run.get((row, of)), run.get((row, system))
            if a is not None and b:
                rs.append(a / b)
        return median(rs)

    if markdown:
        names = {"native": "native", "loopback": "loopback", "lb-nopt": "`lb-nopt`",
                 "juicefs": "JuiceFS", "ledgerfs": "ledgerfs"}
        over = [s for s in ("lb-nopt", "juicefs") if s in refs]
        print("| workload | " + " | ".join(names[s] for s in systems) + " | "
              + " | ".join("÷ " + names[s] for s in over) + " | unit |")
        print("|" + " --- |" * (len(systems) + len(over) + 2))
        # Each workload's row, then its server CPU-seconds (none where no
        # server spent any: the rows read after the workload's own).
        order = []
        for row in rows:
            if row.endswith(CPU):
                continue
            order.append(row)
            c = row + CPU
            if c in units and any((value(c, s) or 0) >= 0.005 for s in systems):
                order.append(c)
        for row in order:
            cells = [shown(value(row, s)) for s in systems]
            if "ledgerfs" in systems:
                cells[-1] = f"**{cells[-1]}**"
            r = [ratio(row, s) for s in over]
            cells += ["–" if x is None else f"{x:.2f}" for x in r]
            print(f"| {row} | " + " | ".join(cells) + f" | {units[row]} |")
        return

    n = len(runs)
    print(f"\n{'medians of %d runs' % n if n > 1 else 'one run'}")
    print(f"{'workload':<46}" + "".join(f" {s:>10}" for s in systems)
          + "".join(f" {'lf/' + SHORT[s]:>8}" for s in refs))
    for row in rows:
        line = f"{row:<46}"
        for s in systems:
            v = value(row, s)
            line += f" {v:>10.2f}" if v is not None else f" {'-':>10}"
        for s in refs:
            r = ratio(row, s)
            line += f" {r:>8.2f}" if r is not None else f" {'-':>8}"
        print(line + "  " + units[row])

    print()
    size = next((r.split()[2] for r in rows if r.startswith("seq write ")), "1024")
    small = next((r.split()[0] for r in rows if r.endswith(" x 4 KiB creates")), "10000")
    sql = next((r.split()[1] for r in rows if r.startswith("SQLite ")), "100")

    def target(desc, got, ok):
        shown = "-" if got is None else f"{got:.2f}"
        state = "no figure" if got is None else ("met" if ok else "NOT met")
        print(f"{desc:<72} {shown:>8}  {state}")

    def vs(system, bound, row, higher):
        if (row, system) not in runs[0] and value(row, system) is None:
            return
        r = ratio(row, system)
        op = ">=" if higher else "<="
        target(f"{row}: / {system} {op} {bound}", r,
               r is not None and (r >= bound if higher else r <= bound))

    # Round four's targets (BENCHMARKS.md, "Targets").
    p50 = [f"4 KiB pwrite+fdatasync, {m} MiB file: p50" for m in ("4", size)]
    p99 = [f"4 KiB pwrite+fdatasync, {m} MiB file: p99" for m in ("4", size)]
    print("1. reads")
    for row in (f"cold seq read {size} MiB (dd)", "fio seq read 1M, cold"):
        vs("lb-nopt", 0.8, row, True)
        vs("juicefs", 1, row, True)
        vs("lb-nopt", 1.5, row + CPU, False)
    vs("lb-nopt", 0.5, "fio rand read 4k (20 s max)", True)
    vs("juicefs", 1.2, "fio rand read 4k (20 s max)", True)
    print("2. sequential write")
    for row in (f"seq write {size} MiB (dd, fsync)", "fio seq write 1M, end_fsync"):
        vs("lb-nopt", 0.6, row, True)
        vs("juicefs", 1, row, True)
    print("3. fsync")
    for row in p50:
        vs("lb-nopt", 1.5, row, False)
    for row in p99:
        vs("lb-nopt", 2, row, False)
    print("4. databases")
    for mode in ("delete", "wal"):
        vs("lb-nopt", 0.8, f"SQLite {sql} MiB, 1-row transactions, {mode}", True)
    print("5. metadata")
    for st in ("rename", "chmod", "dir", "utime"):
        vs("lb-nopt", 1, f"stress-ng --{st} 2", True)
    vs("lb-nopt", 1, f"{small} x 4 KiB creates", True)
    vs("lb-nopt", 1, "ledgerfs bench: 4 KiB deletes", True)
    print("6. trees and applications")
    for row in ("git clone (local, GOROOT/src)", "tar xzf of GOROOT/src", "rsync -a GOROOT/src in",
                "cp -a GOROOT/src", "rm -rf of the copied GOROOT/src"):
        vs("lb-nopt", 1.2, row, False)
    print("7. storage and memory")
    for row, desc, bound in ((f"storage added by a 2nd copy of {size} MiB", "2nd copy adds < 1 % (percent)", 1),
                             ("storage added by a 1-byte edit", "1-byte edit adds < 1 MiB (KiB)", 1024)):
        v = value(row, "ledgerfs")
        target(desc, v, v is not None and v < bound)
    # The bound is on the anonymous RSS (heap, allocations); mapped db
    # pages are page cache.
    for row, bound in ((r, 256) for r in rows if r.startswith("peak server anonymous RSS writing") and not r.endswith(CPU)):
        v = value(row, "ledgerfs")
        target(f"{row} < {bound} MiB", v, v is not None and v < bound)
    for row, bound in ((r, 512) for r in rows if r.startswith("peak server anonymous RSS,") and not r.endswith(CPU)):
        v = value(row, "ledgerfs")
        target(f"{row} < {bound} MiB", v, v is not None and v < bound)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--markdown", action="store_true", help="print the table as BENCHMARKS.md holds it")
    ap.add_argument("figures", nargs="+", help="a run's figures.tsv")
    a = ap.parse_args()
    main(a.figures, markdown=a.markdown)
