#!/usr/bin/env bash
# On a lent GPU host (see tests/gpu/device-run.sh for the host): runs the binaries
# tests/gpu/prebuilt-pack.sh packed, without building: the GPU test suites (doctest suites gpu:
# every op case of the backend harness on cuda:0 and the model checks; cuda: the same on the
# emulated device) and the model zoo on cuda:0 against the frameworks' losses. Logs to $OUT, a
# short table last. The tests find the sources and the binary where they were built
# (/work/main/build), so the checkout is linked there.
cd "$(dirname "$0")/../.."
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 ))s; }
mkdir -p "$OUT"
exec > >(tee "$OUT/prebuilt.log") 2>&1
echo "== env $(date -u +%FT%TZ), packed from $(cat .gpu-carry/commit 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
mkdir -p build /work
[ -e /work/main ] && [ ! -L /work/main ] || ln -sfn "$PWD" /work/main
tar -C build -xJf .gpu-carry/onnxdp-gpu.tar.xz
NV=$(python3 -c "import nvidia, os; print(list(nvidia.__path__)[0])" 2>/dev/null)
libdirs=$(find ${NV:+$NV} /usr/local/cuda/lib64 -name 'lib*.so*' \( -name 'libcudnn.so*' -o -name 'libnccl.so*' -o -name 'libcublas*.so*' -o -name 'libcudart.so*' \) -printf '%h\n' 2>/dev/null | sort -u | paste -sd:)
export LD_LIBRARY_PATH="$PWD/build/lib:$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
build/onnxdp --version || { ldd build/onnxdp | grep 'not found'; exit 1; }
rows=()
echo "== suite gpu $(el)"
timeout 300 build/onnxdp_tests --test-suite=gpu --no-intro=true > "$OUT/suite-gpu.log" 2>&1
rc=$?
n=$(grep -oE 'cuda [a-z ]+ on GPU: ([^:]*: )?[0-9]+ cases' "$OUT/suite-gpu.log" | awk '{s += $(NF-1)} END {print s + 0}')
models=$(grep -oE 'cuda model on GPU: [^:]*: [0-9]+ steps match' "$OUT/suite-gpu.log" | sort -u | wc -l)
rows+=("suite gpu (cuda:0)|rc $rc|$n op/dtype/shape cases on the GPU match the CPU; $models model runs; $(grep -m1 -E '^\[doctest\] test cases' "$OUT/suite-gpu.log")")
grep -E "ERROR|FAILED|SKIPPED" "$OUT/suite-gpu.log" | head -20
echo "== suite cuda (emulated) $(el)"
timeout 200 build/onnxdp_tests --test-suite=cuda --no-intro=true > "$OUT/suite-cuda.log" 2>&1
rows+=("suite cuda (emulated)|rc $?|$(grep -m1 -E '^\[doctest\] test cases' "$OUT/suite-cuda.log")")
echo "== zoo $(el)"
timeout 200 python3 tests/gpu/zoo_on_gpu.py --onnxdp build/onnxdp --devices cuda:0 --md "$OUT/zoo-gpu.md" > "$OUT/zoo-gpu.log" 2>&1
rows+=("zoo on cuda:0|rc $?|$(tail -1 "$OUT/zoo-gpu.log")")
echo "== multi-GPU checks $(el)"
BUDGET_S=150 NO_SCALING=1 timeout 220 bash tests/gpu/multi-gpu.sh build/onnxdp > "$OUT/multi-gpu.log" 2>&1
rows+=("multi-gpu checks|rc $?|$(grep -c '| PASS |' "$OUT/multi-gpu.md" 2>/dev/null) passed, $(grep -c '| FAIL |' "$OUT/multi-gpu.md" 2>/dev/null) failed")
echo "== table $(el)"
for r in "${rows[@]}"; do IFS='|' read -r a b c <<<"$r"; printf '%-24s %-8s %s\n' "$a" "$b" "$c"; done
