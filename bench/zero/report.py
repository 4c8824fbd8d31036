#!/usr/bin/env python3
"""Collects and reports the runs of bench/zero (run.sh, run_torch26.sh).

A run is one world size at one ZeRO stage, every rank of it. Each run is one
JSON line of a results file:

  {"side": "tessera" | "pytorch", "world": N, "stage": S, "repeat": R,
   "command": "...", "rss_source": "...",
   "ranks": [{"rank": 0, "peak_rss_bytes": ..., "optimizer_state_bytes": ...,
              "gradient_bytes": ..., "comm_bytes_per_step": ..., "step_ms": ...}]}

Subcommands:
  collect-tessera  reads one tessera run's rank files (metrics JSON lines, GNU
                   time's %M) and prints its line
  collect-pytorch  reads one torch_peer.py run's rank lines and prints its line
  tessera FILE     per world size, a table of the stages and issue 41's targets
                   for tessera-train (memory, traffic, time); exit 1 on a miss
  compare T P      per world size and stage, tessera's peak RSS per rank beside
                   the PyTorch peer's, and the target against it; exit 1 on a miss

Of the repeats of a run, the one with the shortest step time counts (the
machine may be shared). A figure of a run is the maximum over its ranks: the
largest rank bounds the memory a machine needs, and the slowest paces the step.
Exit 2 when a target cannot be checked (a figure missing, no stage 0 to compare
with) and nothing was missed.
"""

import argparse
import json
import math
import sys

MB = 1e6  # the issue's figures are decimal megabytes

# Issue 41's targets against stage 0, by stage: step time and bytes sent may
# grow at most by these factors.
TIME_LIMIT = {1: 1.10, 2: 1.10, 3: 1.35}
TRAFFIC_LIMIT = {1: 1.0, 2: 1.0, 3: 1.5}
MEMORY_SHARE = 0.85  # of what the stage shards away
PEER_MARGIN = 0.10  # tessera's peak per rank at least this far below PyTorch's


def collect_tessera(args):
    ranks = []
    for rank in range(args.world):
        prefix = f"{args.dir}/r{rank}"
        figures = {"rank": rank}
        first = {}
        peak_metric = None
        step_ms = []
        comm = (-1, None)  # the last interval's: the first has the initial broadcast
        with open(f"{prefix}.jsonl") as metrics:
            for line in metrics:
                point = json.loads(line)
                name, value, step = point["name"], point["value"], point.get("step", 0)
                if name in ("optimizer_state_bytes", "gradient_bytes"):
                    first.setdefault(name, value)
                elif name == "peak_rss_bytes":
                    peak_metric = max(value, peak_metric or 0)
                elif name == "time_step_ms" and step > args.warmup:
                    step_ms.append(value)
                elif name == "comm_bytes_per_step" and step >= comm[0]:
                    comm = (step, value)
        figures.update(first)
        if args.rss_source == "gnu-time":
            with open(f"{prefix}.maxrss") as maxrss:  # %M: KiB
                figures["peak_rss_bytes"] = int(maxrss.read().split()[-1]) * 1024
        else:
            figures["peak_rss_bytes"] = peak_metric
        figures["comm_bytes_per_step"] = comm[1]
        figures["step_ms"] = sum(step_ms) / len(step_ms) if step_ms else None
        ranks.append(figures)
    print(json.dumps({"side": "tessera", "world": args.world, "stage": args.stage,
                      "repeat": args.repeat, "command": args.command,
                      "rss_source": args.rss_source, "ranks": ranks}))


def collect_pytorch(args):
    ranks = []
    for path in args.files:
        with open(path) as lines:
            point = [json.loads(line) for line in lines if line.startswith("{")][-1]
        ranks.append({"rank": point["rank"], "peak_rss_bytes": point["peak_rss_bytes"],
                      "step_ms": point["step_ms"], "mode": point["mode"],
                      "parameters": point["parameters"], "torch": point["torch"],
                      "torchvision": point["torchvision"]})
    print(json.dumps({"side": "pytorch", "world": args.world, "stage": args.stage,
                      "repeat": args.repeat, "command": args.command,
                      "rss_source": "getrusage ru_maxrss", "ranks": ranks}))


def load(path):
    """(world, stage) -> the fastest repeat's record."""
    best = {}
    with open(path) as results:
        for line in results:
            run = json.loads(line)
            key = (run["world"], run["stage"])
            if key not in best or speed_key(run) < speed_key(best[key]):
                best[key] = run
    return best


def figure(run, name):
    """The maximum over the run's ranks, or None if a rank lacks it."""
    values = [rank.get(name) for rank in run["ranks"]]
    return None if not values or any(v is None for v in values) else max(values)


def speed_key(run):
    step = figure(run, "step_ms")
    return math.inf if step is None else step


def fmt_mb(value):
    return "-" if value is None else f"{value / MB:,.1f}"


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


class Verdicts:
    def __init__(self):
        self.missed = self.unknown = 0

    def check(self, label, ok, text):
        """ok: True, False, or None (cannot tell)."""
        word = {True: "PASS", False: "MISS", None: "N/A "}[ok]
        self.missed += ok is False
        self.unknown += ok is None
        print(f"  {word} {label}: {text}")

    def exit_code(self):
        return 1 if self.missed else 2 if self.unknown else 0


def sharded_bytes(base, stage, world):
    """What a stage shards away from stage 0's whole copies, per rank.

    Stage 1 shards the optimizer state, stage 2 also the gradients, stage 3
    also the parameters; a rank keeps 1/world of each. The parameters' bytes
    are stage 0's gradient bytes (the benchmark trains in fp32, where a
    gradient is the size of its parameter).
    """
    optimizer, gradients = figure(base, "optimizer_state_bytes"), figure(base, "gradient_bytes")
    if optimizer is None or gradients is None:
        return None
    whole = optimizer + (gradients if stage >= 2 else 0) + (gradients if stage >= 3 else 0)
    return whole * (1 - 1 / world)


def report_tessera(args):
    runs = load(args.results)
    verdicts = Verdicts()
    if not runs:
        print("no tessera-train runs to report")
        return 2
    for world in sorted({w for w, _ in runs}):
        stages = sorted(s for w, s in runs if w == world)
        sample = runs[(world, stages[0])]
        print(f"\n== tessera-train, world size {world} (peak RSS from "
              f"{sample['rss_source']}; MB = 10^6 bytes; each figure the maximum over ranks)")
        print(f"{'stage':>5} {'peak RSS MB':>12} {'optimizer MB':>13} {'gradients MB':>13} "
              f"{'model state MB':>15} {'sent MB/step':>13} {'step ms':>9}")
        for stage in stages:
            run = runs[(world, stage)]
            opt, grad = figure(run, "optimizer_state_bytes"), figure(run, "gradient_bytes")
            state = None if opt is None or grad is None else max(
                r["optimizer_state_bytes"] + r["gradient_bytes"] for r in run["ranks"])
            print(f"{stage:>5} {fmt_mb(figure(run, 'peak_rss_bytes')):>12} {fmt_mb(opt):>13} "
                  f"{fmt_mb(grad):>13} {fmt_mb(state):>15} "
                  f"{fmt_mb(figure(run, 'comm_bytes_per_step')):>13} "
                  f"{fmt(figure(run, 'step_ms'), '.0f'):>9}")
        print(f"  stage {stages[0]}, rank 0: {runs[(world, stages[0])]['command']}")
        print("  (the other stages and ranks differ in --zero-stage, --rank, the port and "
              "the file names)")
        base = runs.get((world, 0))
        print(f"targets at world size {world}, against stage 0:")
        if base is None:
            verdicts.check("all", None, "no stage 0 run to compare with")
            continue
        if stages == [0]:
            print("  none: only stage 0 ran")
        for stage in (s for s in stages if s != 0):
            check_stage(verdicts, world, stage, runs[(world, stage)], base)
    print()
    print({0: "targets met", 1: "targets missed", 2: "targets not all checked"}[
        verdicts.exit_code()])
    return verdicts.exit_code()


def check_stage(verdicts, world, stage, run, base):
    label = f"stage {stage}"
    rss, rss0 = figure(run, "peak_rss_bytes"), figure(base, "peak_rss_bytes")
    sharded = sharded_bytes(base, stage, world)
    if rss is None or rss0 is None or sharded is None:
        verdicts.check(f"{label} memory", None, "peak RSS or stage 0's counted bytes missing")
    else:
        need = MEMORY_SHARE * sharded
        verdicts.check(f"{label} memory", rss0 - rss >= need,
                       f"peak RSS {fmt_mb(rss0 - rss)} MB below stage 0's (target >= "
                       f"{fmt_mb(need)} MB: 85% of the {fmt_mb(sharded)} MB it shards)")
    for name, limits, what, unit in (("comm_bytes_per_step", TRAFFIC_LIMIT, "traffic", "sent"),
                                     ("step_ms", TIME_LIMIT, "time", "step time")):
        if stage not in limits:
            verdicts.check(f"{label} {what}", None, f"the issue sets no target for stage {stage}")
            continue
        ours, theirs = figure(run, name), figure(base, name)
        if ours is None or not theirs:
            verdicts.check(f"{label} {what}", None, f"{name} not reported")
            continue
        # Counted bytes: chunk sums may round a few bytes apart.
        verdicts.check(f"{label} {what}", ours <= limits[stage] * theirs * (1 + 1e-6),
                       f"{unit} {ours / theirs:.3f}x stage 0's (target <= {limits[stage]:.2f}x)")


def report_compare(args):
    ours, peer = load(args.tessera), load(args.pytorch)
    verdicts = Verdicts()
    print("\n== peak RSS per rank, tessera-train against the PyTorch peer "
          "(MB = 10^6 bytes; the maximum over ranks)")
    print(f"{'world':>5} {'stage':>5} {'peer mode':>13} {'tessera MB':>11} {'PyTorch MB':>11} "
          f"{'ratio':>6} {'tessera ms':>11} {'PyTorch ms':>11}")
    keys = sorted(set(ours) | set(peer))
    for key in keys:
        a, b = ours.get(key), peer.get(key)
        rss_a = figure(a, "peak_rss_bytes") if a else None
        rss_b = figure(b, "peak_rss_bytes") if b else None
        mode = b["ranks"][0]["mode"] if b else "-"
        ratio = rss_a / rss_b if rss_a and rss_b else None
        print(f"{key[0]:>5} {key[1]:>5} {mode:>13} {fmt_mb(rss_a):>11} {fmt_mb(rss_b):>11} "
              f"{fmt(ratio, '.3f'):>6} {fmt(figure(a, 'step_ms') if a else None, '.0f'):>11} "
              f"{fmt(figure(b, 'step_ms') if b else None, '.0f'):>11}")
    shown = set()
    for world, stage in sorted(peer):
        if stage not in shown:
            shown.add(stage)
            print(f"  PyTorch, world size {world}, stage {stage}, rank 0: "
                  f"{peer[(world, stage)]['command']}")
    if shown:
        print("  (the other world sizes and ranks differ in --world-size, --rank and the port)")
    print(f"target: tessera's peak RSS per rank at least {PEER_MARGIN:.0%} below PyTorch's")
    for world, stage in keys:
        a, b = ours.get((world, stage)), peer.get((world, stage))
        rss_a = figure(a, "peak_rss_bytes") if a else None
        rss_b = figure(b, "peak_rss_bytes") if b else None
        label = f"world {world} stage {stage}"
        if rss_a is None or rss_b is None:
            verdicts.check(label, None, "a side did not run")
            continue
        verdicts.check(label, rss_a <= (1 - PEER_MARGIN) * rss_b,
                       f"tessera {rss_a / rss_b:.3f}x PyTorch's (target <= "
                       f"{1 - PEER_MARGIN:.2f}x)")
    print()
    print({0: "target met", 1: "target missed", 2: "target not all checked"}[
        verdicts.exit_code()])
    return verdicts.exit_code()


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command_name", required=True)
    for name in ("collect-tessera", "collect-pytorch"):
        p = sub.add_parser(name)
        p.add_argument("--world", type=int, required=True)
        p.add_argument("--stage", type=int, required=True)
        p.add_argument("--repeat", type=int, required=True)
        p.add_argument("--command", required=True, help="rank 0's command line, for the record")
    collect = sub.choices["collect-tessera"]
    collect.add_argument("--dir", required=True, help="r<rank>.jsonl and r<rank>.maxrss")
    collect.add_argument("--warmup", type=int, required=True, help="steps not timed")
    collect.add_argument("--rss-source", choices=("gnu-time", "metric"), required=True)
    sub.choices["collect-pytorch"].add_argument("files", nargs="+", help="one per rank")
    p = sub.add_parser("tessera")
    p.add_argument("results")
    p = sub.add_parser("compare")
    p.add_argument("tessera")
    p.add_argument("pytorch")
    args = parser.parse_args()
    if args.command_name == "collect-tessera":
        collect_tessera(args)
    elif args.command_name == "collect-pytorch":
        collect_pytorch(args)
    elif args.command_name == "tessera":
        sys.exit(report_tessera(args))
    else:
        sys.exit(report_compare(args))


if __name__ == "__main__":
    main()
