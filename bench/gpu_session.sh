#!/usr/bin/env bash
# One GPU call's measurements, in priority order (bench/README.md): run on a GPU machine from the
# repo root after onnxruntime-gpu's wheel was carried to /tmp/ortgpu in parts (ort-gpu.part-*, its
# file name in ort-gpu.name, its checksum in ort-gpu.sha256), for machines with no network; figures
# land in $OUT. Here first: python3 -m pip download --no-deps --only-binary=:all:
#   --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 -d .whl/deps
#   google-re2 onnxconverter-common (the GPU image lacks them); carry .whl/deps with the last part.
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1
( cd /tmp/ortgpu && cat ort-gpu.part-* > "$(cat ort-gpu.name)" && sha256sum -c ort-gpu.sha256 ) || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/ortgpu/"$(cat /tmp/ortgpu/ort-gpu.name)" .whl/deps/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
sp=$(python3 -c "import torch,os; print(os.path.dirname(os.path.dirname(torch.__file__)))")
LD_LIBRARY_PATH=$(ls -d "$sp"/nvidia/*/lib "$sp"/nvidia/cu13/lib 2>/dev/null | tr '\n' ':')${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH
python3 -c "import torch, onnxruntime as o; print(o.__version__, o.get_available_providers(), torch.cuda.get_device_name())"
echo "== 1. kernel accumulation"
timeout 90 python3 bench/kernel_accumulation.py --provider cuda --json "$out/accumulation.json" 2>&1 | tee "$out/accumulation.txt"
echo "== 2. gpu_bench"
timeout ${BENCH_S:-240} python3 bench/gpu_bench.py --keep /tmp/gm --runs 30 --warmup 5 --json "$out/gpu.json" --markdown "$out/gpu.md" 2>&1 | tee "$out/gpu.txt"
echo "== 3. validate cuda vs emulate (O2)"
printf "import sys\nfrom amp_convert.startup import main\nsys.argv[0] = \"amp-convert\"\nsys.exit(main())\n" > /tmp/amp.py
for o2 in /tmp/gm/*/*.O2.onnx; do
  src=${o2%.O2.onnx}.onnx; k=$(basename "$src" .onnx)
  for p in cuda emulate; do
    timeout 50 python3 /tmp/amp.py validate "$src" "$o2" --provider "$p" --runs 0 --report "$out/val_${k}_$p.json" 2>&1 | tail -4
  done
done 2>&1 | tee "$out/validate.txt"
echo "== 4. QDQ"
timeout 120 python3 bench/qdq_latency.py --batch 64 --runs 30 2>&1 | tail -6 | tee "$out/qdq.txt"
