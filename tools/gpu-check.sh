#!/usr/bin/env bash
# One run on a GPU host, for maintainers: describe the machine, run the GPU
# tests (pytest -m gpu) and the CUDA benchmark (godist against torch's nccl),
# and write what was seen into one folder (default gpu-results/; no more
# than eight files). Needs the built library (make lib, or a copy of
# python/godist/libgodist.so and python/godist/bin from a machine with Go)
# and a Python with torch and pytest-timeout.
#
#   tools/gpu-check.sh [OUT_DIR] [--full]
set -u
out=${1:-gpu-results}
full=${2:-}
mkdir -p "$out"
py=${PYTHON:-python3}
cd "$(dirname "$0")/.."
if [ ! -f python/godist/libgodist.so ]; then
	make lib || { echo "no python/godist/libgodist.so and no way to build it" | tee "$out/machine.txt"; exit 1; }
fi
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
{
	date -u
	nvidia-smi || true
	"$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
	"$py" -c 'import torch, godist._nccl as n; print("godist nccl path:", n.nccl_info())'
	"$py" -m godist info
} >"$out/machine.txt" 2>&1
python/godist/bin/godist-gpuinfo --pretty >"$out/gpuinfo.json" 2>&1
timeout "${GPU_TEST_TIMEOUT:-330}" "$py" -m pytest -m gpu -v -rs -p no:cacheprovider \
	python/tests/test_cuda_nccl.py python/tests/test_cuda_staged.py python/tests/test_bench_cuda.py \
	python/tests/test_gpuinfo.py >"$out/gpu-tests.txt" 2>&1
echo "pytest exit $?" >>"$out/gpu-tests.txt"
tail -5 "$out/gpu-tests.txt"
if [ "$full" = "--full" ]; then
	bench=(--ranks 1,2)
else
	bench=(--quick --ranks 1,2)
fi
timeout "${GPU_BENCH_TIMEOUT:-200}" "$py" -m godist.bench --device cuda "${bench[@]}" --out "$out/bench" >"$out/bench.txt" 2>&1
echo "bench exit $?" >>"$out/bench.txt"
tail -30 "$out/bench.txt"
