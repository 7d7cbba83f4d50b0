#!/usr/bin/env bash
# Fuzzes the GGUF header parser with libFuzzer (clang, ASan + UBSan).
# Usage: scripts/fuzz.sh [SECONDS]   (default 600). New crashes land in fuzz/work/; commit each one to fuzz/crashes/
# after fixing it, so that the replay test (test_gguf, FuzzCorpus.*) keeps it fixed.
#        FUZZ_RUNS=N scripts/fuzz.sh  replays every seed and earlier crash under the sanitizers, then runs N inputs
#                                     from a fixed seed and stops (CI: the same work on any machine).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DDISKFORMER_FUZZ=ON -DDISKFORMER_TESTS=OFF -DDISKFORMER_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz --target gguf_fuzz
mkdir -p fuzz/work/corpus fuzz/work/artifacts
# Seeds: the committed corpus, earlier crashes, and the shared models and vocabularies (their headers; max_len cuts
# the tensor data, and each cut is itself a useful truncated input).
seeds=(fuzz/corpus fuzz/crashes)
for d in ../shared/models ../shared/vocab; do [ -d "$d" ] && seeds+=("$d"); done
if [ -n "${FUZZ_RUNS:-}" ]; then
  limit=(-runs="$FUZZ_RUNS" -seed=1)
else
  limit=(-max_total_time="$seconds")
fi
exec build-fuzz/fuzz/gguf_fuzz fuzz/work/corpus "${seeds[@]}" "${limit[@]}" -max_len="${FUZZ_MAX_LEN:-65536}" \
  -rss_limit_mb=4096 -timeout=10 -artifact_prefix=fuzz/work/artifacts/ -print_final_stats=1
