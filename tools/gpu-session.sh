#!/usr/bin/env bash
# One call on a lent NVIDIA GPU (the device tool's machine has the driver, NVRTC, the CUDA
# toolkit and PyTorch, but no Rust). Prepare here:
#   cargo build --release -p benchmark --features cuda
#   mkdir -p .gpu && strip -o .gpu/benchmark target/release/benchmark && xz -T2 -f .gpu/benchmark
#   cp -r /usr/share/datasets/fashion-mnist .gpu/   # optional: the hybrid's real images
# then run `bash tools/gpu-session.sh STEP...` with `.gpu` carried. Every step has its own time
# limit, so one hang costs only its share; logs go to $OUT/log.txt as they are written, and
# each suite's report.json is copied to $OUT/<step>-report.json when it ends,
# and the kernel cache to $OUT/cubecl-cache.tgz after every step (at most 8 files come back).
# Steps: doctor verify quick devices meta1024 sgldfull (default: the first four).
set -u
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
LOG="$OUT/log.txt"
exec > >(tee -a "$LOG") 2>&1
t0=$(date +%s)
stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }

B=/tmp/quench/benchmark
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
[ -d .gpu/fashion-mnist ] && export QUENCH_MNIST_DIR=$PWD/.gpu/fashion-mnist
# A cold run spends most of its time compiling kernels with NVRTC and autotuning matmuls (the
# H200's first call: doctor 46 s, verify 240 s, GPU 1 % busy). CubeCL keeps both on disk when
# cubecl.toml names a folder; the folder comes back as $OUT/cubecl-cache.tgz, and a later
# session that carries it as .gpu/cubecl-cache.tgz starts warm (kernels whose source changed
# are compiled again).
CACHE=/tmp/quench/cubecl-cache
mkdir -p "$CACHE"
[ -f .gpu/cubecl-cache.tgz ] && tar xzf .gpu/cubecl-cache.tgz -C /tmp/quench
cat > cubecl.toml <<TOML
[compilation]
cache = { file = "$CACHE" }
[autotune]
cache = { file = "$CACHE" }
TOML
save_cache() { tar czf "$OUT/cubecl-cache.tgz" -C /tmp/quench cubecl-cache && ls -la "$OUT/cubecl-cache.tgz"; }
export QUENCH_PYTHON=${QUENCH_PYTHON:-python3}

step() { # step NAME LIMIT_S COMMAND...
    local name=$1 limit=$2; shift 2
    stamp "$name: $*"
    timeout -k 5 "$limit" "$@"
    local rc=$?
    stamp "$name: exit $rc"
}
keep() { # keep NAME FOLDER: the suite's report beside the log (the JSON: 8 files come back)
    [ -f "$2/report.json" ] && cp "$2/report.json" "$OUT/$1-report.json"
}

steps=${*:-doctor verify quick devices}
for s in $steps; do
    case $s in
    doctor)
        stamp "machine"
        nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv
        echo "CUDA_PATH=${CUDA_PATH:-unset} LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-unset}"
        "$QUENCH_PYTHON" -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"
        step doctor 60 "$B" doctor --device cuda ;;
    verify)
        step verify-f32 100 "$B" verify --device cuda --precision f32
        step verify-bf16 50 "$B" verify --device cuda --precision bf16
        step verify-f16 50 "$B" verify --device cuda --precision f16 ;;
    quick)
        step quick 220 "$B" run --device cuda --peers --out /tmp/quick
        keep quick /tmp/quick ;;
    devices)
        step devices 70 "$B" run --suite configs/devices.toml --device cuda --count-launches --out /tmp/devices
        keep devices /tmp/devices
        [ -f /tmp/devices/kernel-launches.log ] && wc -l /tmp/devices/kernel-launches.log ;;
    meta1024)
        step meta1024 120 "$B" run --suite configs/gpu-targets.toml --only lindblad-meta --device cuda --out /tmp/meta1024
        keep meta1024 /tmp/meta1024 ;;
    sgldfull)
        step sgldfull 120 "$B" run --suite configs/gpu-targets.toml --only sgld --device cuda --out /tmp/sgldfull
        keep sgldfull /tmp/sgldfull ;;
    *) echo "unknown step $s" ;;
    esac
    save_cache
done
stamp "done"
