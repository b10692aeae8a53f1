#!/bin/bash
# Trains a fixed set of configurations (every family, positional scheme, Canon placement and MLP kind) with one
# canonlab binary and prints, per run, the data checksums of its final model and optimizer files (xxh64 of every
# tensor byte, stored by the writer as canonlab.data_checksum). Two binaries that print the same lines trained
# bit-identical weights and AdamW moments. Used to show that a refactor changes no bit (BENCHMARKS.md, "Backend
# seam"), and to record the values tests/unit/test_bit_identity.cpp holds the engine to.
#
#   scripts/bit-identity.sh BINARY OUT_DIR [STEPS=8] [CASE...]     (run from the checkout whose configs/ to use)
#
# Every run uses train.threads=2 (results are bit-identical for a fixed thread count) and oneDNN's AVX2 kernels
# (ONEDNN_MAX_CPU_ISA, below), and writes only the final checkpoint. Output lines: NAME MODEL_CHECKSUM STATE_CHECKSUM SECONDS.
set -euo pipefail
# oneDNN's GEMM kernels differ by CPU (AVX2, AVX-512, ...) and so do the bits; the recorded values are AVX2's.
export ONEDNN_MAX_CPU_ISA=${ONEDNN_MAX_CPU_ISA:-AVX2}
BIN=$1; OUT=$2; STEPS=${3:-8}; shift $(( $# < 3 ? $# : 3 ))
# name | config | --set overrides (space-separated); keep in step with tests/unit/test_bit_identity.cpp
CASES=(
"e1-bk0|configs/E1-Bk0.yaml|"
"mamba2-mlp-AbCD|configs/linear/mamba2-mlp-4L128-canon-AbCD.yaml|"
"mamba2-noconv|configs/linear/mamba2-4L128.yaml|model.canon.set= model.mamba2.init=mimetic"
"gla-AbCD|configs/linear/gla-4L128-canon-AbCD.yaml|"
"gla-featmap-clamp|configs/linear/gla-4L128.yaml|model.gla.feature_map=elu_plus_one model.gla.clamp_min=-0.1 model.canon.set=bB"
"gdn-AbCD|configs/linear/gdn-4L128-canon-AbCD.yaml|"
"deltanet-AbCD|configs/linear/deltanet-4L128-canon-AbCD.yaml|"
"hybrid-MMMA-AbCD|configs/linear/hybrid-MMMA-4L128-canon-AbCD.yaml|"
"hybrid-DDDS|configs/linear/hybrid-DDDS-4L128.yaml|"
"nope-canon-ABCD-depo|configs/small/depo.yaml|"
"rope-induction|configs/demo-induction.yaml|"
"learned-layernorm-relu2|configs/E1-Bk0.yaml|model.attention.position=learned model.attention.scoring=softmax model.norm=layernorm model.mlp.kind=relu2 model.mlp.bias=true model.attention.qkv_bias=true model.canon.set=ABCD model.canon.activation=silu model.canon.norm=rmsnorm model.attention.key_shift.layers=[1] model.attention.ste_grad=clipped"
"partial-rope-swiglu-tied|configs/E1-Bk0.yaml|model.attention.position=rope model.attention.rope_dim=16 model.mlp.kind=swiglu model.mlp.bias=true model.tie_embeddings=true model.vocab_size=65 model.canon.set=AC model.canon.activation=elu model.canon.norm=layernorm model.canon.residual=false"
)
checksum() {  # the canonlab.data_checksum of a safetensors file
  python3 -c 'import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]
print(json.loads(f.read(n))["__metadata__"]["canonlab.data_checksum"])' "$1"
}
mkdir -p "$OUT"
for c in "${CASES[@]}"; do
  IFS='|' read -r name cfg sets <<< "$c"
  if [ $# -gt 0 ] && [[ " $* " != *" $name "* ]]; then continue; fi
  args=()
  for s in $sets; do args+=(--set "$s"); done
  rm -rf "${OUT:?}/$name"
  start=$(date +%s)
  if ! OMP_WAIT_POLICY=passive "$BIN" train "$cfg" --set train.steps="$STEPS" --set train.threads=2 \
       --set train.checkpoint_every=0 "${args[@]}" --quiet --out "$OUT/$name" > "$OUT/$name.log" 2>&1; then
    echo "$name FAILED (see $OUT/$name.log)"; continue
  fi
  stem=$(printf "%s/%s/checkpoints/step_%08d" "$OUT" "$name" "$STEPS")
  echo "$name $(checksum "$stem.model.safetensors") $(checksum "$stem.state.safetensors") $(( $(date +%s) - start ))"
done
