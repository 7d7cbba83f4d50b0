#!/usr/bin/env bash
# Makes the default model on a GPU machine, from the repository root:
#
#   OUT=/path/to/out tools/train/device_run.sh [MINUTES]        (default 6)
#
# Needs .train/ from tools/train/prepare_corpus.sh (train.bin, heldout.bin, prompts.json, vocab.gguf), the CLI at
# $DF (default .dev/bin/diskformer) and PyTorch with CUDA. Trains for MINUTES, exports the best weights, converts
# them with diskformer's own writer, computes the PyTorch reference on the GGUF's dequantized weights, and writes
# into $OUT: kjv-moe.gguf, kjv-moe.reference.json, train.log, manifest.json.
#
# Environment: DF, PYTHON (python3), DATA (.train), TYPE (q4_0), DEVICE (cuda; cpu only for a dry run),
# TRAIN_ARGS (extra train.py options, e.g. a tiny shape for a dry run).
set -euo pipefail

MINUTES=${1:-6}
OUT=${OUT:?set OUT to the folder that receives the results}
DF=${DF:-.dev/bin/diskformer}
PYTHON=${PYTHON:-python3}
DATA=${DATA:-.train}
TYPE=${TYPE:-q4_0}
DEVICE=${DEVICE:-cuda}
NAME=kjv-moe
MAX_BYTES=$((15 * 1024 * 1024))
HERE=$(cd "$(dirname "$0")" && pwd)
T0=$(date +%s)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kjv-moe.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

die() { echo "device_run: $*" >&2; exit 1; }
elapsed() { echo $(( $(date +%s) - T0 )); }

mkdir -p "$OUT" || die "cannot create $OUT"
LOG="$OUT/train.log"
: > "$LOG"
say() { echo "device_run [$(elapsed)s]: $*" | tee -a "$LOG" >&2; }

# Fail fast, before any training time is spent.
for f in train.bin heldout.bin prompts.json vocab.gguf; do
  [ -s "$DATA/$f" ] || die "$DATA/$f is missing (run tools/train/prepare_corpus.sh and carry $DATA)"
done
[ -x "$DF" ] || die "$DF is not executable"
"$DF" convert --help > /dev/null 2>&1 || die "$DF does not run (LD_LIBRARY_PATH=.deps/lib?): $("$DF" --help 2>&1 | head -1)"
awk -v m="$MINUTES" 'BEGIN { exit !(m > 0 && m <= 7.5) }' || die "MINUTES must be in (0, 7.5] to end within 9 minutes"
"$PYTHON" - "$DEVICE" <<'PY' 2>&1 | tee -a "$LOG" >&2 || die "PyTorch check failed"
import sys, torch
dev = sys.argv[1]
if dev == "cuda" and not torch.cuda.is_available():
    sys.exit("device_run: CUDA is not available to PyTorch")
name = torch.cuda.get_device_name(0) if dev == "cuda" else "cpu"
print(f"torch {torch.__version__} on {name}")
PY

say "training for $MINUTES minutes"
TRAIN_LIMIT=$(awk -v m="$MINUTES" 'BEGIN { printf "%d", m * 60 * 1.15 + 90 }')
# shellcheck disable=SC2086
if ! timeout "$TRAIN_LIMIT" "$PYTHON" -u "$HERE/train.py" --data "$DATA" --out "$WORK/raw" --minutes "$MINUTES" \
    --device "$DEVICE" ${TRAIN_ARGS:-} 2>&1 | tee -a "$LOG" >&2; then
  die "training failed or ran past ${TRAIN_LIMIT}s (see $LOG)"
fi
cp "$WORK/raw/manifest.json" "$OUT/manifest.json"

say "converting to $TYPE"
if ! "$DF" convert --raw "$WORK/raw" --tokenizer-from "$DATA/vocab.gguf" --type "$TYPE" -o "$OUT/$NAME.gguf" \
    2>&1 | tee -a "$LOG" >&2; then
  die "conversion failed"
fi
SIZE=$(stat -c %s "$OUT/$NAME.gguf")
say "$NAME.gguf: $SIZE bytes"
[ "$SIZE" -le "$MAX_BYTES" ] || die "$NAME.gguf is $SIZE bytes, over the limit of $MAX_BYTES"

say "reference outputs"
if ! timeout 120 "$PYTHON" -u "$HERE/reference.py" --gguf "$OUT/$NAME.gguf" --data "$DATA" \
    -o "$OUT/$NAME.reference.json" --device "$DEVICE" 2>&1 | tee -a "$LOG" >&2; then
  die "reference failed or ran past 120s"
fi

say "the engine on the new model"
timeout 30 "$DF" run -m "$OUT/$NAME.gguf" -p "In the beginning" -n 48 --temp 0 -t 4 2>&1 | tee -a "$LOG" >&2 || true
echo >> "$LOG"
say "done; $OUT holds: $(cd "$OUT" && ls | tr '\n' ' ')"
