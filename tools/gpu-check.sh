#!/usr/bin/env bash
# One run on a GPU host, for maintainers: describe the machine, run the GPU
# tests (pytest -m gpu) and the CUDA benchmark (godist against torch's nccl),
# and write what was seen into one folder (default gpu-results/; no more
# than nine files). Needs the built library (make lib, or a copy of
# python/godist/libgodist.so and python/godist/bin from a machine with Go)
# and a Python with torch and pytest-timeout.
#
#   tools/gpu-check.sh [OUT_DIR] [--full]
#
# The whole run fits GPU_CHECK_BUDGET seconds (default 345, under six
# minutes) by construction: every step runs under `timeout` for the
# smaller of its cap and what is left of the budget once the later steps
# have their share (the caps add up to 340 s), and rank processes a step
# leaves are killed with it.
#
#   step                        cap (s)  share kept for it (s)
#   machine description              25   25
#   godist-gpuinfo                   10   10
#   pytest -m gpu (7 tests)         245  245   per-test limits 15+15+30+60+40+40+40 = 240
#   CUDA benchmark, --quick          60   60   world size 2 only; --full: the full sweep, ranks 1,2,
#                                                with what is left (raise GPU_CHECK_BUDGET for it)
#                                   ---
#                                   340
#
# The tests run cheapest and most telling first (the file order below and
# each file's order), so a run cut short has the answers that matter. The
# last line is a summary, printed also when a step or the whole script runs
# out of time (or is interrupted); it is kept in summary.txt.
set -u
out=${1:-gpu-results}
full=${2:-}
mkdir -p "$out"
out=$(cd "$out" && pwd)
py=${PYTHON:-python3}
cd "$(dirname "$0")/.."
budget=${GPU_CHECK_BUDGET:-345}
start=$SECONDS
tests="not run"
bench="not run"
end=

summary() {
	trap - EXIT
	local passed=0 failed=0 skipped=0 errors=0
	if [ -f "$out/gpu-tests.txt" ]; then
		passed=$(grep -cE '::[^ ]+ PASSED' "$out/gpu-tests.txt")
		failed=$(grep -cE '::[^ ]+ FAILED' "$out/gpu-tests.txt")
		skipped=$(grep -cE '::[^ ]+ SKIPPED' "$out/gpu-tests.txt")
		errors=$(grep -cE '::[^ ]+ ERROR' "$out/gpu-tests.txt")
	fi
	echo "gpu-check: tests $tests ($passed passed, $failed failed, $errors errors, $skipped skipped of 7);" \
		"benchmark $bench; $((SECONDS - start))s of ${budget}s$end" | tee "$out/summary.txt"
}
child=
trap summary EXIT
trap 'tests="${tests/running/interrupted}"; bench="${bench/running/interrupted}"; end="; interrupted"
	[ -n "$child" ] && kill -TERM "$child" 2>/dev/null; exit 130' INT TERM

# run_for SECONDS CMD...: CMD under timeout (killed 2 s after the TERM if
# it lingers, its rank processes with it), waited for so that a signal to
# this script is handled at once; 124 when no time is left for it. Only
# the last step's 2 s can pass the budget: each limit counts the time
# the steps before it really took.
run_for() {
	[ "$1" -gt 0 ] || return 124
	timeout -k 2 "$@" &
	child=$!
	wait "$child"
	local rc=$?
	child=
	return $rc
}

# limit CAP OWED: the seconds a step that wants CAP may take while the
# steps after it are owed OWED; 0 when nothing is left for it.
limit() {
	local left=$((budget - (SECONDS - start) - $2))
	[ "$left" -gt "$1" ] && left=$1
	[ "$left" -lt 0 ] && left=0
	echo "$left"
}

# status RC SECONDS: the words for a step's exit status.
status() {
	case $1 in
	0) echo "passed" ;;
	124 | 137) echo "timed out after ${2}s" ;;
	*) echo "failed (exit $1)" ;;
	esac
}

if [ ! -f python/godist/libgodist.so ]; then
	t=$(limit "$budget" 340)
	run_for "$t" make lib
	[ -f python/godist/libgodist.so ] || {
		echo "no python/godist/libgodist.so and no way to build it in ${t}s" | tee "$out/machine.txt"
		exit 1
	}
fi
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

t=$(limit 25 315)
run_for "$t" bash -c '
	py=$1
	date -u
	timeout 5 nvidia-smi || true
	timeout 10 "$py" -c "import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"nccl\", torch.cuda.nccl.version(), \"gpus\", torch.cuda.device_count())"
	timeout 10 "$py" -c "import torch, godist._nccl as n; print(\"godist nccl path:\", n.nccl_info())"
	timeout 10 "$py" -m godist info
' _ "$py" >"$out/machine.txt" 2>&1
t=$(limit 10 305)
run_for "$t" python/godist/bin/godist-gpuinfo --pretty >"$out/gpuinfo.json" 2>&1

t=$(limit 245 60)
tests="running"
run_for "$t" "$py" -m pytest -m gpu -v -rs -p no:cacheprovider \
	python/tests/test_gpuinfo.py python/tests/test_cuda_nccl.py python/tests/test_cuda_staged.py \
	>"$out/gpu-tests.txt" 2>&1
rc=$?
tests=$(status "$rc" "$t")
echo "pytest exit $rc" >>"$out/gpu-tests.txt"
tail -5 "$out/gpu-tests.txt"

if [ "$full" = "--full" ]; then
	args=(--ranks 1,2)
	t=$(limit "$budget" 0)
else
	args=(--quick --ranks 2)
	t=$(limit 60 0)
fi
if [ "$t" -gt 0 ]; then
	bench="running"
	run_for "$t" "$py" -m godist.bench --device cuda "${args[@]}" --out "$out/bench" >"$out/bench.txt" 2>&1
	rc=$?
	bench=$(status "$rc" "$t")
	echo "bench exit $rc" >>"$out/bench.txt"
	tail -30 "$out/bench.txt"
else
	bench="skipped (no time left)"
fi
