#!/usr/bin/env bash
# A throwaway PostgreSQL server on loopback for the tests of `convgrid tune --storage postgresql://`.
#
#   eval "$(bash .ci/postgres.sh)"        # install if needed, start, print `export CONVGRID_TEST_PG_URL=...`
#   bash .ci/postgres.sh stop             # stop it (pg_ctl stop) and remove its data
#
# Idempotent: a second start finds the server running and prints the same URL. Runs as root on
# Debian (installs `postgresql` with apt-get when no initdb exists); the server itself runs as the
# `postgres` user, listens on 127.0.0.1 only, and trusts local connections (it holds test data only).
set -euo pipefail

PORT="${CONVGRID_PG_PORT:-55432}"
DIR="${CONVGRID_PG_DIR:-/tmp/convgrid-pg}"
DATA="$DIR/data"
DB=convgrid_test
URL="postgresql://postgres@127.0.0.1:$PORT/$DB"

find_bin() {
    local dir
    for dir in /usr/lib/postgresql/*/bin; do
        if [ -x "$dir/initdb" ]; then echo "$dir"; return 0; fi
    done
    return 1
}

BIN="$(find_bin || true)"
as_pg() { runuser -u postgres -- "$@"; }

if [ "${1:-start}" = "stop" ]; then
    if [ -n "$BIN" ] && [ -f "$DATA/PG_VERSION" ]; then
        as_pg "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >&2 || true
    fi
    rm -rf "$DIR"
    exit 0
fi

if [ -z "$BIN" ]; then
    echo "postgres.sh: installing postgresql" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    apt-get install -y -q postgresql >&2
    BIN="$(find_bin)"
fi

mkdir -p "$DIR"
chown postgres "$DIR"
if [ ! -f "$DATA/PG_VERSION" ]; then
    as_pg "$BIN/initdb" -A trust -U postgres -D "$DATA" >&2
fi
if ! as_pg "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    # -k: the Unix socket goes to our own folder (Debian's /var/run/postgresql may not exist).
    as_pg "$BIN/pg_ctl" -D "$DATA" -l "$DIR/server.log" -w -o "-h 127.0.0.1 -p $PORT -k $DIR" start >&2
fi
if ! as_pg "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='$DB'" | grep -q 1; then
    as_pg "$BIN/createdb" -h 127.0.0.1 -p "$PORT" -U postgres "$DB"
fi
echo "$URL" >"$DIR/url"
echo "export CONVGRID_TEST_PG_URL=$URL"
