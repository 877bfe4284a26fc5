"""Per-run counters of the MLX EP, read back from its Chrome trace (``ORTMLX_TRACE``).

Every ``compute`` event of a fused node carries the run's ``path`` (``decode``, ``prefill``,
``general``: a compiled closure of that slot; ``eager``), ``host_syncs`` (times the run waited
for MLX: host reads plus the final evaluation) and ``host_reads`` (computed tensors read back to
the host mid-run). When a fused node is released its totals come as a ``run_stats`` event. The
EP writes the trace when a session's EP is released and at process exit, so read it after
deleting the sessions (or in a child process)."""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import statistics


#: The per-run wall-time phases of a ``compute`` event, in microseconds, in order: reading ORT's
#: inputs, waiting for the lane's thread, binding inputs, building or calling the MLX graph,
#: waiting for MLX, contiguous outputs, writing ORT's outputs.
PHASES = ("inputs_us", "handoff_us", "bind_us", "dispatch_us", "eval_us", "finish_us", "outputs_us")

#: The per-run byte counters of a ``compute`` event: bytes copied into MLX and out to ORT, and of
#: those the KV cache's.
COPY_COUNTERS = ("copied_input_bytes", "copied_output_bytes", "kv_copied_bytes")


@dataclasses.dataclass
class NodeRuns:
    """The runs of one fused node."""

    runs: int = 0
    paths: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    host_syncs: int = 0
    host_reads: int = 0
    max_host_syncs: int = 0
    #: Per run, in order: (path, host_syncs, host_reads).
    per_run: list = dataclasses.field(default_factory=list)
    #: Sums of the copy counters (``COPY_COUNTERS``) over the runs.
    bytes: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    #: Per path, per phase (``PHASES``): the microseconds of each run.
    phases: dict = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "runs": self.runs,
            "paths": dict(self.paths),
            "host_syncs": self.host_syncs,
            "host_reads": self.host_reads,
            "max_host_syncs": self.max_host_syncs,
            "host_syncs_per_run": self.host_syncs / self.runs if self.runs else 0.0,
            "host_reads_per_run": self.host_reads / self.runs if self.runs else 0.0,
        }


def read_trace(path: str | os.PathLike) -> dict:
    with open(path) as f:
        return json.load(f)


def node_runs(trace: dict) -> dict[str, NodeRuns]:
    """Per fused node, the counters of its ``compute`` events (runs that failed carry none)."""
    out: dict[str, NodeRuns] = {}
    events = sorted((e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") == "compute"), key=lambda e: e["ts"])
    for e in events:
        args = e.get("args", {})
        if "path" not in args:
            continue
        n = out.setdefault(e["name"], NodeRuns())
        n.runs += 1
        n.paths[args["path"]] += 1
        n.host_syncs += int(args["host_syncs"])
        n.host_reads += int(args["host_reads"])
        n.max_host_syncs = max(n.max_host_syncs, int(args["host_syncs"]))
        n.per_run.append((args["path"], int(args["host_syncs"]), int(args["host_reads"])))
        for key in COPY_COUNTERS:
            n.bytes[key] += int(args.get(key, 0))
        by_phase = n.phases.setdefault(args["path"], {})
        for key in PHASES:
            if key in args:
                by_phase.setdefault(key, []).append(int(args[key]))
    return out


def phase_medians(nodes: dict[str, NodeRuns]) -> dict[str, dict[str, float]]:
    """Per path, the median microseconds of each phase of one session run: per fused node the
    median over its runs of that path, summed over the fused nodes (they run one after the other)."""
    out: dict[str, dict[str, float]] = {}
    for n in nodes.values():
        for path, by_phase in n.phases.items():
            acc = out.setdefault(path, {})
            for key, values in by_phase.items():
                acc[key] = acc.get(key, 0.0) + statistics.median(values)
    return out


def totals(trace: dict) -> dict[str, dict]:
    """Per fused node, the ``run_stats`` event written when it was released."""
    return {e["name"]: e.get("args", {}) for e in trace.get("traceEvents", []) if e.get("cat") == "run_stats"}


def summary(trace: dict) -> dict:
    """All fused nodes together: runs by path, host syncs and reads per session run (the nodes of
    one session run one after the other, so per-node counts add up)."""
    nodes = node_runs(trace)
    paths: collections.Counter = collections.Counter()
    for n in nodes.values():
        paths.update(n.paths)
    return {
        "fused_nodes": len(nodes),
        "node_runs": sum(n.runs for n in nodes.values()),
        "paths": dict(paths),
        "host_syncs": sum(n.host_syncs for n in nodes.values()),
        "host_reads": sum(n.host_reads for n in nodes.values()),
        # bytes the runs copied between ORT's buffers and MLX (see docs/usage.md, "Device memory")
        **{key: sum(n.bytes.get(key, 0) for n in nodes.values()) for key in COPY_COUNTERS},
        "phase_us": phase_medians(nodes),
        "nodes": {name: n.as_dict() for name, n in nodes.items()},
    }


class TraceCursor:
    """Reads the counters of the runs traced since the previous call (the trace file only grows
    within a process; it is rewritten whenever an EP is released)."""

    def __init__(self, path: str | os.PathLike):
        self.path = path
        self.seen = 0

    def since_last(self) -> dict | None:
        """The :func:`summary` of the compute events added since the last call, or ``None`` when
        there is no trace file (``ORTMLX_TRACE`` unset, or nothing released yet)."""
        try:
            trace = read_trace(self.path)
        except (OSError, ValueError):
            return None
        events = sorted((e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") == "compute"), key=lambda e: e["ts"])
        new = events[self.seen :]
        self.seen = len(events)
        return summary({"traceEvents": new})
