#!/usr/bin/env bash
# One call on a lent NVIDIA GPU (the device tool's machine has the driver, NVRTC, the CUDA
# toolkit and PyTorch, but no Rust). Prepare here:
#   cargo build --release -p benchmark --features cuda
#   mkdir -p .gpu && strip -o .gpu/benchmark target/release/benchmark && xz -T2 -f .gpu/benchmark
#   cp -r /usr/share/datasets/fashion-mnist .gpu/   # optional: the hybrid's real images
# then run `LIMIT=540 bash tools/gpu-session.sh STEP...` with `.gpu` carried.
#
# The steps run AT ONCE, each in its own folder with its own kernel cache: a cold process is
# bound by compiling kernels on the host (NVRTC, and autotune compiling candidates; the H200's
# first call spent verify's 240 s with the GPU 1 % busy), and the machine has 16 cores. So a
# step's timings are taken beside the others' and are upper bounds; correctness, parity and
# launch counts are not affected. Run one timing step alone (with the cache carried back) for
# figures to publish. Every step stops at $LIMIT seconds; each writes its log STEP.log as it
# goes into /tmp/quench/out/logs; at the end the logs are appended to $OUT/log.txt, and the logs
# and reports (report.json, report.md, kernel-launches.log) are packed into $OUT/results.tgz
# and the kernel caches into $OUT/cubecl-cache.tgz (carry it back as
# .gpu/cubecl-cache.tgz and a later session starts warm: kernels whose source changed are
# compiled again).
# Steps: doctor verify-f32 verify-bf16 verify-f16 devices quick-a quick-b quick-c quick-d
# meta1024 sgldfull (default: all).
set -u
OUT=${OUT:-/tmp/gpu-out}
LIMIT=${LIMIT:-540}
LOGS=/tmp/quench/out/logs
mkdir -p "$OUT" "$LOGS"
LOG="$OUT/log.txt"
exec > >(tee -a "$LOG") 2>&1
t0=$(date +%s)
stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
REPO=$PWD

B=${QUENCH_BENCHMARK:-/tmp/quench/benchmark}
if [ ! -x "$B" ]; then
    mkdir -p /tmp/quench
    python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('.gpu/benchmark.xz'), open('$B','wb'))" || exit 1
    chmod +x "$B"
fi
# CubeCL compiles kernels with NVRTC, against the toolkit's headers (CUDA_PATH); cudarc opens
# libcuda and libnvrtc by name, so their folders go on the loader's path.
nvcc=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)
[ -n "$nvcc" ] && export CUDA_PATH=${CUDA_PATH:-$(dirname "$(dirname "$nvcc")")}
for lib in libnvrtc.so libcuda.so; do
    found=$( (ldconfig -p | grep -o "/[^ ]*$lib[^ ]*"; find /usr/local /opt /usr/lib -name "$lib*" 2>/dev/null) | head -1)
    [ -n "$found" ] && export LD_LIBRARY_PATH=$(dirname "$found")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
done
[ -d .gpu/fashion-mnist ] && export QUENCH_MNIST_DIR=$REPO/.gpu/fashion-mnist
export QUENCH_PYTHON=${QUENCH_PYTHON:-python3}
CACHE=/tmp/quench/cubecl-cache
mkdir -p "$CACHE"
[ -f .gpu/cubecl-cache.tgz ] && tar xzf .gpu/cubecl-cache.tgz -C /tmp/quench

stamp "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv
echo "CUDA_PATH=${CUDA_PATH:-unset} LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-unset} cores=$(nproc)"
"$QUENCH_PYTHON" -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"

start() { # start NAME COMMAND...: runs in the background in /tmp/quench/work/NAME
    local name=$1; shift
    local dir=/tmp/quench/work/$name
    mkdir -p "$dir" "$CACHE/$name"
    for path in configs data peers; do [ -e "$REPO/$path" ] && ln -sfn "$REPO/$path" "$dir/$path"; done
    cat > "$dir/cubecl.toml" <<TOML
[compilation]
cache = { file = "$CACHE/$name" }
[autotune]
cache = { file = "$CACHE/$name" }
TOML
    stamp "$name: $*"
    (
        cd "$dir" || exit 1
        s=$(date +%s)
        timeout -k 5 "$LIMIT" "$@" > "$LOGS/$name.log" 2>&1
        rc=$?
        echo "== $name: exit $rc after $(( $(date +%s) - s )) s" | tee -a "$LOGS/$name.log"
    ) &
}

quick() { # quick NAME WORKLOADS: part of the default suite, with PyTorch peers on the GPU
    start "$1" "$B" run --device cuda --peers --only "$2" --out "/tmp/quench/out/$1"
}

steps=${*:-doctor verify-f32 verify-bf16 verify-f16 devices quick-a quick-b quick-c quick-d meta1024 sgldfull}
for s in $steps; do
    case $s in
    doctor) start doctor "$B" doctor --device cuda ;;
    verify-f32) start "$s" "$B" verify --device cuda --precision f32 ;;
    verify-bf16) start "$s" "$B" verify --device cuda --precision bf16 ;;
    verify-f16) start "$s" "$B" verify --device cuda --precision f16 ;;
    devices) start devices "$B" run --suite configs/devices.toml --device cuda --count-launches --out /tmp/quench/out/devices ;;
    quick-a) quick quick-a device,loader,lindblad-meta,qrng-distinguish ;;
    quick-b) quick quick-b qrng-gan,qrng-classifier,sgld ;;
    quick-c) quick quick-c hybrid ;;
    quick-d) quick quick-d temporal-lstm,temporal-transformer,temporal-mlp ;;
    meta1024) start meta1024 "$B" run --suite configs/gpu-targets.toml --only lindblad-meta --device cuda --out /tmp/quench/out/meta1024 ;;
    sgldfull) start sgldfull "$B" run --suite configs/gpu-targets.toml --only sgld --device cuda --out /tmp/quench/out/sgldfull ;;
    *) echo "unknown step $s" ;;
    esac
done
# The GPU's load while the steps run, every 30 s.
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader -l 30 > "$LOGS/nvidia-smi.log" 2>&1 &
smi=$!
wait $(jobs -p | grep -v "^$smi$")
kill "$smi" 2>/dev/null
stamp "steps done"
for f in "$LOGS"/*.log; do echo "=== $f"; cat "$f"; done
mkdir -p /tmp/quench/out
tar czf "$OUT/results.tgz" -C /tmp/quench out 2>/dev/null
tar czf "$OUT/cubecl-cache.tgz" -C /tmp/quench cubecl-cache && ls -la "$OUT"
stamp "done"
