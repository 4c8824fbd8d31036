"""A step window under torch.profiler, written the way tessera-train writes its
own (worker/trainer/run/step_profiler.h): DIR/trace.json (a Chrome trace) and
DIR/summary.json (the window's steps and wall time, and whether it ran on a
GPU), so that compare.py reads both sides alike.

Used by the peers: bench/step_profile/cpu_peer.py and
bench/trainer_vs_ddp/gpu_peer.py.
"""

import json
import os
import time

import torch


def parse_steps(text):
    """'A-B' or 'N' -> (A, B), steps counted from 1."""
    parts = text.split("-")
    try:
        first, last = int(parts[0]), int(parts[-1])
    except ValueError:
        first, last = 0, 0
    if len(parts) > 2 or first < 1 or last < first:
        raise SystemExit(f"--profile-steps must be A-B with 1 <= A <= B, got {text!r}")
    return first, last


class StepWindow:
    """Call before_step(n) before step n (from 1) and after_step(n) after it."""

    def __init__(self, steps, folder, cuda):
        self.first, self.last = steps
        self.folder = folder
        self.cuda = cuda
        self.profile = None
        self.started = 0.0

    def before_step(self, step):
        if step != self.first:
            return
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
            torch.cuda.synchronize()
        self.profile = torch.profiler.profile(activities=activities)
        self.profile.__enter__()
        self.started = time.perf_counter()

    def after_step(self, step):
        if step != self.last or self.profile is None:
            return
        if self.cuda:
            torch.cuda.synchronize()
        wall_ms = 1000 * (time.perf_counter() - self.started)
        self.profile.__exit__(None, None, None)
        os.makedirs(self.folder, exist_ok=True)
        self.profile.export_chrome_trace(os.path.join(self.folder, "trace.json"))
        with open(os.path.join(self.folder, "summary.json"), "w") as out:
            json.dump({"kind": "device" if self.cuda else "cpu",
                       "steps": self.last - self.first + 1, "wall_ms": wall_ms,
                       "torch": torch.__version__}, out)
        self.profile = None
