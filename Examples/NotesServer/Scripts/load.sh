#!/usr/bin/env bash
# Load test of notes-server (`make example-load`): starts the release binary on 127.0.0.1
# and a free port with a fresh temporary store, seeds it over HTTP, runs wrk against two
# read routes and two write routes for a fixed duration each, prints requests/s, p99
# latency and errors, and fails on any non-2xx/3xx response or socket error. The server
# is stopped with SIGTERM (a graceful shutdown) at the end, whatever happens.
#
# usage: load.sh NOTES_SERVER_BINARY [SECONDS] [THREADS] [CONNECTIONS]
set -euo pipefail

BINARY=$1
SECONDS_EACH=${2:-10}
THREADS=${3:-2}
CONNECTIONS=${4:-16}
SCRIPTS=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/notes-load.XXXXXX")
SERVER_PID=

stop_server() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID"
        wait "$SERVER_PID" || echo "warning: notes-server exited with status $?" >&2
    fi
    SERVER_PID=
}
cleanup() {
    stop_server
    rm -rf "$WORK"
}
trap cleanup EXIT

"$BINARY" --host 127.0.0.1 --port 0 --store "$WORK/Notes.strata" --log-level warning \
    >"$WORK/server.out" 2>"$WORK/server.err" &
SERVER_PID=$!
for _ in $(seq 1 200); do
    grep -q "listening on" "$WORK/server.out" 2>/dev/null && break
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/server.err" >&2; echo "error: notes-server did not start" >&2; exit 1; }
    sleep 0.1
done
URL=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$WORK/server.out" | head -n 1)
[ -n "$URL" ] || { echo "error: notes-server did not report its port" >&2; exit 1; }
echo "notes-server at $URL (store $WORK/Notes.strata)"

# Seed: one folder and 200 notes.
key() { sed -E 's/.*"id":"([^"]+)".*/\1/'; echo; }   # curl's output has no final newline
FOLDER=$(curl -sf -X POST -H 'Content-Type: application/json' -d '{"name":"Load"}' "$URL/folders" | key)
: >"$WORK/ids"
for i in $(seq 1 200); do
    curl -sf -X POST -H 'Content-Type: application/json' \
        -d "{\"title\":\"seed $(printf %03d "$i")\",\"body\":\"seeded\",\"priority\":$((i % 6)),\"folder\":\"$FOLDER\"}" \
        "$URL/notes" | key >>"$WORK/ids"
done
NOTE=$(head -n 1 "$WORK/ids")
echo "seeded 1 folder and $(wc -l <"$WORK/ids") notes"

FAILED=0
SUMMARY="| route | requests/s | p99 | non-2xx/3xx | socket errors |\n| --- | --- | --- | --- | --- |"
run() { # run NAME URL [LUA [FOLDER]]: FOLDER is the folder post.lua writes into
    local name=$1 url=$2 lua=${3:-} folder=${4-$FOLDER}
    local out="$WORK/wrk-$(echo "$name" | tr -c 'a-zA-Z0-9' '_').txt"
    echo
    echo "== $name: wrk -t$THREADS -c$CONNECTIONS -d${SECONDS_EACH}s --latency ${lua:+-s $(basename "$lua") }$url"
    if ! NOTES_FOLDER=$folder NOTES_IDS="$WORK/ids" WRK_THREADS=$THREADS \
        wrk -t"$THREADS" -c"$CONNECTIONS" -d"${SECONDS_EACH}s" --timeout 5s --latency ${lua:+-s "$lua"} "$url" | tee "$out"; then
        echo "error: wrk failed for $name" >&2
        FAILED=1
    fi
    local rps p99 non2xx socket
    rps=$(awk '/^Requests\/sec:/ { print $2 }' "$out")
    p99=$(awk '$1 == "99%" { print $2 }' "$out")
    non2xx=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' "$out")
    socket=$(grep -o 'Socket errors:.*' "$out" || true)
    SUMMARY="$SUMMARY\n| $name | $rps | $p99 | ${non2xx:-0} | ${socket:-0} |"
    if [ -n "$non2xx" ] || [ -n "$socket" ]; then
        echo "error: $name had errors (${non2xx:-0} non-2xx/3xx; ${socket:-no socket errors})" >&2
        FAILED=1
    fi
}

run "GET /notes/:id" "$URL/notes/$NOTE"
run "GET /notes (page of 20)" "$URL/notes?folder=$FOLDER&sort=title&limit=20&offset=40"
run "POST /notes (no folder)" "$URL/notes" "$SCRIPTS/post.lua" ""
run "POST /notes (into one folder)" "$URL/notes" "$SCRIPTS/post.lua"
run "PATCH /notes/:id" "$URL/notes" "$SCRIPTS/patch.lua"

TOTAL=$(curl -sf "$URL/notes?limit=1" | sed -E 's/.*"total":([0-9]+).*/\1/')
echo
echo "notes in the store after the run: $TOTAL"
echo "machine: $(nproc) cores, $(uname -sm); commit $(git -C "$SCRIPTS" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo
echo -e "$SUMMARY"
stop_server
if [ "$FAILED" -ne 0 ]; then
    echo "error: the load test saw errors" >&2
    exit 1
fi
echo "load test passed: no non-2xx/3xx responses, no socket errors"
