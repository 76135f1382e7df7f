#!/usr/bin/env bash
# The one call this project's sessions run on a lent GPU machine (this workplace's H200 host:
# Ubuntu 24.04, nvcc 13, g++ 13, PyTorch in python3, no network, no Debian -dev packages), as it
# ran on 2026-12-04 (bench/results/2026-12-04-gpu-h200.md):
#
#   here:   scripts/offline-deps download .deps/debs      (.deps is git-ignored; ~54 MB)
#   device: bash tests/gpu/device-run.sh                  (carrying .deps; NO_BENCH=1 to skip the bench)
#
# Since 2026-12-04 (second GPU session) it also trains the model zoo on cuda:0 against the
# frameworks' losses (tests/gpu/zoo_on_gpu.py, $OUT/zoo-gpu.md), and since 2026-12-05 runs the
# multi-GPU checks (tests/gpu/multi-gpu.sh, $OUT/multi-gpu.md; a world of one on one GPU).
#
# It finds cuDNN and NCCL where that host has them (PyTorch's nvidia-* wheels, not the CUDA
# folder), unpacks the Debian packages into /tmp/prefix, configures with their paths, runs
# tests/gpu/run-all.sh (build, CTest label gpu), then a short bench against PyTorch on the GPU,
# copies the records and logs to $OUT and prints the table last.
cd "$(dirname "$0")/../.."
root=$PWD
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 ))s; }
mkdir -p "$OUT"
exec > >(tee "$OUT/device.log") 2>&1
echo "== env $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
head -2 /etc/os-release; g++ --version | head -1; nvcc --version | tail -2; cmake --version | head -1; nproc
python3 -c "import torch, onnx, numpy; print('torch', torch.__version__, torch.cuda.is_available(), 'onnx', onnx.__version__)"
NV=$(python3 -c "import nvidia, os; print(list(nvidia.__path__)[0])" 2>/dev/null)
echo "nvidia wheels: $NV"
find_one() { find /usr/local/cuda/ /usr/include /usr/lib/x86_64-linux-gnu ${NV:+$NV} -name "$1" 2>/dev/null | sort | head -1; }
CUDNN_H=$(find_one cudnn.h); NCCL_H=$(find_one nccl.h)
CUDNN_SO=$(find_one 'libcudnn.so*'); NCCL_SO=$(find_one 'libnccl.so*'); CUBLAS_SO=$(find_one 'libcublas.so*')
echo "cudnn.h=$CUDNN_H nccl.h=$NCCL_H libcudnn=$CUDNN_SO libnccl=$NCCL_SO libcublas=$CUBLAS_SO"
for so in "$CUDNN_SO" "$NCCL_SO"; do [ -n "$so" ] && export LD_LIBRARY_PATH="$(dirname "$so")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; done
inc="-I$(dirname "${CUDNN_H:-/x/x}") -I$(dirname "${NCCL_H:-/x/x}")"

echo "== unpack $(el)"
scripts/offline-deps unpack .deps/debs /tmp/prefix > /tmp/unpack.log 2>&1 || tail -20 /tmp/unpack.log
. /tmp/prefix/env.sh
echo "== configure $(el)"
B=/tmp/build-gpu
CXXFLAGS="$inc" CUDAFLAGS="$inc" cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DONNXDP_CUDA=ON \
  -DONNXDP_DEPS_PREFIX=/tmp/prefix -DCUDNN_LIB="$CUDNN_SO" -DNCCL_LIB="$NCCL_SO" > "$OUT/configure.log" 2>&1 ||
  tail -30 "$OUT/configure.log"
echo "== run-all (build + label gpu) $(el)"
BUILD_DIR=$B timeout 420 tests/gpu/run-all.sh --deps-prefix /tmp/prefix --no-bench > "$OUT/run-all.log" 2>&1
echo "run-all rc=$? $(el)"
tail -25 "$OUT/run-all.log"
ld=$(grep -o 'log: [^ ]*' "$OUT/run-all.log" | head -1 | cut -d' ' -f2)
[ -n "$ld" ] && tail -400 "$ld/ctest.log" > "$OUT/ctest-tail.log" 2>/dev/null
[ -n "$ld" ] && grep -E "error|Error" "$ld/build.log" | head -10
rec=$(ls -t bench/results/*-gpu-*.md 2>/dev/null | head -1); [ -n "$rec" ] && cp "$rec" "$OUT/"
echo "== zoo on cuda:0 $(el)"
if [ -x $B/onnxdp ]; then
  timeout 240 python3 tests/gpu/zoo_on_gpu.py --onnxdp $B/onnxdp --devices cuda:0 --md "$OUT/zoo-gpu.md" > "$OUT/zoo-gpu.log" 2>&1
  echo "zoo rc=$? $(el)"; tail -3 "$OUT/zoo-gpu.log"
fi
echo "== multi-GPU checks $(el)"
left=$(( 540 - $(date +%s) + T0 ))
if [ -x $B/onnxdp ] && [ $left -gt 120 ]; then
  budget=$(( left > 260 ? 200 : left - 60 ))
  BUDGET_S=$budget ${NO_SCALING:+NO_SCALING=1} timeout $(( budget + 60 )) bash tests/gpu/multi-gpu.sh $B/onnxdp \
    > "$OUT/multi-gpu.log" 2>&1
  echo "multi-gpu rc=$? $(el)"; tail -4 "$OUT/multi-gpu.log"
fi
echo "== bench $(el)"
left=$(( 540 - $(date +%s) + T0 ))
if [ -z "${NO_BENCH:-}" ] && [ -x $B/onnxdp ] && [ $left -gt 60 ]; then
  timeout $(( left - 15 )) python3 bench/compare.py --onnxdp $B/onnxdp --device cuda --repeats 1 \
    --models mlp tiny_lm gpt_small --out-dir "$OUT" > "$OUT/bench.log" 2>&1
  echo "bench rc=$? $(el)"; tail -12 "$OUT/bench.log"
fi
echo "== table $(el)"
sed -n '/^step  /,$p' "$OUT/run-all.log"
[ -f "$OUT/multi-gpu.md" ] && grep -c '| PASS |' "$OUT/multi-gpu.md" | sed 's/^/multi-gpu checks passed: /' &&
  grep -E '\| (FAIL|SKIP) \|' "$OUT/multi-gpu.md"
