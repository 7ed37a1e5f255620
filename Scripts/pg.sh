#!/usr/bin/env bash
# make pg-start / pg-stop / pg-status: a private PostgreSQL cluster for the PostgreSQL
# store's tests, in the project folder (.build-pg, ignored by git), listening on
# 127.0.0.1:$STRATA_PG_PORT (54329 by default) and a socket in that folder only. Debian's
# postgresql is installed with apt-get when missing. No system service is used or needed:
# the cluster is the project's own, made with initdb and run with pg_ctl.
#
#   Scripts/pg.sh start|stop|status
#
# Connection for tests: host 127.0.0.1, port $STRATA_PG_PORT, user strata (trust
# authentication on loopback), database strata_test.
set -euo pipefail
command=${1:-status}
dir=${STRATA_PG_DIR:-$(pwd)/.build-pg}
port=${STRATA_PG_PORT:-54329}
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo

bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }

install_if_missing() {
    if [ -z "$(bindir)" ] || [ ! -x "$(bindir)/initdb" ]; then
        echo "Installing postgresql with apt-get..."
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends postgresql
    fi
    [ -x "$(bindir)/initdb" ] || { echo "error: PostgreSQL's initdb is still missing" >&2; exit 1; }
}

# as_owner COMMAND...: runs as the cluster's owner (PostgreSQL refuses to run as root).
as_owner() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$command" in
start)
    install_if_missing
    bin=$(bindir)
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres: "$dir"
    if [ ! -f "$dir/data/PG_VERSION" ]; then
        as_owner "$bin/initdb" -D "$dir/data" -U strata --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log"
    fi
    if as_owner "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
        echo "PostgreSQL already running on 127.0.0.1:$port ($dir)"
    else
        as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
            -o "-h 127.0.0.1 -p $port -k $dir -c fsync=off -c max_connections=200" start >/dev/null
        echo "PostgreSQL started on 127.0.0.1:$port ($dir)"
    fi
    as_owner "$bin/psql" -h 127.0.0.1 -p "$port" -U strata -d postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname = 'strata_test'" | grep -q 1 \
        || as_owner "$bin/createdb" -h 127.0.0.1 -p "$port" -U strata strata_test
    ;;
stop)
    bin=$(bindir)
    if [ -n "$bin" ] && [ -f "$dir/data/PG_VERSION" ] && as_owner "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
        as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
        echo "PostgreSQL stopped ($dir)"
    else
        echo "PostgreSQL was not running ($dir)"
    fi
    ;;
status)
    bin=$(bindir)
    if [ -n "$bin" ] && [ -f "$dir/data/PG_VERSION" ] && as_owner "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
        echo "running on 127.0.0.1:$port ($dir)"
    else
        echo "not running ($dir)"
        exit 1
    fi
    ;;
*)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
