#!/usr/bin/env bash
# Makes the relocatable bundle that scripts/device-check.sh runs on a GPU machine that has the
# NVIDIA driver and CUDA but none of our Debian packages and no network:
#   dist/xtrain-bundle.tar.xz  ->  xtrain-bundle/bin/  xlaunch xtrain-worker xtrain-bench-gpu test_cuda,
#                                                      test_launcher_integration and its xtrain-test-worker
#                                                      (the [gpu] tests, all of them), xtrain-data and
#                                                      xtrain-check-logits (the tokenizer's and the
#                                                      export's comparisons)
#                                  xtrain-bundle/lib/  libxtrain-cuda.so, the CUDA plugin (the worker
#                                                      loads it from ../lib beside its bin/), and every
#                                                      shared library they need that is not glibc, the
#                                                      GCC runtime, or CUDA/NCCL/driver (gloo,
#                                                      openblas, gfortran, spdlog, fmt, ...)
#                                  xtrain-bundle/gpt2/ GPT-2's vocabulary, OpenAI's encoder.json +
#                                                      vocab.bpe (tiktoken's gpt2 files; that machine
#                                                      cannot download them), from XTRAIN_GPT2_VOCAB or
#                                                      scripts/fetch-gpt2-reference.sh's cache; without
#                                                      one the tokenizer check says it did not run
#                                  xtrain-bundle/BUNDLE.json  what was built, from which sources
# CUDA's own libraries (cudart, cublasLt, NCCL) are NOT bundled (over 700 MiB): device-check.sh
# finds the GPU machine's (its CUDA toolkit, or PyTorch's nvidia-* wheels) and puts them with
# bin/../lib on LD_LIBRARY_PATH for our programs only.
#
# Usage: scripts/make-bundle.sh [BUILD_DIR]     (default build-cuda; configured and built here)
#        scripts/make-bundle.sh --digest        prints the digest of the sources a bundle is made from
# Then run the check on the GPU machine with the device tool, carrying dist/ (see docs/PERF.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# Everything that goes into the programs; device-check.sh compares it with the bundle's.
# (tests/worker's headers: the CUDA tests include some of them; scripts/bench's: the GPU bench's.)
source_digest() {
  { find CMakeLists.txt common cuda launcher worker tests/CMakeLists.txt tests/catch_main.cpp tests/cuda \
      tests/launcher scripts/bench/gpu_bench.cpp scripts/check/logits.cpp -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' \
      -o -name '*.cuh' -o -name 'CMakeLists.txt' -o -name '*.cmake' \) -print0
    find tests/worker scripts/bench -name '*.hpp' -print0
  } | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
}
if [[ "${1:-}" == "--digest" ]]; then
  source_digest
  exit 0
fi

build=${1:-$root/build-cuda}
programs=(xlaunch xtrain-worker xtrain-bench-gpu test_cuda test_launcher_integration xtrain-test-worker xtrain-data
          xtrain-check-logits)
if [[ ! -f "$build/build.ninja" ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
grep -q '^XTRAIN_HAVE_CUDA\|CMAKE_CUDA_COMPILER:' "$build/CMakeCache.txt" ||
  { echo "make-bundle: $build has no CUDA compiler configured" >&2; exit 1; }
targets=(--target xtrain-cuda)
for p in "${programs[@]}"; do targets+=(--target "$p"); done
cmake --build "$build" -j "${XTRAIN_JOBS:-$(nproc)}" "${targets[@]}"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
b="$stage/xtrain-bundle"
mkdir -p "$b/bin" "$b/lib"
for p in "${programs[@]}"; do
  cp "$build/bin/$p" "$b/bin/"
  strip --strip-unneeded "$b/bin/$p"
done
cp "$build/lib/libxtrain-cuda.so" "$b/lib/"
strip --strip-unneeded "$b/lib/libxtrain-cuda.so"
ours=("$b"/bin/* "$b/lib/libxtrain-cuda.so")

# Libraries the GPU machine has anyway, or must provide itself: the C library and loader, the
# GCC runtime (the GPU machine's is as new or newer), and the driver, CUDA and NCCL.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libresolv\.|libstdc\+\+|libgcc_s|libcuda\.|libcudart|libcublas|libnccl|libnvidia)'
ldd "${ours[@]}" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u | while read -r name path; do
  [[ "$name" =~ $skip ]] && continue
  cp -L "$path" "$b/lib/$name"
done
missing=$(ldd "${ours[@]}" | grep 'not found' || true)
[[ -z "$missing" ]] || { echo "make-bundle: unresolved libraries here:"$'\n'"$missing" >&2; exit 1; }

# GPT-2's vocabulary, if this machine has it: checked against the digests tiktoken expects.
vocab=${XTRAIN_GPT2_VOCAB:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/xtrain/gpt2-reference/gpt2}
vocab_note="none (no $vocab/encoder.json + vocab.bpe: run scripts/fetch-gpt2-reference.sh)"
if [[ -f "$vocab/encoder.json" && -f "$vocab/vocab.bpe" ]]; then
  mkdir -p "$b/gpt2"
  cp "$vocab/encoder.json" "$vocab/vocab.bpe" "$b/gpt2/"
  (cd "$b/gpt2" && sha256sum -c --quiet) <<'SUMS' || { echo "make-bundle: $vocab is not GPT-2's released vocabulary" >&2; exit 1; }
196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783  encoder.json
1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5  vocab.bpe
SUMS
  vocab_note="gpt2/ (encoder.json + vocab.bpe)"
fi

archs=$(grep -o 'code=\[[^]]*\]' "$build/compile_commands.json" | grep -o 'sm_[0-9a-z]*' | sort -u | tr '\n' ' ')
# The newest symbol versions the bundle needs from the GPU machine's glibc and libstdc++.
needs() { objdump -T "$b"/bin/* "$b"/lib/* 2>/dev/null | grep -o "$1"'_[0-9.]*' | sort -uV | tail -1; }
nvcc_version=$("$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")" --version | tail -1)
cat >"$b/BUNDLE.json" <<JSON
{
  "built_at": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "source_digest": "$(source_digest)",
  "cuda_architectures": "${archs% }",
  "needs": "$(needs GLIBC) $(needs GLIBCXX)",
  "nvcc": "$nvcc_version",
  "built_with_glibc": "$(ldd --version | head -1 | awk '{print $NF}')",
  "programs": "$(cd "$b/bin" && echo *)",
  "plugin": "lib/libxtrain-cuda.so",
  "libraries": "$(cd "$b/lib" && echo *)",
  "gpt2_vocabulary": "$vocab_note"
}
JSON

mkdir -p "$root/dist"
tar -C "$stage" -cJf "$root/dist/xtrain-bundle.tar.xz.part" xtrain-bundle
mv "$root/dist/xtrain-bundle.tar.xz.part" "$root/dist/xtrain-bundle.tar.xz"
size=$(du -m "$root/dist/xtrain-bundle.tar.xz" | cut -f1)
echo "make-bundle: dist/xtrain-bundle.tar.xz (${size} MiB, unpacked $(du -sm "$b" | cut -f1) MiB), sources $(source_digest)"
echo "make-bundle: carry it to the GPU machine: device tool run, carry [\"dist\"], command scripts/device-check.sh"
