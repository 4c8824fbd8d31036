#!/usr/bin/env python3
"""Prints bench/search's table: ASHA against random search, per seed and as means.

  report.py SEARCH.json... [--out results.json]

Each SEARCH.json is `tessctl search report ID -o json` with the seed, the wall
time (wall_seconds) and the best trial's test accuracy (best_test_accuracy)
added by bench/search/run.sh. A search's training steps are the sum over its
trials of the step each reached (a promoted trial resumes where it stopped, so
its rungs are not counted twice). Exits 1 if the target is missed: ASHA's mean
best validation accuracy within 0.5 points of random's, at no more than 40% of
random's steps.
"""
import argparse
import json
import statistics
import sys

ACCURACY_SLACK = 0.005  # 0.5 points
STEPS_RATIO = 0.40


def summarize(report):
    trials = report["trials"]
    best = [t for t in trials if t["best"]]
    return {
        "method": report["method"],
        "seed": report["seed"],
        "search_id": report["search_id"],
        "state": report["state"],
        "best_trial": best[0]["trial"] if best else None,
        "best_val_accuracy": best[0]["best_metric"] if best else None,
        "best_test_accuracy": report.get("best_test_accuracy"),
        "trials": len(trials),
        "completed": sum(1 for t in trials if t["status"] == "completed"),
        "failed": sum(1 for t in trials if t["status"] == "failed"),
        "steps": sum(t["steps"] for t in trials),
        "wall_seconds": report["wall_seconds"],
    }


def percent(x):
    return "-" if x is None else f"{100 * x:.2f}%"


def print_table(rows):
    header = ("seed", "method", "best val acc", "its test acc", "trials", "completed",
              "failed", "steps", "wall")
    lines = [header]
    for r in rows:
        lines.append((str(r["seed"]), r["method"], percent(r["best_val_accuracy"]),
                      percent(r["best_test_accuracy"]), str(r["trials"]),
                      str(r["completed"]), str(r["failed"]), str(r["steps"]),
                      f'{r["wall_seconds"]:.0f}s'))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip())


def mean_of(rows, key):
    values = [r[key] for r in rows if r[key] is not None]
    return statistics.mean(values) if values else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+")
    parser.add_argument("--out", help="write the rows, means and verdict here as JSON")
    args = parser.parse_args()
    rows = [summarize(json.load(open(path))) for path in args.reports]
    rows.sort(key=lambda r: (r["seed"], r["method"]))
    means = []
    for method in ("asha", "random"):
        of = [r for r in rows if r["method"] == method]
        if not of:
            continue
        means.append({
            "method": method,
            "seed": "mean",
            "best_val_accuracy": mean_of(of, "best_val_accuracy"),
            "best_test_accuracy": mean_of(of, "best_test_accuracy"),
            "trials": sum(r["trials"] for r in of) / len(of),
            "completed": sum(r["completed"] for r in of) / len(of),
            "failed": sum(r["failed"] for r in of) / len(of),
            "steps": sum(r["steps"] for r in of) / len(of),
            "wall_seconds": mean_of(of, "wall_seconds"),
        })
    for m in means:
        for key in ("trials", "completed", "failed", "steps"):
            m[key] = f"{m[key]:.1f}".rstrip("0").rstrip(".")
    print_table(rows + means)
    result = {"rows": rows, "means": means}
    by = {m["method"]: m for m in means}
    if "asha" in by and "random" in by:
        asha, rnd = by["asha"], by["random"]
        gap = rnd["best_val_accuracy"] - asha["best_val_accuracy"]
        ratio = float(asha["steps"]) / float(rnd["steps"])
        met = gap <= ACCURACY_SLACK + 1e-9 and ratio <= STEPS_RATIO + 1e-9
        print(f"asha's mean best val accuracy is {100 * gap:.2f} points below random's "
              f"(target: at most {100 * ACCURACY_SLACK:.1f}), at {100 * ratio:.1f}% of its "
              f"steps (target: at most {100 * STEPS_RATIO:.0f}%): target "
              f"{'met' if met else 'missed'}")
        result.update(accuracy_gap=gap, steps_ratio=ratio, target_met=met)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if result.get("target_met", True) else 1


if __name__ == "__main__":
    sys.exit(main())
