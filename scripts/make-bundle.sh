#!/usr/bin/env bash
# Makes the relocatable bundle that scripts/device-check.sh runs on a GPU machine that has the
# NVIDIA driver and CUDA but none of our Debian packages and no network:
#   dist/xtrain-bundle.tar.xz  ->  xtrain-bundle/bin/  xlaunch xtrain-worker xtrain-bench-gpu test_cuda,
#                                                      test_launcher_integration and its xtrain-test-worker
#                                                      (the [gpu] tests, all of them)
#                                  xtrain-bundle/lib/  libxtrain-cuda.so, the CUDA plugin (the worker
#                                                      loads it from ../lib beside its bin/), and every
#                                                      shared library they need that is not glibc, the
#                                                      GCC runtime, or CUDA/NCCL/driver (gloo,
#                                                      openblas, gfortran, spdlog, fmt, ...)
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
# (tests/worker's headers: the CUDA tests include some of them.)
source_digest() {
  { find CMakeLists.txt common cuda launcher worker tests/CMakeLists.txt tests/catch_main.cpp tests/cuda \
      tests/launcher scripts/bench/gpu_bench.cpp -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' \
      -o -name '*.cuh' -o -name 'CMakeLists.txt' \) -print0
    find tests/worker -name '*.hpp' -print0
  } | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
}
if [[ "${1:-}" == "--digest" ]]; then
  source_digest
  exit 0
fi

build=${1:-$root/build-cuda}
programs=(xlaunch xtrain-worker xtrain-bench-gpu test_cuda test_launcher_integration xtrain-test-worker)
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
  "libraries": "$(cd "$b/lib" && echo *)"
}
JSON

mkdir -p "$root/dist"
tar -C "$stage" -cJf "$root/dist/xtrain-bundle.tar.xz.part" xtrain-bundle
mv "$root/dist/xtrain-bundle.tar.xz.part" "$root/dist/xtrain-bundle.tar.xz"
size=$(du -m "$root/dist/xtrain-bundle.tar.xz" | cut -f1)
echo "make-bundle: dist/xtrain-bundle.tar.xz (${size} MiB, unpacked $(du -sm "$b" | cut -f1) MiB), sources $(source_digest)"
echo "make-bundle: carry it to the GPU machine: device tool run, carry [\"dist\"], command scripts/device-check.sh"
