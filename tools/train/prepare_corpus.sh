#!/usr/bin/env bash
# Builds the training corpus of the default model: the King James Bible (Debian's bible-kjv-text, read through the
# bible program of bible-kjv), one document per chapter (verses one per line, without verse numbers), tokenized
# with diskformer's own tokenizer and the llama SentencePiece vocabulary into uint16 ids. Every 20th chapter is
# held out.
#
#   tools/train/prepare_corpus.sh [DISKFORMER [VOCAB [OUTDIR]]]
#
# Writes OUTDIR (default .train/): train.txt, heldout.txt, train.bin, heldout.bin, prompts.json, and vocab.gguf
# (a copy of VOCAB, so that the folder alone carries everything tools/train/device_run.sh needs).
# Needs: apt-get install bible-kjv bible-kjv-text
set -euo pipefail

DF=${1:-build/diskformer}
VOCAB=${2:-../shared/vocab/ggml-vocab-llama-spm.gguf}
OUT=${3:-.train}
HOLDOUT_EVERY=20

die() { echo "prepare_corpus: $*" >&2; exit 1; }
command -v bible >/dev/null || die "the bible program is missing (apt-get install bible-kjv bible-kjv-text)"
[ -x "$DF" ] || die "$DF is not an executable diskformer"
[ -f "$VOCAB" ] || die "vocabulary $VOCAB not found"
mkdir -p "$OUT"

# bible prints "Book N" headers, blank lines and "  V text" verses (-l: one verse a line, however long).
bible -l100000 "Gen1:1-Rev22:21" 2>/dev/null | awk -v every="$HOLDOUT_EVERY" \
  -v train="$OUT/train.txt" -v held="$OUT/heldout.txt" '
  function flush() { if (doc != "") { print doc "\n" > ((n % every == every - 1) ? held : train); n++ } doc = "" }
  /^[^ ].* [0-9]+$/ { flush(); next }          # chapter header
  /^ +[0-9]+ / { sub(/^ +[0-9]+ /, ""); sub(/ +$/, ""); doc = doc == "" ? $0 : doc "\n" $0; next }
  END { flush(); print n " chapters" > "/dev/stderr" }'
[ -s "$OUT/train.txt" ] && [ -s "$OUT/heldout.txt" ] || die "no text came out of bible"

"$DF" convert --corpus "$OUT/train.txt" --tokenizer-from "$VOCAB" -o "$OUT/train.bin"
"$DF" convert --corpus "$OUT/heldout.txt" --tokenizer-from "$VOCAB" -o "$OUT/heldout.bin"

# Prompts for the reference check: the first six words of the first 10 held-out chapters, with their ids.
{
  echo "["
  awk 'BEGIN { RS = ""; FS = "\n" } NR <= 10 { split($1, w, " "); s = w[1]; for (i = 2; i <= 6; i++) s = s " " w[i]; print s }' \
    "$OUT/heldout.txt" | while IFS= read -r p; do
      ids=$("$DF" tokenize -m "$VOCAB" -p "$p")
      printf '%s{"prompt": "%s", "prompt_ids": %s}\n' "${sep:-}" "$p" "$ids"
      sep=", "
    done
  echo "]"
} > "$OUT/prompts.json"
install -m 644 "$VOCAB" "$OUT/vocab.gguf"
ls -l "$OUT" >&2
