#!/usr/bin/env python3
"""Side by side: two step profiles, each a folder with trace.json (a Chrome
trace: tessera-train's --profile-steps, or torch_window.py's) and
summary.json (steps, wall_ms, kind).

Prints per step: wall time, CPU operator calls, and on a GPU the device's
events and idle time; the top N of each side (self CPU time on a CPU run, device
time on a GPU run); the operators by kind; and every copy, cast or layout
change (copy_, to, contiguous, clone, cat, ...) the first side calls more often
than the second. Both sides are read by the same code, so they are counted
alike. Python 3 standard library only.

  compare.py --a DIR --a-name tessera --b DIR --b-name torchvision [--top 20]
"""

import argparse
import collections
import json
import os
import re
import sys

DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}

# (kind, pattern on the operator's name without its "aten::" prefix), first match.
KINDS = [
    ("optimizer", r"^_(fused_adamw|foreach_)|^optimizer|adam|lamb"),
    ("copy/cast/layout", r"^(copy_|_copy_from|_to_copy|to|contiguous|clone|cat|stack|"
                         r"_unsafe_view|reshape|expand|permute|transpose|t|view|flatten|"
                         r"unbind|select|slice|narrow|as_strided|unsqueeze|squeeze|split|"
                         r"chunk|detach|alias|type_as|_reshape_alias|index|unfold)$"),
    ("matmul", r"mm|matmul|linear|gemm|bmm|_addmm_activation|dot"),
    ("convolution", r"conv|cudnn_convolution|_convolution"),
    ("norm", r"norm"),
    ("attention", r"softmax|attention|_efficient|_flash"),
    ("activation", r"gelu|relu|silu|dropout|bernoulli"),
    ("loss", r"cross_entropy|nll_loss|log_softmax"),
    ("allocation/fill", r"^(empty|empty_like|empty_strided|zeros|zeros_like|ones|ones_like|"
                        r"fill_|zero_|full|resize_|randn|rand|normal_|uniform_)$"),
    ("reduction", r"^(sum|mean|max|min|amax|norm|var|std|argmax)"),
    ("elementwise", r"^(add|add_|sub|mul|mul_|div|div_|sqrt|rsqrt|pow|neg|exp|log|addcmul_|"
                    r"addcdiv_|lerp_|where|clamp|sign|abs|ge|gt|lt|le|eq|ne)"),
]


def kind_of(name):
    short = name.split("::")[-1]
    if name.startswith("autograd::") or "Backward" in name:
        return "autograd glue"
    for kind, pattern in KINDS:
        if re.search(pattern, short):
            return kind
    return "other"


def load(folder):
    with open(os.path.join(folder, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(folder, "trace.json")) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    cpu, device = [], []
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        cat = e.get("cat")
        if cat in DEVICE_CATS:
            device.append(e)
        elif cat == "cpu_op" or (cat is None and e.get("pid") in ("CPU functions", "CPU")):
            cpu.append(e)
    return summary, cpu, device


def self_times(events):
    """Per event: its duration less its direct children's on the same thread."""
    by_thread = collections.defaultdict(list)
    for e in events:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    out = []
    for evs in by_thread.values():
        evs.sort(key=lambda e: (float(e["ts"]), -float(e["dur"])))
        open_, selfs = [], {}
        for e in evs:
            start = float(e["ts"])
            while open_ and float(open_[-1]["ts"]) + float(open_[-1]["dur"]) <= start:
                open_.pop()
            selfs[id(e)] = selfs.get(id(e), 0.0) + float(e["dur"])
            if open_:
                selfs[id(open_[-1])] = selfs.get(id(open_[-1]), 0.0) - float(e["dur"])
            open_.append(e)
        out.extend((e["name"], max(selfs[id(e)], 0.0)) for e in evs)
    return out


def busy_us(events):
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events)
    busy, covered = 0.0, float("-inf")
    for begin, end in spans:
        start = max(begin, covered)
        if end > start:
            busy += end - start
        covered = max(covered, end)
    return busy


class Side:
    def __init__(self, name, folder):
        self.name = name
        summary, cpu, device = load(folder)
        self.steps = max(int(summary["steps"]), 1)
        self.wall_ms = float(summary["wall_ms"]) / self.steps
        self.device = summary.get("kind") == "device"
        self.cpu_calls = len(cpu) / self.steps
        self.device_events = len(device) / self.steps
        self.idle_ms = (float(summary["wall_ms"]) - busy_us(device) / 1000) / self.steps
        timed = ([(e["name"], float(e["dur"])) for e in device] if self.device
                 else self_times(cpu))
        self.rows = collections.defaultdict(lambda: [0, 0.0])  # name -> calls, ms per step
        for name, us in timed:
            self.rows[name][0] += 1 / self.steps
            self.rows[name][1] += us / 1000 / self.steps
        # Every CPU operator by name (calls per step), for kinds and copies.
        self.calls = collections.Counter()
        for e in cpu:
            self.calls[e["name"]] += 1 / self.steps
        self.cpu_self = collections.defaultdict(float)
        for name, us in self_times(cpu):
            self.cpu_self[name] += us / 1000 / self.steps

    def top(self, n):
        return sorted(self.rows.items(), key=lambda kv: (-kv[1][1], kv[0]))[:n]


def cut(name, width):
    return name if len(name) <= width else name[: width - 3] + "..."


def print_totals(a, b):
    print(f"{'per step':<28}{a.name:>16}{b.name:>16}")
    print(f"{'wall ms':<28}{a.wall_ms:>16.3f}{b.wall_ms:>16.3f}")
    print(f"{'CPU operator calls':<28}{a.cpu_calls:>16.1f}{b.cpu_calls:>16.1f}")
    if a.device or b.device:
        print(f"{'device events (kernels...)':<28}{a.device_events:>16.1f}{b.device_events:>16.1f}")
        print(f"{'device idle ms':<28}{a.idle_ms:>16.3f}{b.idle_ms:>16.3f}")


def print_top(a, b, n):
    what = "device time" if a.device else "self CPU time"
    print(f"\ntop {n} by {what}, per step (calls, ms):")
    width = 46
    ta, tb = a.top(n), b.top(n)
    print(f"  {a.name:<{width + 18}}  {b.name}")
    for i in range(max(len(ta), len(tb))):
        left = (f"{cut(ta[i][0], width):<{width}} {ta[i][1][0]:6.1f} {ta[i][1][1]:9.3f}"
                if i < len(ta) else " " * (width + 17))
        right = (f"{cut(tb[i][0], width):<{width}} {tb[i][1][0]:6.1f} {tb[i][1][1]:9.3f}"
                 if i < len(tb) else "")
        print(f"  {left}   {right}")


def print_kinds(a, b):
    kinds = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for side, col in ((a, 0), (b, 1)):
        for name, calls in side.calls.items():
            kinds[kind_of(name)][col] += calls
        for name, ms in side.cpu_self.items():
            kinds[kind_of(name)][col + 2] += ms
    print(f"\nCPU operators by kind, per step: calls {a.name} / {b.name}, "
          f"self ms {a.name} / {b.name}")
    for kind, (ca, cb, ma, mb) in sorted(kinds.items(), key=lambda kv: -kv[1][0]):
        print(f"  {kind:<20}{ca:9.1f}{cb:9.1f}{ma:11.3f}{mb:11.3f}")


def print_extra_copies(a, b):
    print(f"\ncopies, casts and layout changes {a.name} calls more often than {b.name} "
          f"(per step):")
    rows = []
    for name, calls in a.calls.items():
        if kind_of(name) != "copy/cast/layout":
            continue
        extra = calls - b.calls.get(name, 0.0)
        if extra > 0.05:
            rows.append((extra, name, calls, b.calls.get(name, 0.0), a.cpu_self.get(name, 0.0)))
    if not rows:
        print("  none")
    for extra, name, calls, peer, ms in sorted(rows, reverse=True):
        print(f"  {cut(name, 40):<40} {calls:8.1f} vs {peer:8.1f}  (+{extra:.1f}, "
              f"{ms:.3f} ms self)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="first profile folder")
    parser.add_argument("--a-name", default="tessera")
    parser.add_argument("--b", required=True, help="second profile folder")
    parser.add_argument("--b-name", default="peer")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    try:
        a, b = Side(args.a_name, args.a), Side(args.b_name, args.b)
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"compare: cannot read a profile: {e}")
    print_totals(a, b)
    print_top(a, b, args.top)
    print_kinds(a, b)
    print_extra_copies(a, b)


if __name__ == "__main__":
    main()
