#!/usr/bin/env bash
# make profile: instructions per object of the import, fetch and save paths, counted by valgrind's
# callgrind (repeatable on a loaded machine, unlike times). Each workload of strata-profile
# runs at N and 2N objects; (I(2N) - I(N)) / N is the cost of one more object, with process
# start, store opening and the other fixed costs cancelled out.
#
#   Scripts/profile.sh BINARY N WORKDIR
#
# valgrind 3.19 rejects Swift 6.3's debug info, so the binary is stripped of it first.
set -euo pipefail
binary=$1 n=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
objcopy --strip-debug "$binary" "$work/strata-profile"
tool="$work/strata-profile"

# instructions COMMAND ARGS...: the total instruction count of one run under callgrind.
instructions() {
    local out="$work/callgrind.$RANDOM"
    # Swift seeds its hashing per process: fixed here, so that dictionary probes repeat.
    SWIFT_DETERMINISTIC_HASHING=1 valgrind --tool=callgrind --callgrind-out-file="$out" "$tool" "$@" >/dev/null 2>"$out.log" \
        || { cat "$out.log" >&2; exit 1; }
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$out.log"
}

# report LABEL I(N) I(2N): prints the two counts and the instructions per object.
report() {
    local label=$1 small=$2 large=$3
    printf '%-34s %12s %12s %10d\n' "$label" "$small" "$large" $(( (large - small) / n ))
}

printf '%-34s %12s %12s %10s\n' "workload (N=$n)" "I(N)" "I(2N)" "per object"
for size in "$n" "$((2 * n))"; do
    "$tool" import "$size" "$work/strata-$size" >/dev/null
    "$tool" raw-import "$size" "$work/raw-$size" >/dev/null
done
# The imports make their input (N records of random values) in the measured run: that
# part is counted on its own and taken off.
input_a=$(instructions generate "$n") input_b=$(instructions generate "$((2 * n))")
report "(the imports' input alone)" "$input_a" "$input_b"
report "Strata import, one save" "$(( $(instructions import "$n" "$work/import-a") - input_a ))" \
    "$(( $(instructions import "$((2 * n))" "$work/import-b") - input_b ))"
report "raw liblmdb import" "$(( $(instructions raw-import "$n" "$work/raw-import-a") - input_a ))" \
    "$(( $(instructions raw-import "$((2 * n))" "$work/raw-import-b") - input_b ))"
report "Strata batch insert (object handler)" "$(( $(instructions batch-import "$n" "$work/batch-import-a") - input_a ))" \
    "$(( $(instructions batch-import "$((2 * n))" "$work/batch-import-b") - input_b ))"
report "Strata fetch, realised, all read" "$(instructions fetch "$work/strata-$n")" "$(instructions fetch "$work/strata-$((2 * n))")"
report "Strata faults, batch 1000, walked" "$(instructions faults "$work/strata-$n")" "$(instructions faults "$work/strata-$((2 * n))")"
report "raw liblmdb fetch, all read" "$(instructions raw-fetch "$work/raw-$n")" "$(instructions raw-fetch "$work/raw-$((2 * n))")"
report "Strata sum(score), dictionary" "$(instructions sum "$work/strata-$n")" "$(instructions sum "$work/strata-$((2 * n))")"
report "raw liblmdb sum(score)" "$(instructions raw-sum "$work/raw-$n")" "$(instructions raw-sum "$work/raw-$((2 * n))")"
report "Strata sum(rank), from its index" "$(instructions sum-indexed "$work/strata-$n")" "$(instructions sum-indexed "$work/strata-$((2 * n))")"

# The save paths change the store: each run gets a fresh copy of the imported one. The
# save alone is the run with it less the same run without it.
copied() {
    local size=$1
    rm -rf "$work/copy" && cp -r "$work/strata-$size" "$work/copy"
    echo "$work/copy"
}
saving() {
    local with=$1 without=$2 size=$3
    echo $(( $(instructions "$with" "$(copied "$size")") - $(instructions "$without" "$(copied "$size")") ))
}
report "root context save of N updates" "$(saving update fetch-update "$n")" "$(saving update fetch-update "$((2 * n))")"
report "root save of N updates, 100 observers" "$(saving observed-update observed-fetch-update "$n")" "$(saving observed-update observed-fetch-update "$((2 * n))")"
report "root save of N updates, history on" "$(saving update-history fetch-update-history "$n")" "$(saving update-history fetch-update-history "$((2 * n))")"
report "child -> parent save (one hop)" "$(saving child-update child-fetch "$n")" "$(saving child-update child-fetch "$((2 * n))")"
report "middle of a chain -> root (one hop)" "$(saving chain-hop chain-leaf "$n")" "$(saving chain-hop chain-leaf "$((2 * n))")"
# A migration adding a required attribute with a default: every row rewritten in one
# transaction (issue 23); fixed costs (opening, planning) cancel out between N and 2N.
report "batch update, every row (score + 1)" "$(instructions batch-update "$(copied "$n")")" "$(instructions batch-update "$(copied "$((2 * n))")")"
report "batch delete, every row" "$(instructions batch-delete "$(copied "$n")")" "$(instructions batch-delete "$(copied "$((2 * n))")")"
report "migration, every row rewritten" "$(instructions migrate "$(copied "$n")")" "$(instructions migrate "$(copied "$((2 * n))")")"

# Upserts (scenario 7's entity, a unique code): N new objects into a store of N, half of
# them colliding with a stored code, saved 1,000 at a time under mergeByPropertyObjectTrump;
# and N with new codes under .error. The save alone: the run less the same run unsaved.
for size in "$n" "$((2 * n))"; do
    "$tool" coded-preload "$size" "$work/coded-$size" >/dev/null
done
coded() {
    local with=$1 without=$2 size=$3
    rm -rf "$work/copy" && cp -r "$work/coded-$size" "$work/copy"
    local a; a=$(instructions "$with" "$size" "$work/copy")
    rm -rf "$work/copy" && cp -r "$work/coded-$size" "$work/copy"
    echo $(( a - $(instructions "$without" "$size" "$work/copy") ))
}
report "coded saves, new codes (.error)" "$(coded coded-insert coded-unsaved "$n")" "$(coded coded-insert coded-unsaved "$((2 * n))")"
report "upsert saves, half colliding" "$(coded upsert upsert-unsaved "$n")" "$(coded upsert upsert-unsaved "$((2 * n))")"
# The same upserts through a BatchInsertRequest per 1,000 (no context): the whole run at N
# and 2N, opening the store being the fixed cost that cancels out.
batched() {
    local size=$1
    rm -rf "$work/copy" && cp -r "$work/coded-$size" "$work/copy"
    instructions batch-upsert "$size" "$work/copy"
}
report "batch upserts, half colliding" "$(batched "$n")" "$(batched "$((2 * n))")"
