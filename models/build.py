"""Write the test models to a folder: ``python -m models.build OUTDIR [--only NAME ...] [--big]``.

Without ``--only`` every block, focused, CNN, decoder, fused-transformer and vision builder is
written as ``OUTDIR/NAME.onnx``. The tiny committed samples (``sample_bert``,
``sample_resnet``) are written with ``--samples`` or by naming them, e.g.
``python -m models.build models --only sample_bert sample_resnet``. ``--big`` (or ``--only big``)
also writes ``OUTDIR/big.onnx`` + ``big.onnx.data`` (> 2 GB by default).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import onnx

from models.big import write_big_model
from models.blocks import ALL_BLOCKS, bert_encoder, resnet_cnn
from models.cnn import ALL_CNN
from models.decoders import ALL_DECODERS
from models.exporters import ALL_EXPORTERS
from models.focused import ALL_FOCUSED
from models.fused import ALL_FUSED
from models.qdq import ALL_QDQ
from models.vision import ALL_VISION

#: Small variants committed to the repository for README's first-use line (< 300 KB each).
SAMPLES: dict[str, Callable[[], onnx.ModelProto]] = {
    "sample_bert": functools.partial(
        bert_encoder, layers=2, hidden=32, heads=4, vocab=100, max_positions=64
    ),
    "sample_resnet": functools.partial(resnet_cnn, blocks=2, channels=16, image=32, classes=10),
}

#: Every builder that ``--only`` accepts (plus ``big``).
BUILDERS: dict[str, Callable[[], onnx.ModelProto]] = {
    **ALL_BLOCKS,
    **ALL_FOCUSED,
    **ALL_CNN,
    **ALL_DECODERS,
    **ALL_FUSED,
    **ALL_VISION,
    **ALL_EXPORTERS,
    **ALL_QDQ,
    **SAMPLES,
}


def write_model(model: onnx.ModelProto, path: Path) -> int:
    """Save ``model`` to ``path`` atomically (temp file + rename); return its size in bytes."""
    data = model.SerializeToString()
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return len(data)


def build(
    outdir: str | os.PathLike[str],
    only: Sequence[str] | None = None,
    *,
    samples: bool = False,
    big: bool = False,
    big_bytes: int = 2_200_000_000,
) -> list[Path]:
    """Write the selected models into ``outdir``; return the written ``.onnx`` paths."""
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    if only:
        names = [n for n in only if n != "big"]
        big = big or "big" in only
        unknown = sorted(set(names) - set(BUILDERS))
        if unknown:
            raise ValueError(f"unknown model(s): {', '.join(unknown)}")
    else:
        names = [
            *ALL_BLOCKS,
            *ALL_FOCUSED,
            *ALL_CNN,
            *ALL_DECODERS,
            *ALL_FUSED,
            *ALL_VISION,
            *(SAMPLES if samples else ()),
        ]
    written = []
    for name in names:
        path = out / f"{name}.onnx"
        size = write_model(BUILDERS[name](), path)
        print(f"{path}  {size / 1024:.1f} KiB")
        written.append(path)
    if big:
        info = write_big_model(out / "big.onnx", big_bytes, verbose=True)
        written.append(info.path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m models.build", description="Write the FP32 test models."
    )
    parser.add_argument("outdir", help="folder to write NAME.onnx files into")
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", help=f"only these: {', '.join([*BUILDERS, 'big'])}"
    )
    parser.add_argument("--samples", action="store_true", help="also write the sample_* models")
    parser.add_argument("--big", action="store_true", help="also write big.onnx (external data)")
    parser.add_argument(
        "--big-bytes", type=int, default=2_200_000_000, help="weight bytes of big.onnx"
    )
    args = parser.parse_args(argv)
    try:
        build(args.outdir, args.only, samples=args.samples, big=args.big, big_bytes=args.big_bytes)
    except ValueError as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
