#!/usr/bin/env bash
# The concurrency stress test over many seeds (`make stress`): runs the ConcurrencyStress
# suite of the test binary once per seed, JOBS at a time, and prints `N passed, M failed`
# with a replay line for every failing seed. Each run's log is kept in LOGS.
#
# usage: Scripts/stress.sh TEST_BINARY FIRST_SEED SEEDS STEPS JOBS LOGS
set -uo pipefail
binary=$1 first=$2 seeds=$3 steps=$4 jobs=$5 logs=$6
[ -x "$binary" ] || { echo "error: no test binary at $binary (swift build --build-tests)" >&2; exit 2; }
rm -rf "$logs" && mkdir -p "$logs"
last=$((first + seeds - 1))
echo "Concurrency stress: seeds $first...$last, $steps steps each, $jobs at a time (logs in $logs)"

run_seed() {
    local seed=$1
    if STRATA_STRESS_SEED=$seed STRATA_STRESS_STEPS=$steps "$binary" --testing-library swift-testing \
        --filter ConcurrencyStress > "$logs/$seed.log" 2>&1; then
        echo "$seed passed" >> "$logs/results"
    else
        echo "$seed failed" >> "$logs/results"
        echo "seed $seed FAILED: $(grep -m1 'Concurrency stress FAILED' "$logs/$seed.log" | cut -c1-300)"
    fi
}
export -f run_seed
export binary steps logs

# Stopping the script stops the runs under way and the seeds still to come.
trap 'trap - INT TERM; kill 0' INT TERM

start=$(date +%s)
seq "$first" "$last" | xargs -P "$jobs" -I{} bash -c 'run_seed {}'
elapsed=$(( $(date +%s) - start ))

passed=$(grep -c ' passed$' "$logs/results" 2>/dev/null || true)
failed=$(grep -c ' failed$' "$logs/results" 2>/dev/null || true)
echo "Concurrency stress: ${passed:-0} passed, ${failed:-0} failed ($seeds seeds at $steps steps, $jobs jobs, ${elapsed} s)"
if [ "${failed:-0}" -gt 0 ]; then
    echo "Replay a failing seed with:"
    for seed in $(grep ' failed$' "$logs/results" | cut -d' ' -f1 | sort -n); do
        echo "  STRATA_STRESS_SEED=$seed STRATA_STRESS_STEPS=$steps swift test --filter ConcurrencyStress"
    done
    exit 1
fi
