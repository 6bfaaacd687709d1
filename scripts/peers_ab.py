"""Before against after, interleaved: two builds of planner-host's `peers` example (the
tapeplan worker of `cargo xtask bench --peers`), both pinned to core 1, answering
`run W<n> tapeplan` in alternating order, round after round (docs/benchmarks.md, "After the
vector transcendentals").

Usage: peers_ab.py BEFORE_BIN AFTER_BIN DIR ROUNDS [SYSTEM [WORKLOAD...]]

SYSTEM is `tapeplan` (the separate arithmetic profile, the default) or `tapeplan-fma`; the
workloads are W1, W2 and W3 unless named (C1 and C2 too).

With LAUNCHES=N in the environment, the rounds run in N launches of both workers (ROUNDS each):
a process's step time can stay 3-6 % above or below another launch's of the same build for
its whole life (W2 on a Zen 4 VM, 2026-12-05: per-launch medians 301-336 us), so a change
worth less than that needs several launches. Each workload then also prints every launch's
medians and the mean over launches of each launch's median ratio.

DIR holds the workloads `peers export DIR` wrote. Prints, per workload, the median time per step
of each build, the median over rounds of each round's after ÷ before, and whether both builds
ended every round with the same final loss and Σ|parameters| (they must, when the change keeps
the bits).
"""

import os
import statistics
import subprocess
import sys

WORKLOADS = ["W1", "W2", "W3"]


def start(binary, data):
    p = subprocess.Popen(
        ["taskset", "-c", "1", binary, "serve", data],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = p.stdout.readline().strip()
    if not line.startswith("ready"):
        sys.exit(f"{binary} said {line!r} instead of `ready <name>`")
    return p


def run(p, workload, system):
    p.stdin.write(f"run {workload} {system}\n")
    p.stdin.flush()
    words = p.stdout.readline().split()
    return dict(w.split("=", 1) for w in words[3:])


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    before, after, data, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    system = sys.argv[5] if len(sys.argv) > 5 else "tapeplan"
    workloads = sys.argv[6:] or WORKLOADS
    try:
        launches = int(os.environ.get("LAUNCHES") or "1")
    except ValueError:
        sys.exit(f"LAUNCHES={os.environ['LAUNCHES']!r}: a whole number of launches, at least 1")
    if launches < 1 or rounds < 1:
        sys.exit("LAUNCHES and ROUNDS must be at least 1")
    print(open("/proc/loadavg").read().strip(), "(load before)")
    results = {}
    per_launch = {}
    for launch in range(launches):
        # Which build starts, and runs first in a round, alternates by launch as well as by
        # round, so that an odd ROUNDS does not favour one build in every launch.
        first, second = ("before", "after") if launch % 2 == 0 else ("after", "before")
        workers = {}
        try:
            workers[first] = start(before if first == "before" else after, data)
            workers[second] = start(before if second == "before" else after, data)
            for r in range(rounds):
                for w in workloads:
                    order = [first, second] if (launch + r) % 2 == 0 else [second, first]
                    for build in order:
                        f = run(workers[build], w, system)
                        results.setdefault((w, build), []).append(f)
                        per_launch.setdefault((w, build, launch), []).append(
                            float(f["ns_per_step"])
                        )
        finally:
            for p in workers.values():
                p.stdin.close()
                p.wait()
    print(open("/proc/loadavg").read().strip(), "(load after)")
    for w in workloads:
        b, a = results[(w, "before")], results[(w, "after")]
        tb = [float(f["ns_per_step"]) for f in b]
        ta = [float(f["ns_per_step"]) for f in a]
        ratio = statistics.median(x / y for x, y in zip(ta, tb))
        if launches > 1:
            mb = [statistics.median(per_launch[(w, "before", i)]) / 1e3 for i in range(launches)]
            ma = [statistics.median(per_launch[(w, "after", i)]) / 1e3 for i in range(launches)]
            print(f"{w}: launch medians before {' '.join(f'{x:.1f}' for x in mb)} us")
            print(f"{w}: launch medians after  {' '.join(f'{x:.1f}' for x in ma)} us")
            mean = statistics.mean(x / y for x, y in zip(ma, mb))
            print(f"{w}: mean over launches of after / before {mean:.3f}")
        same = all(
            fa["loss_final"] == fb["loss_final"] and fa["param_abs_sum"] == fb["param_abs_sum"]
            for fa, fb in zip(a, b)
        )
        print(
            f"{w}: before {statistics.median(tb) / 1e3:.2f} us/step, "
            f"after {statistics.median(ta) / 1e3:.2f} us/step, "
            f"after / before {ratio:.3f}; same final loss and parameters every round: {same}"
        )


if __name__ == "__main__":
    main()
