#!/usr/bin/env python3
"""Runs the Python snippets of the documentation against the installed wheel.

``check_snippets.py README.md docs/usage.md`` (the ONNX Runtime matrix of ``cargo xtask test``
runs it in an environment where the wheel, onnxruntime, numpy and onnx are installed):

1. the README's first ```` ```python ```` block, which must attach the EP, runs verbatim with
   only the model path (``"model.onnx"``) replaced by a small float32 model's. Every session it
   creates is then run and must match numpy with every node on ``MLXExecutionProvider``
   (``session.record_ep_graph_assignment_info`` on ORT >= 1.24; on older ones
   ``session.disable_cpu_ep_fallback=1``, which fails the session when a node would stay on the
   CPU EP, and the profile);
2. every ```` ```python ```` block of each document runs in order in one namespace per document
   (a fresh process each), with ``"model.onnx"`` and ``"/path/to/libonnxruntime_mlx_ep.so"``
   replaced by the model and the installed library. Sessions they create are checked for
   placement as above where ORT reports it.

A block is skipped when the line before its fence is ``<!-- no-run -->`` (not meant to run on
its own) or ``<!-- onnxruntime>=X.Y -->`` and the installed ONNX Runtime is older. A block after
``<!-- new-process -->`` starts a new process and namespace: it is an alternative to the blocks
before it (registering a self-built library instead of using the wheel's module), not a sequel.

``check_snippets.py --cpp-recipe [--seed FILE ...] docs/usage.md`` runs the C/C++ recipe
instead: each ```` ```sh ```` block after ``<!-- cpp-recipe: PATH -->`` runs verbatim with
``bash -e`` in a fresh folder that holds the C++ source ``PATH`` (relative to the document), a
small float32 model as ``model.onnx`` and the ``--seed`` files (the cached downloads, so the
recipe skips fetching them), with this environment's ``bin`` first on ``PATH`` (as if
activated). The program must print the model's output as ``ran model.onnx on
MLXExecutionProvider: y = ...`` (the C++ example disables the CPU fallback, so that line means
every node ran on MLX), matching numpy. With seeds given, the recipe must not fetch another
``.deb`` than those (the pins of the cache and of the recipe agree).

Exits non-zero with the reason when a block raises or a check fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass

# Import the installed package, never the source next to this script.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]

EP = "MLXExecutionProvider"
MODEL_PATH = '"model.onnx"'
LIBRARY_PATH = '"/path/to/libonnxruntime_mlx_ep.so"'


@dataclass
class Block:
    doc: str
    line: int  # of the fence
    code: str
    marker: str  # the HTML comment before the fence, or ""


def blocks(path: str, language: str = "python") -> list[Block]:
    """The ```<language> blocks of a markdown file."""
    found = []
    lines = open(path, encoding="utf-8").read().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```" + language:
            start = i
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            prev = next((lines[k].strip() for k in range(start - 1, -1, -1) if lines[k].strip()), "")
            marker = prev if prev.startswith("<!--") and prev.endswith("-->") else ""
            found.append(Block(os.path.basename(path), start + 1, "\n".join(lines[start + 1 : j]) + "\n", marker))
            i = j
        i += 1
    return found


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def groups(snippets: list[Block]) -> list[list[Block]]:
    """The blocks split where ``<!-- new-process -->`` starts a new process."""
    out: list[list[Block]] = [[]]
    for block in snippets:
        if block.marker[4:-3].strip() == "new-process" and out[-1]:
            out.append([])
        out[-1].append(block)
    return out


def skip_reason(block: Block, ort_version: str) -> str | None:
    if not block.marker:
        return None
    body = block.marker[4:-3].strip()
    if body == "new-process":
        return None
    if body == "no-run":
        return "marked no-run"
    m = re.fullmatch(r"onnxruntime\s*>=\s*([\d.]+)", body)
    if m:
        if version_tuple(ort_version) < version_tuple(m.group(1)):
            return f"needs onnxruntime >= {m.group(1)}"
        return None
    raise SystemExit(f"check_snippets: {block.doc}:{block.line}: unknown marker {block.marker!r}")


# --------------------------------------------------------------------------------------
# the child process: runs snippets, records the sessions they create


def make_model(path: str):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal((8,)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["add"]),
        helper.make_node("Relu", ["add"], ["relu"]),
        helper.make_node("Softmax", ["relu"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "snippet_model",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.flatten()), helper.make_tensor("b", TensorProto.FLOAT, b.shape, b)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)

    def reference(x):
        z = np.maximum(x @ w + b, 0)
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    return reference


def child(mode: str, doc: str, group: int, tmp: str) -> None:
    import numpy as np
    import onnxruntime as ort

    import onnxruntime_mlx_ep as mlx_ep

    has_assignment = hasattr(ort.InferenceSession, "get_provider_graph_assignment_info")
    strict = mode == "first"
    model_path = os.path.join(tmp, "model.onnx")
    reference = make_model(model_path)
    created = []  # one line per session a snippet created (no reference: snippets release them)
    base = ort.InferenceSession
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)

    def verify(session) -> str:
        """Runs a session a snippet made; checks its output and where its nodes went."""
        if has_assignment:
            placed = [(sg.ep_name, n.op_type) for sg in session.get_provider_graph_assignment_info() for n in sg.get_nodes()]
        elif strict:
            placed = None
        else:
            return "placement not readable on this ORT"
        if [i.name for i in session.get_inputs()] != ["x"]:
            # A snippet's own model (a decoder step, say): only where its nodes went is checked.
            if placed is None:
                return "a snippet's own model; placement not readable on this ORT"
            if not placed or any(ep != EP for ep, _ in placed):
                raise AssertionError(f"a session did not run every node on {EP}: {placed}")
            return f"a snippet's own model: every node on {EP}"
        (y,) = session.run(None, {"x": x})
        np.testing.assert_allclose(y, reference(x), rtol=1e-5, atol=1e-6)
        if placed is None:
            with open(session.end_profiling()) as f:
                events = json.load(f)
            placed = [
                (e["args"].get("provider", "?"), e["args"].get("op_name", "?"))
                for e in events
                if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")
            ]
        if not placed or any(ep != EP for ep, _ in placed):
            raise AssertionError(f"a session did not run every node on {EP}: {placed}")
        return f"every node on {EP}"

    class RecordingSession(base):
        """ort.InferenceSession that checks each session a snippet creates."""

        def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, **kwargs):
            if sess_options is None:
                sess_options = ort.SessionOptions()
            if has_assignment:
                sess_options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
            elif strict:
                # ORT 1.23: no assignment API; any node left on the CPU EP fails the session
                sess_options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
                sess_options.enable_profiling = True
                sess_options.profile_file_prefix = os.path.join(tmp, "profile")
            super().__init__(path_or_bytes, sess_options, providers, provider_options, **kwargs)
            created.append(verify(self))

    ort.InferenceSession = RecordingSession
    snippets = blocks(doc) if strict else groups(blocks(doc))[group]
    if strict:
        snippets = snippets[:1]
        if not snippets:
            raise SystemExit(f"check_snippets: {doc} has no ```python block")
        if "onnxruntime_mlx_ep" not in snippets[0].code:
            raise SystemExit(f"check_snippets: the first ```python block of {doc} (line {snippets[0].line}) does not use onnxruntime_mlx_ep")
    namespace: dict = {"__name__": "__snippet__"}
    report = []
    for block in snippets:
        reason = None if strict else skip_reason(block, ort.__version__)
        if reason:
            report.append(f"{block.doc}:{block.line}: skipped ({reason})")
            continue
        code = block.code.replace(MODEL_PATH, repr(model_path))
        if not strict:
            code = code.replace(LIBRARY_PATH, repr(mlx_ep.get_library_path()))
        before = len(created)
        try:
            exec(compile(code, f"{block.doc}:{block.line}", "exec"), namespace)
        except Exception:
            raise SystemExit(f"check_snippets: {block.doc}, the block at line {block.line} raised:\n{traceback.format_exc()}\n{code}")
        report.append(f"{block.doc}:{block.line}: ran ({len(created) - before} session(s))")

    if strict and not created:
        raise SystemExit(f"check_snippets: the first block of {doc} created no InferenceSession")
    report.append(f"{doc}: {len(created)} session(s): " + "; ".join(created))
    print("\n".join(f"  {line}" for line in report))


# --------------------------------------------------------------------------------------
# the C/C++ recipe

CPP_MARKER = "cpp-recipe:"
CPP_OUTPUT = re.compile(r"^ran model\.onnx on MLXExecutionProvider: (\S+) =((?: \S+)+)$", re.M)


def cpp_recipes(doc: str) -> list[tuple[Block, str]]:
    """The ```sh blocks marked ``<!-- cpp-recipe: PATH -->`` and the C++ source each builds."""
    found = []
    for block in blocks(doc, "sh"):
        body = block.marker[4:-3].strip()
        if body.startswith(CPP_MARKER):
            source = os.path.join(os.path.dirname(os.path.abspath(doc)), body[len(CPP_MARKER) :].strip())
            found.append((block, source))
    return found


def run_cpp_recipe(block: Block, source: str, seeds: list[str]) -> str:
    """Runs one recipe block verbatim in a fresh folder; returns what it printed, checked."""
    import numpy as np

    if not os.path.isfile(source):
        raise SystemExit(f"check_snippets: {block.doc}:{block.line}: the marker names {source}, which does not exist")
    with tempfile.TemporaryDirectory(prefix="ortmlx-cpp-recipe-") as tmp:
        shutil.copy(source, tmp)
        for seed in seeds:
            shutil.copy(seed, tmp)
        reference = make_model(os.path.join(tmp, "model.onnx"))
        env = dict(os.environ)
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "/usr/bin:/bin")
        env["VIRTUAL_ENV"] = sys.prefix
        out = subprocess.run(["bash", "-e", "-c", block.code], cwd=tmp, env=env, capture_output=True, text=True, timeout=900)
        where = f"{block.doc}:{block.line}"
        if out.returncode != 0:
            raise SystemExit(f"check_snippets: the C/C++ recipe at {where} exited with {out.returncode}:\n{out.stdout[-4000:]}\n{out.stderr[-6000:]}")
        if seeds:
            seeded = {os.path.basename(s) for s in seeds}
            fetched = sorted(f for f in os.listdir(tmp) if f.endswith(".deb") and f not in seeded)
            if fetched:
                raise SystemExit(
                    f"check_snippets: the C/C++ recipe at {where} fetched {fetched}, while the cache holds {sorted(seeded)}: "
                    "the recipe and xtask/src/ort_headers.rs pin different files"
                )
    match = CPP_OUTPUT.search(out.stdout)
    if not match:
        raise SystemExit(f"check_snippets: the C/C++ recipe at {where} printed no 'ran model.onnx on MLXExecutionProvider' line:\n{out.stdout}\n{out.stderr[-4000:]}")
    name, values = match.group(1), [float(v) for v in match.group(2).split() if v != "..."]
    expected = reference(np.ones((4, 16), np.float32)).ravel()[: len(values)]
    if name != "y" or len(values) != 8:
        raise SystemExit(f"check_snippets: the C/C++ recipe at {where} printed {match.group(0)!r}, expected 8 values of y")
    # The program prints with %g (6 significant digits).
    np.testing.assert_allclose(values, expected, rtol=2e-5, atol=1e-6, err_msg=f"the C/C++ recipe at {where}")
    return match.group(0)


def cpp_main(args: list[str]) -> None:
    seeds: list[str] = []
    docs: list[str] = []
    while args:
        arg = args.pop(0)
        if arg == "--seed":
            if not args:
                raise SystemExit("check_snippets: --seed needs a file")
            seeds.append(os.path.abspath(args.pop(0)))
        else:
            docs.append(arg)
    if not docs:
        raise SystemExit("usage: check_snippets.py --cpp-recipe [--seed FILE ...] docs/usage.md [more.md ...]")
    import onnxruntime as ort

    print(f"check_snippets: C/C++ recipe, onnxruntime {ort.__version__}")
    recipes = [r for doc in docs for r in cpp_recipes(doc)]
    if not recipes:
        raise SystemExit(f"check_snippets: no ```sh block marked <!-- {CPP_MARKER} ... --> in {', '.join(docs)}")
    for block, source in recipes:
        line = run_cpp_recipe(block, source, seeds)
        print(f"PASS  {block.doc}:{block.line}: the C/C++ recipe built {os.path.basename(source)} and ran it: {line}")


# --------------------------------------------------------------------------------------


def main() -> None:
    if len(sys.argv) >= 2 and sys.argv[1] == "--child":
        _, _, mode, doc, group = sys.argv
        with tempfile.TemporaryDirectory(prefix="ortmlx-snippets-") as tmp:
            child(mode, doc, int(group), tmp)
        return
    if len(sys.argv) >= 2 and sys.argv[1] == "--cpp-recipe":
        cpp_main(sys.argv[2:])
        return
    docs = sys.argv[1:]
    if not docs:
        raise SystemExit("usage: check_snippets.py README.md [more.md ...]")
    import onnxruntime as ort

    print(f"check_snippets: onnxruntime {ort.__version__}")
    runs = [("first", docs[0], 0)] + [("all", d, g) for d in docs for g in range(len(groups(blocks(d))))]
    failed = []
    for mode, doc, group in runs:
        what = f"{os.path.basename(doc)}: " + (
            "its first snippet verbatim, every node on MLX" if mode == "first" else f"process {group + 1}: its snippets in order"
        )
        out = subprocess.run([sys.executable, "-I", os.path.abspath(__file__), "--child", mode, doc, str(group)], capture_output=True, text=True)
        print(f"{'PASS' if out.returncode == 0 else 'FAIL'}  {what}")
        sys.stdout.write(out.stdout)
        if out.returncode != 0:
            failed.append(what)
            sys.stdout.write(out.stderr[-6000:])
    if failed:
        raise SystemExit(f"check_snippets: {len(failed)} failed: {'; '.join(failed)}")


if __name__ == "__main__":
    main()
