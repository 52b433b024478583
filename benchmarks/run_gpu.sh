#!/usr/bin/env bash
# One run on a GPU machine: install jt-core, jt-cuda, jt-rocm and jt-gluon, run the GPU tests (failing on any
# unexpected skip) and the CPU suites, run the CUDA benchmarks, keep full logs under $OUT and print a short table at
# the end.
#
#   bash benchmarks/run_gpu.sh            # everything
#   bash benchmarks/run_gpu.sh --quick    # fewer benchmark repetitions
#   bash benchmarks/run_gpu.sh --no-bench # tests only
#   bash benchmarks/run_gpu.sh --no-tests # benchmarks only
#
# Needs: python3 with jax[cuda], triton, torch, pytest, setuptools (no network access is needed), a C++ compiler.
# With the platform wheels in dist/ (`bash .ci/wheels.sh` on a machine with network, then dist/ carried along), the
# autotuning benchmark also measures the first call of jt installed from them on a fresh machine without a compiler.
# Exit status: non-zero when installing, any test, the skip check or a benchmark failed.

set -uo pipefail

QUICK=0
BENCH=1
TESTS=1
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK=1 ;;
    --no-bench) BENCH=0 ;;
    --no-tests) TESTS=0 ;;
    *) echo "unknown argument: $arg" >&2; exit 2 ;;
  esac
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$(mktemp -d /tmp/jt-gpu-run.XXXX)}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
SITE=${JT_SITE:-/tmp/jt-site}
export JT_CACHE_DIR=${JT_CACHE_DIR:-/tmp/jt-cache}
export PYTHONUNBUFFERED=1
SCRATCH=$(mktemp -d /tmp/jt-gpu-scratch.XXXX)  # junit files and install log; copied to $OUT only on failure
STATUS=0
SUMMARY=()

note() { SUMMARY+=("$1"); echo "== $1"; }

# -- install -----------------------------------------------------------------------------------------------------
rm -rf "$SITE"
if "$PY" -m pip install --no-deps --no-build-isolation --target "$SITE" ./jt_core ./jt_cuda ./jt_rocm ./jt_gluon \
    >"$SCRATCH/install.log" 2>&1; then
  note "install: ok"
else
  cp "$SCRATCH/install.log" "$OUT/"; note "install: FAILED (see install.log)"; tail -20 "$OUT/install.log"; exit 1
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"

"$PY" -P - >"$OUT/versions.txt" 2>&1 <<'EOF'
import jax, jaxlib, triton, sys
import jt_core
print("python", sys.version.split()[0])
print("jax", jax.__version__, "jaxlib", jaxlib.__version__, "triton", triton.__version__)
d = jax.devices()[0]
print("device", d.device_kind, "cc", getattr(d, "compute_capability", "?"), "count", jax.device_count())
print("plugins", [(p.name, p.status) for p in jt_core.list_plugins()])
EOF
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >>"$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"

# The README's command: the first example, run as a user would.
README_SCRIPT=$(mktemp -d)/readme_example.py  # a file: Triton reads kernels' source from it
cat >"$README_SCRIPT" <<'EOF'
import jax, jax.numpy as jnp, numpy as np, triton, triton.language as tl
import jt_core as jt

@triton.jit
def add_kernel(x_ptr, y_ptr, length, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < length
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)

@jax.jit
def add(x, y):
    return jt.triton_call(x, y, x.size, kernel=add_kernel, out_shape=x, grid=(jt.cdiv(x.size, 64),), BLOCK=64)

out = add(jnp.arange(100.0), jnp.ones(100))
print(out, out.devices())
np.testing.assert_array_equal(np.asarray(out), np.arange(100.0) + 1)
assert "cuda" in str(out.devices()).lower() or "gpu" in str(out.devices()).lower()
EOF
"$PY" -P "$README_SCRIPT" >"$OUT/readme.log" 2>&1
if [ $? -eq 0 ]; then note "README example on the GPU: ok"; else note "README example: FAILED"; STATUS=1; fi

if [ $TESTS -eq 1 ]; then
# -- tests -------------------------------------------------------------------------------------------------------
XDIST=()
if "$PY" -P -c "import xdist" 2>/dev/null; then XDIST=(-n 6); fi
# CPU suites in the background (JAX on the CPU only), GPU tests in the foreground.
JAX_PLATFORMS=cpu timeout 480 "$PY" -P -m pytest -p no:cacheprovider -q -m "not cuda and not gpu and not rocm" \
  "${XDIST[@]}" jt_cuda/tests jt_core/tests/test_native_build.py --junitxml="$SCRATCH/cpu-tests.xml" \
  >"$OUT/cpu-tests.log" 2>&1 &
CPU_PID=$!
timeout 480 "$PY" -P -m pytest -p no:cacheprovider -q -ra -m "cuda or gpu" --jt-require-gpu \
  --junitxml="$SCRATCH/gpu-tests.xml" >"$OUT/gpu-tests.log" 2>&1
GPU_RC=$?
wait $CPU_PID
CPU_RC=$?
note "GPU tests: $(tail -1 "$OUT/gpu-tests.log") (exit $GPU_RC)"
note "CPU suites: $(tail -1 "$OUT/cpu-tests.log") (exit $CPU_RC)"
[ $GPU_RC -eq 0 ] || STATUS=1
[ $CPU_RC -eq 0 ] || STATUS=1

# The GPU suite again with the 'xla' launcher as the CUDA default (calls it cannot express go to 'jt'), and the
# compatibility matrix: every example and feature kernel through 'xla'.
JT_LAUNCHER_CUDA=xla timeout 480 "$PY" -P -m pytest -p no:cacheprovider -q -ra -m "cuda or gpu" --jt-require-gpu \
  -o log_file_level=INFO --log-file="$SCRATCH/xla-decisions.log" >"$OUT/gpu-tests-xla.log" 2>&1
XLA_RC=$?
note "GPU tests, JT_LAUNCHER_CUDA=xla: $(tail -1 "$OUT/gpu-tests-xla.log") (exit $XLA_RC); lowered to XLA: \
$(grep -c "lowered to XLA" "$SCRATCH/xla-decisions.log"), handed on: $(grep -c "cannot express it" "$SCRATCH/xla-decisions.log")"
[ $XLA_RC -eq 0 ] || STATUS=1
if timeout 300 "$PY" -P benchmarks/xla_matrix.py --json "$OUT/xla_matrix.json" >"$SCRATCH/xla_matrix.log" 2>&1; then
  note "xla compatibility matrix: ok"
else
  note "xla compatibility matrix: FAILED (see xla_matrix.log)"; STATUS=1
fi
cp "$SCRATCH/xla_matrix.log" "$OUT/"

# Every GPU test must have run: a skip is allowed only for work needing more GPUs than the machine has.
"$PY" -P - "$SCRATCH/gpu-tests.xml" <<'EOF'
import sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ran = skipped = 0
bad = []
for case in root.iter("testcase"):
    skip = case.find("skipped")
    if skip is None:
        ran += 1
        continue
    skipped += 1
    reason = (skip.get("message") or "") + (skip.text or "")
    if "GPUs" not in reason:
        bad.append(f"{case.get('classname')}::{case.get('name')}: {reason.strip()[:200]}")
print(f"skip check: {ran} GPU tests ran, {skipped} skipped, {len(bad)} unexpected")
for line in bad:
    print("  unexpected skip:", line)
sys.exit(1 if bad or ran == 0 else 0)
EOF
if [ $? -eq 0 ]; then note "skip check: ok"; else note "skip check: FAILED"; STATUS=1; fi

fi

# -- benchmarks --------------------------------------------------------------------------------------------------
if [ $BENCH -eq 1 ]; then
  if [ $QUICK -eq 1 ]; then LAUNCH_ARGS=(--reps 100 --rounds 1); TP_ARGS=(--reps 10); FC_ARGS=(--count 2);
  else LAUNCH_ARGS=(--reps 300 --rounds 9); TP_ARGS=(--reps 30 --rounds 5 --kernel-times); FC_ARGS=(--count 5); fi
  run_bench() {  # name, script, arguments...
    local name=$1 script=$2; shift 2
    if timeout 300 "$PY" -P "benchmarks/$script" "$@" --json "$OUT/$name.json" >"$SCRATCH/$name.log" 2>&1; then
      note "benchmark $name: ok"
    else
      cp "$SCRATCH/$name.log" "$OUT/"; note "benchmark $name: FAILED (see $name.log)"; STATUS=1
    fi
  }
  run_bench launch gpu_launch.py "${LAUNCH_ARGS[@]}"
  # The same chain with XLA's command buffers (CUDA graphs) turned off: what the graphs are worth.
  XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_enable_command_buffer=" run_bench launch_no_graphs gpu_launch.py --reps 100 \
    --rounds 1
  run_bench throughput gpu_throughput.py "${TP_ARGS[@]}"
  run_bench first_call gpu_first_call.py "${FC_ARGS[@]}"
  AUTOTUNE_ARGS=()
  if compgen -G "dist/jt_core-*-py3-none-manylinux_*.whl" >/dev/null && \
      compgen -G "dist/jt_cuda-*-py3-none-manylinux_*.whl" >/dev/null; then
    AUTOTUNE_ARGS=(--wheels dist)
  else
    note "benchmark autotune: no platform wheels in dist/, so the first call from them is not measured"
  fi
  run_bench autotune gpu_autotune.py "${AUTOTUNE_ARGS[@]}"
  # The tuned call against its winner called fixed, in the process that tuned and in a second one; with --diagnose,
  # the handler's in-process tuning (JT_TUNE_AHEAD=0) stage by stage.
  if [ $QUICK -eq 1 ]; then SPEED_ARGS=(--rounds 3 --diagnose); else SPEED_ARGS=(--rounds 9 --diagnose); fi
  run_bench autotune_speed gpu_autotune_speed.py "${SPEED_ARGS[@]}"
  run_bench compile_cache compile_cache.py --arch 90
  if timeout 300 "$PY" -P benchmarks/gpu_transformations.py $([ $QUICK -eq 1 ] && echo --quick) \
      >"$SCRATCH/transformations.log" 2>&1; then
    note "benchmark transformations: ok"
  else
    cp "$SCRATCH/transformations.log" "$OUT/"; note "benchmark transformations: FAILED (see transformations.log)"
    STATUS=1
  fi
  cp "$SCRATCH"/*.log "$OUT/" 2>/dev/null || true
fi

# -- table -------------------------------------------------------------------------------------------------------
echo
echo "================================ summary ================================"
cat "$OUT/versions.txt"
for line in "${SUMMARY[@]}"; do echo "  $line"; done
grep -sE "unexpected skip|^(FAILED|ERROR)" "$OUT/gpu-tests.log" "$OUT/gpu-tests-xla.log" "$OUT/cpu-tests.log" | head -20
if [ -f "$OUT/xla_matrix.log" ]; then echo "-- xla matrix"; sed -n '/^kernel /,$p' "$OUT/xla_matrix.log"; fi
for bench in launch launch_no_graphs throughput first_call autotune autotune_speed compile_cache transformations; do
  if [ -f "$SCRATCH/$bench.log" ]; then
    echo "-- $bench"; grep -vE "Warning|warn\(|^ +[a-z]+ = |_warn_once|torch.from_numpy" "$SCRATCH/$bench.log" | tail -24
  fi
done
# At most a few files come back from a remote run: pack the logs and results into one archive.
if [ "$(find "$OUT" -maxdepth 1 -type f | wc -l)" -gt 6 ]; then
  (cd "$OUT" && tar czf results.tar.gz --exclude results.tar.gz ./* && find . -maxdepth 1 -type f ! -name results.tar.gz -delete)
fi
echo "logs: $OUT"
exit $STATUS
