"""Conversion cost per node on generated graphs of 1k to 200k nodes, and the min-cut solver alone.

    PYTHONPATH=. python bench/scale.py [--sizes 1000 10000 100000] [--shapes chain ...]
        [--decoder FILE | --export-decoder FILE] [--no-flow] [--json FILE]

1. The solver (placement/mincut.max_flow called directly, CPU seconds): a chain of n vertices whose
   every vertex also has a small edge to the sink, a two-rail ladder with rungs, and a chain of
   assign's value gadgets, at 500 to 64k vertices (issue 36: the chain with leaks under 1 s at 4k).
2. Conversion (``amp_convert.convert_file``, O2 fp16, in a fresh process per model; CPU seconds of
   that call, imports excluded) of each shape of models/scale.py (chain, leaky_chain, ladder,
   transformer) at each ``--sizes``, printed as CPU ms per node, and the ratio of the largest
   size's per-node cost to the smallest's (target: within 2x from 1k to 100k nodes; at most 1 ms a
   node at 100k), with the child's peak RSS.
3. A 48-layer GPT-2 exported by torch.onnx (dynamo, opset 18; random weights, hidden 64): with
   ``--decoder FILE`` that file, with ``--export-decoder FILE`` exported there first if missing
   (needs torch and transformers; minutes).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from amp_convert.placement.mincut import INF, FlowNetwork  # noqa: E402

#: the child's peak is bench/_measure.peak_rss (VmHWM): ru_maxrss would carry this parent's RSS
#: at fork (the 100k-node model it just built) into a 1k-node child's figure
CHILD = """
import json, sys, time
from amp_convert.commands.deferred import defer_sympy
defer_sympy()
from amp_convert.api import convert_file
from bench._measure import peak_rss
start, wall = time.process_time(), time.perf_counter()
convert_file(sys.argv[1], sys.argv[2], force=True)
cpu, wall = time.process_time() - start, time.perf_counter() - wall
print(json.dumps({"cpu": cpu, "wall": wall, "rss": peak_rss()}))
"""


# ---------------------------------------------------------------- 1. the solver alone
def _chain_with_leaks(net: FlowNetwork, n: int) -> tuple[int, int]:
    s, t = net.add_vertex(), net.add_vertex()
    vs = [net.add_vertex() for _ in range(n)]
    net.add_edge(s, vs[0], INF)
    for a, b in itertools.pairwise(vs):
        net.add_edge(a, b, 1000 * n)
    for v in vs:
        net.add_edge(v, t, 3)
    return s, t


def _ladder(net: FlowNetwork, n: int) -> tuple[int, int]:
    rnd = random.Random(1)
    add = net.add_edge
    s, t = net.add_vertex(), net.add_vertex()
    a = [net.add_vertex() for _ in range(n // 2)]
    b = [net.add_vertex() for _ in range(n // 2)]
    add(s, a[0], INF)
    add(s, b[0], INF)
    for i in range(n // 2 - 1):
        add(a[i], a[i + 1], rnd.randint(50, 100))
        add(b[i], b[i + 1], rnd.randint(50, 100))
        add(a[i], b[i + 1], rnd.randint(1, 10))
        add(b[i], a[i + 1], rnd.randint(1, 10))
        add(a[i], t, 1)
        add(b[i + 1], t, 2)
    add(a[-1], t, INF)
    return s, t


def _gadgets(net: FlowNetwork, n: int) -> tuple[int, int]:
    """A chain of nodes joined by assign's two-helper value gadgets, some pinned, some read
    further on and by the sink, with weight-1 preference edges."""
    rnd = random.Random(2)
    add, vertex = net.add_edge, net.add_vertex
    s, t = vertex(), vertex()
    vs = [vertex() for _ in range(n)]
    for i, v in enumerate(vs):
        if i % 7 == 0:
            add(s, v, INF)
        elif i % 11 == 0:
            add(v, t, INF)
        else:
            add(s, v, 1)
    for i in range(n - 1):
        w = rnd.randint(1, 10**6) * 1000
        readers = {vs[i + 1]}
        if rnd.random() < 0.3:
            readers.add(vs[min(n - 1, i + rnd.randint(2, 5))])
        if rnd.random() < 0.1:
            readers.add(t)
        up, down = vertex(), vertex()
        add(vs[i], up, w)
        add(down, vs[i], w)
        for r in readers:
            add(up, r, INF)
            add(r, down, INF)
    return s, t


def flow_table(sizes: list[int]) -> list[dict]:
    rows = []
    for name, build in (
        ("chain with leaks", _chain_with_leaks),
        ("ladder", _ladder),
        ("gadget chain", _gadgets),
    ):
        for n in sizes:
            net = FlowNetwork()
            s, t = build(net, n)
            start = time.process_time()
            net.max_flow(s, t)
            net.source_side(s)
            rows.append({"network": name, "n": n, "cpu": time.process_time() - start})
            print(f"  max_flow {name:17s} {n:6d} vertices {rows[-1]['cpu']:7.3f} s", flush=True)
    return rows


# ---------------------------------------------------------------- 2. whole conversions
def convert_cpu(src: Path, dst: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(src), str(dst)], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"conversion of {src} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def conversion_table(shapes: list[str], sizes: list[int], tmp: Path) -> list[dict]:
    import onnx

    from models.scale import SHAPES

    rows = []
    for shape in shapes:
        for n in sizes:
            model = SHAPES[shape](n)
            path = tmp / f"{shape}_{n}.onnx"
            onnx.save(model, str(path))
            nodes = len(model.graph.node)
            del model
            r = convert_cpu(path, tmp / "out.onnx") | {"shape": shape, "nodes": nodes}
            rows.append(r)
            print(
                f"  {shape:12s} {nodes:7d} nodes {r['cpu']:8.2f} CPU-s "
                f"{1000 * r['cpu'] / nodes:6.3f} ms/node  peak RSS {r['rss'] / 2**20:6.0f} MiB",
                flush=True,
            )
            path.unlink()
    return rows


def per_node_summary(rows: list[dict]) -> None:
    by_shape: dict[str, list[dict]] = {}
    for r in rows:
        by_shape.setdefault(r["shape"], []).append(r)
    for shape, rs in by_shape.items():
        rs.sort(key=lambda r: r["nodes"])
        first, last = rs[0], rs[-1]
        a, b = first["cpu"] / first["nodes"], last["cpu"] / last["nodes"]
        print(
            f"  {shape:12s} {first['nodes']} -> {last['nodes']} nodes: {1000 * a:.3f} -> "
            f"{1000 * b:.3f} ms/node, ratio {b / a:.2f}x (target <= 2)"
        )


def export_decoder(path: Path) -> None:
    """A 48-layer GPT-2 (random weights, hidden 64, 4 heads) by torch.onnx's dynamo exporter."""
    import warnings

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    warnings.simplefilter("ignore")
    config = GPT2Config(
        n_layer=48, n_embd=64, n_head=4, vocab_size=100, n_positions=128, use_cache=False
    )
    model = GPT2LMHeadModel(config).eval()
    ids = torch.zeros(1, 16, dtype=torch.long)
    dims = {"input_ids": {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq", max=128)}}
    torch.onnx.export(
        model,
        (ids,),
        str(path),
        input_names=["input_ids"],
        output_names=["logits"],
        dynamic_shapes=dims,
        opset_version=18,
        dynamo=True,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    p.add_argument("--shapes", nargs="+", default=["chain", "leaky_chain", "ladder", "transformer"])
    p.add_argument("--flow-sizes", type=int, nargs="+", default=[500, 1000, 4000, 16000, 64000])
    p.add_argument("--no-flow", action="store_true", help="skip the solver table")
    p.add_argument("--decoder", type=Path, help="an exported decoder to convert too")
    p.add_argument("--export-decoder", type=Path, help="export the 48-layer GPT-2 here if missing")
    p.add_argument("--json", type=Path, help="write every row here")
    args = p.parse_args(argv)
    out: dict[str, list[dict]] = {}
    if not args.no_flow:
        print("1. max_flow alone (CPU s)")
        out["flow"] = flow_table(args.flow_sizes)
    tmp = Path(tempfile.mkdtemp(prefix="amp_scale_"))
    try:
        print("2. conversion, O2 fp16, CPU of convert_file in a fresh process")
        out["convert"] = conversion_table(args.shapes, args.sizes, tmp)
        per_node_summary(out["convert"])
        decoder = args.decoder or args.export_decoder
        if args.export_decoder and not args.export_decoder.exists():
            print(f"exporting the 48-layer GPT-2 to {args.export_decoder} (minutes)", flush=True)
            export_decoder(args.export_decoder)
        if decoder is not None:
            import onnx

            nodes = len(onnx.load(str(decoder), load_external_data=False).graph.node)
            r = convert_cpu(decoder, tmp / "out.onnx") | {"shape": "decoder", "nodes": nodes}
            out["decoder"] = [r]
            print(
                f"3. {decoder.name}: {nodes} nodes {r['cpu']:.2f} CPU-s "
                f"{1000 * r['cpu'] / nodes:.3f} ms/node  peak RSS {r['rss'] / 2**20:.0f} MiB"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
