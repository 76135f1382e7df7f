#!/usr/bin/env bash
# The one script a GPU host runs: builds onnxdp with the CUDA backend, runs the GPU tests (CTest
# label gpu: the CUDA check macros and the CUDA kernels against the CPU kernels), records the
# result in bench/results/<date>-gpu-<gpu>.md and prints a short table last.
#
#   tests/gpu/run-all.sh                        # dependencies from the system (scripts/setup)
#   tests/gpu/run-all.sh --deps-prefix PREFIX   # from `scripts/offline-deps unpack DIR PREFIX`
#   tests/gpu/run-all.sh --debs DIR             # unpacks DIR (offline-deps download) first
#   tests/gpu/run-all.sh --all                  # also every other CTest test (CPU, MPI, ...)
#   tests/gpu/run-all.sh --no-bench             # without the benchmark against PyTorch on the GPU
#
# Build folder: build-gpu (override with BUILD_DIR=...). Exit status: 0 when a GPU ran every test
# and all passed; 1 on any failure; 2 when there was no GPU (the kernel tests were skipped, which
# is not a pass).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
build=${BUILD_DIR:-build-gpu}
prefix="" debs="" all=0 bench=1
while (($#)); do
  case "$1" in
    --deps-prefix) prefix=$(realpath "$2"); shift 2 ;;
    --debs) debs=$(realpath "$2"); shift 2 ;;
    --all) all=1; shift ;;
    --no-bench) bench=0; shift ;;
    *) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
jobs=$(nproc 2>/dev/null || echo 4)
log_dir=$(mktemp -d)
rows=()  # "step|result|detail"
row() { rows+=("$1|$2|$3"); }

if [ -n "$debs" ]; then
  prefix=${prefix:-$root/.offline-deps}
  scripts/offline-deps unpack "$debs" "$prefix" >"$log_dir/unpack.log" 2>&1 || { cat "$log_dir/unpack.log"; exit 1; }
fi
cmake_args=(-DCMAKE_BUILD_TYPE=Release -DONNXDP_CUDA=ON)
# CMakeLists.txt requires python3 for the ONNX Runtime / MPI checks (not label gpu); a bare host may
# have none: those tests then fail under --all, the GPU tests do not need it.
if ! command -v python3 >/dev/null 2>&1; then
  cmake_args+=(-DONNXDP_PYTHON=/bin/false)
  row python3 missing "the Python-driven tests (not label gpu) cannot run"
fi
if [ -n "$prefix" ]; then
  cmake_args+=(-DONNXDP_DEPS_PREFIX="$prefix")
  # shellcheck disable=SC1091
  . "$prefix/env.sh"
fi

# GPU and driver, as the driver sees them (nvidia-smi may be missing on a bare host).
gpu_name="none" driver="none"
if command -v nvidia-smi >/dev/null 2>&1 &&
   q=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1) && [ -n "$q" ]; then
  gpu_name=${q%%,*}
  driver=${q##*, }
fi

build_ok=1
if cmake -S . -B "$build" "${cmake_args[@]}" >"$log_dir/configure.log" 2>&1 &&
   cmake --build "$build" -j "$jobs" --target onnxdp onnxdp_tests >"$log_dir/build.log" 2>&1; then
  # What nvcc was asked for (compile_commands.json): "code=[sm_80]" ... "code=[compute_90]" (PTX).
  archs=$(grep -o 'code=\[[a-z_0-9]*\]' "$build/compile_commands.json" | sort -u | tr -d '[]' | sed 's/code=//' | paste -sd' ')
  row build ok "$build, nvcc code: ${archs:-none}"
else
  build_ok=0
  row build FAILED "see the log below"
  tail -40 "$log_dir/configure.log" "$log_dir/build.log" 2>/dev/null || true
fi

versions="" fail=0 skipped=0 ran_on_gpu=0
if ((build_ok)); then
  versions=$("$build/onnxdp" --version 2>&1 | tr '\n' ' ' | sed 's/  */ /g')
  # -V: the tests' own lines ("no GPU: ...", "cuda elementwise: ... cases match") reach the log.
  labels=(-L gpu)
  ((all)) && labels=()
  (cd "$build" && ctest "${labels[@]}" -V --timeout 1800) >"$log_dir/ctest.log" 2>&1 || fail=1
  # "12/34 Test #12: gpu.cuda_kernels ..........   Passed    3.21 sec" (or ***Skipped, ***Failed).
  while IFS='|' read -r name result secs; do
    detail="${secs}s"
    if [ "$name" = gpu.cuda_kernels ]; then
      # "cuda <kernels> on GPU: [what: ]N cases match ..." and "cuda model on GPU: <model>: N steps match".
      n=$({ grep -oE 'cuda [a-z ]+ on GPU: ([^:]*: )?[0-9]+ cases' "$log_dir/ctest.log" || true; } |
          awk '{s += $(NF-1)} END {print s + 0}')
      models=$({ grep -oE 'cuda model on GPU: [^:]*: [0-9]+ steps match' "$log_dir/ctest.log" || true; } | sort -u | wc -l)
      reason=$(grep -m1 -o 'no GPU: .* --' "$log_dir/ctest.log" | sed 's/ --$//' || true)
      if ((n > 0)); then detail="$n op/dtype/shape cases match the CPU kernels; $models model runs match the CPU losses; ${secs}s"
      else detail="${reason:-no case ran}"; fi
    fi
    case "$result" in
      Passed) ;;
      *Skipped*|*Not\ Run*) skipped=$((skipped + 1)) ;;
      *) fail=1 ;;
    esac
    if ((all)) && [[ "$name" != gpu.* ]] && [[ "$result" == Passed ]]; then continue; fi
    row "$name" "$result" "$detail"
  done < <(sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) \.*[ *]*([A-Za-z][A-Za-z ()]*[A-Za-z)]) +([0-9.]+) sec.*/\1|\2|\3/p' \
             "$log_dir/ctest.log")
  if ((all)); then
    summary=$(grep -m1 -E '^[0-9]+% tests passed' "$log_dir/ctest.log" || echo "no summary")
    row "all CTest tests" "$( ((fail)) && echo FAILED || echo ok)" "$summary"
  fi
  grep -q 'no GPU: ' "$log_dir/ctest.log" || ran_on_gpu=1
  [ "$gpu_name" = none ] && ran_on_gpu=0
fi

# The benchmark: bench/compare.py on the GPU (onnxdp --devices cuda:0 against PyTorch eager on
# cuda:0, same weights and data), when the tests ran on a GPU and python3 has a CUDA torch.
bench_md=""
if ((bench && build_ok && ran_on_gpu)); then
  if python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
    if timeout 600 python3 bench/compare.py --onnxdp "$build/onnxdp" --device cuda --repeats 1 \
         --models mlp tiny_lm cnn gpt_small >"$log_dir/bench.log" 2>&1; then
      geo=$(grep -o 'geometric mean of ratios.*' "$log_dir/bench.log" || echo "no summary")
      bench_md=$(grep -o 'wrote [^ ]*\.md' "$log_dir/bench.log" | sed 's/^wrote //' || true)
      row "bench vs PyTorch on the GPU" ok "$geo${bench_md:+ ($bench_md)}"
    else
      row "bench vs PyTorch on the GPU" FAILED "$(tail -3 "$log_dir/bench.log" | tr '\n' ' ')"
    fi
    # bfloat16 mixed precision on the transformers: onnxdp --mixed-precision bf16 vs torch.autocast.
    if timeout 300 python3 bench/compare.py --onnxdp "$build/onnxdp" --device cuda --repeats 1 \
         --mixed-precision bf16 --models tiny_lm gpt_small >"$log_dir/bench-bf16.log" 2>&1; then
      geo=$(grep -o 'geometric mean of ratios.*' "$log_dir/bench-bf16.log" || echo "no summary")
      md=$(grep -o 'wrote [^ ]*\.md' "$log_dir/bench-bf16.log" | sed 's/^wrote //' || true)
      row "bench bf16 vs PyTorch autocast" ok "$geo${md:+ ($md)}"
    else
      row "bench bf16 vs PyTorch autocast" FAILED "$(tail -3 "$log_dir/bench-bf16.log" | tr '\n' ' ')"
    fi
    # float16 with dynamic loss scaling on gpt_small: onnxdp --mixed-precision fp16 vs autocast + GradScaler.
    if timeout 150 python3 bench/compare.py --onnxdp "$build/onnxdp" --device cuda --repeats 1 \
         --mixed-precision fp16 --models gpt_small >"$log_dir/bench-fp16.log" 2>&1; then
      geo=$(grep -o 'geometric mean of ratios.*' "$log_dir/bench-fp16.log" || echo "no summary")
      md=$(grep -o 'wrote [^ ]*\.md' "$log_dir/bench-fp16.log" | sed 's/^wrote //' || true)
      row "bench fp16 vs PyTorch autocast+GradScaler" ok "$geo${md:+ ($md)}"
    else
      row "bench fp16 vs PyTorch autocast+GradScaler" FAILED "$(tail -3 "$log_dir/bench-fp16.log" | tr '\n' ' ')"
    fi
  else
    row "bench vs PyTorch on the GPU" "not run" "python3 has no CUDA-enabled torch"
  fi
fi

# The record.
date_utc=$(date -u +%Y-%m-%d)
slug=$(echo "$gpu_name" | tr 'A-Z' 'a-z' | sed -E 's/nvidia //; s/[^a-z0-9]+/-/g; s/^-|-$//g')
mkdir -p bench/results
record=bench/results/$date_utc-gpu-${slug:-none}.md
{
  echo "# GPU run $date_utc: $gpu_name"
  echo
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "- GPU: $gpu_name, driver $driver"
  echo "- onnxdp --version: ${versions:-not built}"
  echo "- dependencies: ${prefix:-system}"
  echo "- command: tests/gpu/run-all.sh${prefix:+ --deps-prefix $prefix}$( ((all)) && echo ' --all')"
  echo
  echo "| step | result | detail |"
  echo "|---|---|---|"
  for r in "${rows[@]}"; do echo "| ${r//|/ | } |"; done
  echo
  echo '```'
  # The tests' own lines, without CTest's "N: /path/file.cpp:line: MESSAGE: " prefix.
  { grep -E 'MESSAGE: |ERROR: |FAILED|\*\*\*Failed' "$log_dir/ctest.log" 2>/dev/null || true; } |
    sed -E 's/^[0-9]+: //; s/^[^ ]*:[0-9]+: MESSAGE: //' | sort -u | head -60
  echo '```'
} >"$record"

echo "log: $log_dir (ctest.log, build.log); record: $record"
echo
printf '%-34s %-10s %s\n' step result detail
for r in "${rows[@]}"; do
  IFS='|' read -r a b c <<<"$r"
  printf '%-34s %-10s %s\n' "$a" "$b" "$c"
done
if ((fail || !build_ok)); then exit 1; fi
if ((!ran_on_gpu)); then
  echo "no GPU ran these tests (GPU: $gpu_name): nothing here is verified on a GPU"
  exit 2
fi
