#!/usr/bin/env bash
# The multi-GPU checks (issue 23 item 6) on a lent machine with 1 to 8 GPUs, after a build
# (tests/gpu/device-run.sh builds into /tmp/build-gpu and calls this when time is left):
#
#   bash tests/gpu/multi-gpu.sh [ONNXDP_BINARY]      # default /tmp/build-gpu/onnxdp
#
# Writes $OUT/multi-gpu.md (or bench/results/<date>-multi-gpu.md without $OUT) and prints the
# table last. Runs on one GPU too (a world of one: the equality checks compare it with itself).
# Without a GPU: DEVICES=cuda-emulated:2 ONE=cuda-emulated [LAUNCH=processes] bash tests/gpu/multi-gpu.sh build/onnxdp
cd "$(dirname "$0")/../.."
bin=${1:-/tmp/build-gpu/onnxdp}
md=${OUT:+$OUT/multi-gpu.md}
md=${md:-bench/results/$(date -u +%F)-multi-gpu.md}
exec python3 tests/gpu/multi_gpu.py "$bin" --devices "${DEVICES:-cuda}" --one "${ONE:-cuda:0}" \
  --launch "${LAUNCH:-auto}" --md "$md" --budget-s "${BUDGET_S:-400}" ${NO_SCALING:+--no-scaling}
