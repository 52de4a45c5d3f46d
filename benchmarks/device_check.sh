#!/usr/bin/env bash
# One call on a lent GPU machine (the device tool): the gpu-marked tests, then the CUDA benchmarks.
# That machine has its own python3 with torch, triton, timm, PyG and transformers; what omnipos' tests need beside
# them travels as wheels in .whl/ (git-ignored), the peers' files in .peer/ (a copy of ../shared/peer-data):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl dnaio xopen isal zlib-ng \
#       backports.zstd biopython pyamg rotary-embedding-torch diffusers importlib_metadata lazy-importer liger-kernel
#   cp -r ../shared/peer-data .peer
#
#   device run: bash benchmarks/device_check.sh [tests] [capture] [gpu] [lappe] [lappe-large] [jacobi] [rope]
#               [rope-layouts] [qknorm] [profile] [tune] [kernels]
#   (carry: .whl, .peer; kernels: the timeline / DNA kernels' gpu tests and their benchmark rows alone)
# Logs and JSON land in $OUT.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/omnipos-device}
mkdir -p "$OUT"
# The default fits one 10-minute device call (timeouts 240 + 150 + 150 s); the rest is a second call:
#   bash benchmarks/device_check.sh gpu lappe        (timelines / DNA / sinusoid rows, then LapPE on 10k molecules)
steps=${*:-tests rope qknorm}  # (capture: the RoPE / QK-norm gpu tests alone, already in tests)

export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
if compgen -G ".whl/*.whl" >/dev/null; then  # (a machine with the test dependencies installed needs none)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PYTHONPATH
fi
if [ -d .peer ] && [ ! -d /work/shared/peer-data ]; then
    mkdir -p /work/shared && cp -r .peer /work/shared/peer-data
fi
if ! command -v omnipos >/dev/null; then  # the console script, for the tests that run it
    printf '#!/bin/sh\nexec python3 -c "import sys; from omnipos.app.cli import main; sys.exit(main())" "$@"\n' \
        >/usr/local/bin/omnipos && chmod +x /usr/local/bin/omnipos
fi
{
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
    echo "cpus: $(nproc)"
    python3 -c "
import torch, triton, numpy, scipy, timm, torch_geometric, transformers
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, 'numpy', numpy.__version__,
      'scipy', scipy.__version__, 'timm', timm.__version__, 'pyg', torch_geometric.__version__,
      'transformers', transformers.__version__)
print(torch.cuda.get_device_name(), torch.cuda.get_device_properties(0).multi_processor_count, 'SMs')"
} 2>&1 | tee "$OUT/env.txt"

for step in $steps; do
    case $step in
        tests)
            timeout 240 python3 -m pytest tests -m gpu -n 6 -q -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" \
                | tail -45 ;;
        capture)
            timeout 180 python3 -m pytest tests/core/test_rope_capture.py tests/core/test_rope_op.py \
                tests/core/test_rope_triton.py tests/core/test_qk_norm.py -m gpu -q -p no:cacheprovider 2>&1 \
                | tee "$OUT/rope_capture.log" | tail -20 ;;
        gpu)
            (cd benchmarks && timeout 200 python3 bench_gpu.py --out "$OUT/gpu.json" 2>&1 | tee "$OUT/gpu.log" \
                | tail -20) ;;
        lappe)
            (cd benchmarks && timeout 240 python3 bench_lappe_gpu.py --out "$OUT/lappe_gpu.json" 2>&1 \
                | tee "$OUT/lappe_gpu.log" | tail -20) ;;
        lappe-large)  # (one 1e6-node Barabasi-Albert graph by the device eigensolver; target < 10 s a call)
            (cd benchmarks && timeout 240 python3 bench_lappe_gpu.py --large \
                --out "$OUT/lappe_gpu_large.json" 2>&1 | tee "$OUT/lappe_gpu_large.log" | tail -20) ;;
        jacobi)  # the batched Jacobi kernel's tests alone (gpu and CPU-side), before the benchmark
            timeout 180 python3 -m pytest tests/graph/test_jacobi_triton.py -m "not slow" -n 0 -q -p no:cacheprovider 2>&1 \
                | tee "$OUT/jacobi_tests.log" | tail -20 ;;
        kernels)
            timeout 180 python3 -m pytest tests/timeseries/test_timeline_triton.py tests/dna/test_dna_triton.py \
                tests/timeseries/test_gpu.py -m gpu -q -p no:cacheprovider 2>&1 | tee "$OUT/kernels_tests.log" \
                | tail -20
            (cd benchmarks && timeout 200 python3 bench_gpu.py --only timelines,dna --out "$OUT/kernels.json" 2>&1 \
                | tee "$OUT/kernels.log" | tail -20) ;;
        profile)
            (cd benchmarks && timeout 200 python3 profile_gpu.py --out "$OUT/profile.txt" 2>&1 | tail -120) ;;
        tune)
            (cd benchmarks && timeout 150 python3 tune_rope.py 2>&1 | tee "$OUT/tune_rope.log" | grep -E "best|Error|error" ) ;;
        rope)  # issue 35's table (4 shapes, 8 compiles, 3 graphs a shape; a row is printed as it is measured)
            (cd benchmarks && timeout 150 python3 bench_rope.py --device cuda --only table \
                --out "$OUT/rope_table.json" 2>&1 | tee "$OUT/rope.log" | tail -24) ;;
        rope-layouts)  # half / interleaved / M-RoPE vs HF, rotary-embedding-torch, Liger (the older rows)
            (cd benchmarks && timeout 120 python3 bench_rope.py --device cuda --only layouts \
                --out "$OUT/rope.json" 2>&1 | tee "$OUT/rope_layouts.log" | tail -16) ;;
        qknorm)
            (cd benchmarks && timeout 150 python3 bench_qknorm.py --device cuda --out "$OUT/qknorm.json" 2>&1 \
                | tee "$OUT/qknorm.log" | tail -8) ;;
        *)
            echo "unknown step $step"; exit 2 ;;
    esac
done
