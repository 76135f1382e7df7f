#!/usr/bin/env bash
# The GPU benchmark of issue 25 item 4, for one call on a lent GPU machine (about 10 minutes):
# the GPT-2-small-shaped model of bench/bench_models.py (124 M parameters, context 1024) trained
# in bf16 on one GPU by onnxdp (--mixed-precision bf16) and by PyTorch eager under autocast and
# torch.compile on the same GPU, same data, batch and AdamW, losses compared; then tokens/s and
# MFU per side (bench/mfu.py). PyTorch comes from the machine's python3 (the lent H200 host has it).
#
#   bash bench/gpu.sh [ONNXDP_BINARY]     # default /tmp/build-gpu/onnxdp (tests/gpu/device-run.sh builds it)
#
# Environment: BATCH (sequences per step, default 8), STEPS (N of bench/compare.py's steady step,
# default 4), BUDGET_S (default 540), OUT (records go there, else bench/results/), PYTHON (default
# python3, with torch), DEVICE (default cuda; cpu with MODEL=gpt_small checks the script here).
cd "$(dirname "$0")/.."
bin=${1:-/tmp/build-gpu/onnxdp}
out=${OUT:-bench/results}
work=$(mktemp -d)
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
timeout "${BUDGET_S:-540}" "${PYTHON:-python3}" bench/compare.py --onnxdp "$bin" --device "${DEVICE:-cuda}" --mixed-precision bf16 \
  --models "${MODEL:-gpt2_small}" --peers eager compile --batch "${BATCH:-8}" --steps "${STEPS:-4}" --repeats 2 \
  --out-dir "$work"
rc=$?
json=$(ls "$work"/*.json 2>/dev/null | head -1)
if [ -n "$json" ]; then
  md=${json%.json}.md
  "${PYTHON:-python3}" bench/mfu.py "$json" --md "$md"
  cp "$json" "$md" "$out"/
  echo "records: $out/$(basename "$md") $out/$(basename "$json")"
else
  echo "bench/gpu.sh: bench/compare.py wrote no record (exit $rc)"
fi
rm -rf "$work"
exit $rc
