#!/usr/bin/env bash
# The concurrency stress test over many seeds (`make stress`): runs the ConcurrencyStress
# suite of the test binary once per seed (every mode of MODES in that run: `conserved`,
# `disjoint`, `lww`, a comma-separated list of them, or `all`, the default), JOBS at a
# time, and prints `N passed, M failed` with a replay line for every failing seed and
# mode. Each run's log is kept in LOGS.
#
# usage: Scripts/stress.sh TEST_BINARY FIRST_SEED SEEDS STEPS JOBS LOGS [MODES]
set -uo pipefail
binary=$1 first=$2 seeds=$3 steps=$4 jobs=$5 logs=$6 modes=${7:-all}
[ -x "$binary" ] || { echo "error: no test binary at $binary (swift build --build-tests)" >&2; exit 2; }
rm -rf "$logs" && mkdir -p "$logs"
last=$((first + seeds - 1))
echo "Concurrency stress: seeds $first...$last, $steps steps each, modes $modes, $jobs at a time (logs in $logs)"

run_seed() {
    local seed=$1
    if STRATA_STRESS_SEED=$seed STRATA_STRESS_STEPS=$steps STRATA_STRESS_MODE=$modes "$binary" --testing-library swift-testing \
        --filter ConcurrencyStress > "$logs/$seed.log" 2>&1; then
        echo "$seed passed" >> "$logs/results"
    else
        echo "$seed failed" >> "$logs/results"
        echo "seed $seed FAILED: $(grep -m1 'Concurrency stress FAILED' "$logs/$seed.log" | cut -c1-300)"
    fi
}
export -f run_seed
export binary steps logs modes

# Stopping the script stops the runs under way and the seeds still to come.
trap 'trap - INT TERM; kill 0' INT TERM

start=$(date +%s)
seq "$first" "$last" | xargs -P "$jobs" -I{} bash -c 'run_seed {}'
elapsed=$(( $(date +%s) - start ))

passed=$(grep -c ' passed$' "$logs/results" 2>/dev/null || true)
failed=$(grep -c ' failed$' "$logs/results" 2>/dev/null || true)
echo "Concurrency stress: ${passed:-0} passed, ${failed:-0} failed ($seeds seeds at $steps steps, modes $modes, $jobs jobs, ${elapsed} s)"
if [ "${failed:-0}" -gt 0 ]; then
    echo "Replay a failing run with:"
    for seed in $(grep ' failed$' "$logs/results" | cut -d' ' -f1 | sort -n); do
        # The replay lines of the failing modes; a run that died before printing one
        # (a crash) is replayed in all the modes it ran.
        replays=$(grep -E '^  replay: STRATA_STRESS_SEED=' "$logs/$seed.log" | sed 's/^  replay: //' | sort -u)
        if [ -n "$replays" ]; then
            echo "$replays" | sed 's/^/  /'
        else
            echo "  STRATA_STRESS_SEED=$seed STRATA_STRESS_STEPS=$steps STRATA_STRESS_MODE=$modes swift test --filter ConcurrencyStress"
        fi
    done
    exit 1
fi
