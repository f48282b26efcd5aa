#!/usr/bin/env bash
# One call on a lent NVIDIA GPU (the device tool's machine has the driver, NVRTC, the CUDA
# toolkit and PyTorch, but no Rust). Prepare here:
#   cargo build --release -p benchmark --features cuda
#   mkdir -p .gpu && strip -o .gpu/benchmark target/release/benchmark && xz -T2 -f .gpu/benchmark
#   cp -r /usr/share/datasets/fashion-mnist .gpu/   # optional: the hybrid's real images
# then run `bash tools/gpu-session.sh STEP[:SECONDS]...` with `.gpu` carried.
#
# Steps run one after another, each stopped at its own limit (SECONDS, default $LIMIT = 120),
# in the repository's folder, all with one kernel cache. Do not run them at once: CUDA contexts
# of different processes take turns on the GPU (no MPS here), so eleven steps started together
# on the H200 finished two in 525 s (docs/benchmarks.md). A cold process is bound by compiling
# kernels on the host (NVRTC, and autotune compiling candidates), so the cache matters: it
# comes back as $OUT/cubecl-cache.tar.xz.NN (parts of 15 MiB; the device tool returns files of
# at most 16 MiB) and a later session that carries the parts in .gpu/ starts warm (kernels
# whose source changed are compiled again). The carried folder may hold 64 MiB in all: the
# binary (9 MB) and the cache, or Fashion-MNIST (30 MB; without it the hybrid and loader run
# on their stand-in data). Each step's log goes to $OUT/log.txt as it is written; the reports
# (report.json, report.md, kernel-launches.log) are packed into $OUT/results.tgz.
# Steps run at once when joined by '+' (see the loop at the end).
# Between calls, copy the returned cubecl-cache.tar.xz.NN into .gpu/ before the next call: a
# machine left idle past the device tool's idle release (30 s) comes back fresh, and without
# the carried parts the next call compiles and autotunes again everything the last one did (on
# 2026-11-28 a second call did, 100 s of its 260). A run's standard error names each variant
# and peer as it starts and ends, with the seconds since the start, so a step stopped by its
# limit still shows where it was.
# Steps: doctor verify-f32 verify-f32-warm (the same again, to time a warm start) verify-bf16
# verify-f16 devices devices-warm quick-a quick-b quick-c quick-d all-b all-c all-d meta1024 sgldfull
# (default: verify-f32 verify-bf16 verify-f16 quick-a).
set -u
OUT=${OUT:-/tmp/gpu-out}
LIMIT=${LIMIT:-120}
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
# Quench keeps CubeCL's compiled kernels and autotune results in one folder (quench-platform
# kernel_cache); the carried parts of the last call's folder go there first, with the driver's
# machine code for them (below).
CACHE=/tmp/quench/cubecl-cache
# The last lent session's cache, committed (tools/gpu-cache/, newest last), then a carried one;
# only on a fresh machine: CubeCL keeps each cache in a few files that it appends to, and
# unpacking an older copy over them on a machine still warm from the last call would drop what
# that call compiled.
if [ -z "$(ls -A "$CACHE" 2>/dev/null)" ]; then
    mkdir -p "$CACHE"
    for cache in tools/gpu-cache/*.tar.xz; do
        [ -f "$cache" ] && tar xJf "$cache" -C /tmp/quench
    done
    if ls .gpu/cubecl-cache.tar.xz.* > /dev/null 2>&1; then
        cat .gpu/cubecl-cache.tar.xz.* | tar xJf - -C /tmp/quench
    fi
fi
export QUENCH_CACHE_DIR=$CACHE
# CubeCL's CUDA cache holds PTX, which the driver still compiles to machine code (ptxas) when a
# process loads it; the driver keeps that code in its own JIT cache, by default in ~/.nv and at
# most 256 MiB, too little for the ~2,700 kernels of verify's three precisions (396 MiB on the
# H200, 2026-11-28). Room for every kernel keeps the steps of one lease warm for both. It is
# not packed: 43 MB compressed, it would not travel back beside the binary and the CubeCL
# cache within the carried folder's 64 MiB.
export CUDA_CACHE_PATH=/tmp/quench/cuda-jit-cache CUDA_CACHE_MAXSIZE=4294967296
mkdir -p "$CUDA_CACHE_PATH"
rm -f cubecl.toml

stamp "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv
echo "CUDA_PATH=${CUDA_PATH:-unset} LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-unset} cores=$(nproc)"
"$QUENCH_PYTHON" -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"

step() { # step NAME COMMAND...: stopped at the step's limit, its log printed when it ends
    local name=$1; shift
    stamp "$name: $*"
    timeout -k 5 "$limit" "$@" > "$LOGS/$name.log" 2>&1
    local rc=$?
    cat "$LOGS/$name.log"
    stamp "$name: exit $rc"
}

# REPEATS (optional): timed repeats of every variant in the quick steps, in place of the suite's
# 5 and of the training workloads' own 1 (hybrid, temporal: a whole training each, so REPEATS=2
# doubles theirs); a lease of 15 minutes fits the quick suite's baselines only with fewer. PRECISION
# (optional): the quick steps' --precision (default auto: bf16 where a variant follows it, whose
# kernels a cold cache compiles anew; f32 runs what the f32 steps already compiled).
quick() { # quick NAME WORKLOADS [VARIANTS]: part of the default suite, with PyTorch peers on the GPU
    step "$1" "$B" run --device cuda --peers --only "$2" ${3:+--variants "$3"} ${REPEATS:+--repeats "$REPEATS"} \
        ${PRECISION:+--precision "$PRECISION"} --out "/tmp/quench/out/$1"
}

# The GPU's load while the steps run, every 30 s.
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader -l 30 > "$LOGS/nvidia-smi.log" 2>&1 &
smi=$!
run_step() { # run_step NAME: one step of the list below
    case $1 in
    doctor) step doctor "$B" doctor --device cuda ;;
    verify-f32 | verify-f32-warm) step "$1" "$B" verify --device cuda --precision f32 ;;
    verify-bf16) step "$1" "$B" verify --device cuda --precision bf16 ;;
    verify-f16) step "$1" "$B" verify --device cuda --precision f16 ;;
    # The device-agreement suite with its launches and the kernels this process compiles;
    # devices-warm runs it again in a new process, which should compile none (issue 50).
    devices | devices-warm) step "$1" "$B" run --suite configs/devices.toml --device cuda --count-launches --count-compilations --out "/tmp/quench/out/$1" ;;
    quick-a) quick quick-a device,loader,lindblad-meta,qrng-distinguish ;;
    quick-b) quick quick-b qrng-gan,qrng-classifier,sgld ;;
    quick-c) quick quick-c hybrid ;;
    quick-d) quick quick-d temporal-lstm,temporal-transformer,temporal-mlp ;;
    # The product's own path beside PyTorch, without the baselines, which on a GPU run op by op
    # for minutes (on 2026-11-30 the classifier's three baselines took 110 s of a 200 s step,
    # and the temporal and hybrid baselines did not finish in 170 and 120 s).
    all-b) quick all-b qrng-gan,qrng-classifier,sgld all ;;
    all-c) quick all-c hybrid all ;;
    all-d) quick all-d temporal-lstm,temporal-transformer,temporal-mlp all ;;
    meta1024) step meta1024 "$B" run --suite configs/gpu-targets.toml --only lindblad-meta --device cuda --out /tmp/quench/out/meta1024 ;;
    sgldfull) step sgldfull "$B" run --suite configs/gpu-targets.toml --only sgld --device cuda --out /tmp/quench/out/sgldfull ;;
    *) echo "unknown step $1" ;;
    esac
}

# A request is STEP[:SECONDS], or STEP+STEP+...[:SECONDS] for steps that run at once (each
# with that limit): only for steps whose timings do not matter, since CUDA contexts of
# different processes take turns on the GPU, and only with a warm cache: cold processes
# compile the same kernels side by side (four cold steps at once on an H100 finished none in
# 200 s, docs/benchmarks.md, 2026-11-27).
# BUDGET (seconds, optional): the whole call's limit; a step's limit is cut to what is left of
# it less 40 s for packing the results and the cache, and steps past it are skipped.
for request in ${*:-verify-f32 verify-bf16 verify-f16 quick-a}; do
    steps=${request%%:*}
    limit=$LIMIT
    [ "$steps" != "$request" ] && limit=${request#*:}
    if [ -n "${BUDGET:-}" ]; then
        left=$(( BUDGET - 40 - ($(date +%s) - t0) ))
        if [ "$left" -lt 15 ]; then stamp "skipped (budget): $request"; continue; fi
        [ "$limit" -gt "$left" ] && limit=$left
    fi
    pids=()
    for s in ${steps//+/ }; do
        run_step "$s" &
        pids+=($!)
    done
    wait "${pids[@]}"
done
kill "$smi" 2>/dev/null
stamp "steps done"
cat "$LOGS/nvidia-smi.log"
du -sh /tmp/quench/cubecl-cache /tmp/quench/cuda-jit-cache
tar czf "$OUT/results.tgz" -C /tmp/quench out 2>/dev/null
tar cf - -C /tmp/quench cubecl-cache | xz -T0 -6 | split -b 15M -d - "$OUT/cubecl-cache.tar.xz."
ls -la "$OUT"
stamp "done"
