#!/usr/bin/env bash
# Private PostgreSQL server for tests and developers: own data dir and port, so the
# system cluster (if any) is neither needed nor touched.
#   infra/scripts/postgres.sh {start|stop|restart|status|url|env}
# Env: NOUMENA_INFRA_DIR (default <repo>/.infra), NOUMENA_PG_PORT (default 55432).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
INFRA="${NOUMENA_INFRA_DIR:-$REPO/.infra}"
INFRA="$(mkdir -p "$INFRA" && cd "$INFRA" && pwd)"  # absolute: commands run from / (see as_user)
PORT="${NOUMENA_PG_PORT:-55432}"
DB=noumena PGUSER_NAME=noumena PGPASS=noumena

die() { echo "postgres.sh: $*" >&2; exit 1; }

# Debian ships no server binaries by default; install the distribution package once.
# We use its binaries only (initdb/pg_ctl), never its clusters or service.
ensure_binaries() {
  if ! compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null; then
    echo "postgres.sh: installing Debian's postgresql package" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq postgresql >/dev/null
  fi
  # Highest installed major version.
  BIN="$(printf "%s\n" /usr/lib/postgresql/*/bin | sort -V | tail -n1)"
}

# initdb/postgres refuse to run as root: run them as an unprivileged user.
pick_user() {
  if [ "$(id -u)" -ne 0 ]; then RUNAS=""; return; fi
  if id postgres >/dev/null 2>&1; then RUNAS=postgres
  else
    id noumena >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin noumena
    RUNAS=noumena
  fi
}
# cd / first: the service user may not be able to read the caller's working directory.
# 9>&-: the server must not inherit the lock fd (see the end of this file).
as_user() { if [ -n "$RUNAS" ]; then (cd / && runuser -u "$RUNAS" -- "$@" 9>&-); else "$@" 9>&-; fi; }

# Data lives in $INFRA/postgres, unless the service user cannot reach it (e.g. a repo under
# /root, mode 700) or the socket path would exceed the ~107-byte unix socket limit; then
# fall back to a per-repo dir under /tmp.
pick_dirs() {
  ROOT="$INFRA/postgres"
  if { [ -n "$RUNAS" ] && ! runuser -u "$RUNAS" -- test -x "$INFRA"; } || [ ${#ROOT} -gt 80 ]; then
    ROOT="/tmp/noumena-pg-$(echo -n "$INFRA" | md5sum | cut -c1-12)"
  fi
  DATA="$ROOT/data" SOCK="$ROOT/run" LOG="$ROOT/postgres.log"
  mkdir -p "$ROOT" "$SOCK"
  if [ -n "$RUNAS" ]; then chown "$RUNAS:" "$ROOT" "$SOCK"; fi
  chmod 700 "$ROOT"
}

setup() {
  ensure_binaries; pick_user; pick_dirs
  # An existing cluster needs the major version that created it, if several are installed.
  if [ -s "$DATA/PG_VERSION" ] && [ -x "/usr/lib/postgresql/$(cat "$DATA/PG_VERSION")/bin/pg_ctl" ]; then
    BIN="/usr/lib/postgresql/$(cat "$DATA/PG_VERSION")/bin"
  fi
}

is_running() { as_user "$BIN/pg_ctl" status -D "$DATA" >/dev/null 2>&1; }

psql_super() { as_user "$BIN/psql" -h "$SOCK" -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -qtAc "$1"; }

start() {
  setup
  if [ ! -s "$DATA/PG_VERSION" ]; then
    # Local socket: trust (only the service user can reach it). TCP: password (scram).
    as_user "$BIN/initdb" -D "$DATA" -U postgres -E UTF8 --locale=C.UTF-8 \
      --auth-local=trust --auth-host=scram-sha-256 >"$ROOT/initdb.log" 2>&1 \
      || { cat "$ROOT/initdb.log" >&2; die "initdb failed"; }
  fi
  if ! is_running; then
    # Settings on the command line so a changed NOUMENA_PG_PORT applies to an existing cluster.
    as_user "$BIN/pg_ctl" start -D "$DATA" -l "$LOG" -w -t 60 \
      -o "-p $PORT -c listen_addresses=127.0.0.1 -k $SOCK" >/dev/null \
      || { tail -n 30 "$LOG" >&2; die "pg_ctl start failed"; }
  fi
  for _ in $(seq 60); do
    "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" && break; sleep 0.5
  done
  "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" || { tail -n 30 "$LOG" >&2; die "not ready on port $PORT"; }
  # Idempotent: role and database created on first start only.
  [ "$(psql_super "SELECT 1 FROM pg_roles WHERE rolname='$PGUSER_NAME'")" = 1 ] \
    || psql_super "CREATE ROLE $PGUSER_NAME LOGIN PASSWORD '$PGPASS'"
  [ "$(psql_super "SELECT 1 FROM pg_database WHERE datname='$DB'")" = 1 ] \
    || psql_super "CREATE DATABASE $DB OWNER $PGUSER_NAME"
  echo "postgres.sh: running on 127.0.0.1:$PORT (data $DATA)"
}

stop() {
  setup
  if is_running; then as_user "$BIN/pg_ctl" stop -D "$DATA" -m fast -w >/dev/null; echo "postgres.sh: stopped"
  else echo "postgres.sh: not running"; fi
}

# Serialize start/stop (parallel test workers) on a lock file.
case "${1:-}" in start|stop|restart) exec 9>"$INFRA/.postgres.lock"; flock 9 ;; esac

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) setup; if is_running; then echo "running on 127.0.0.1:$PORT (data $DATA)"; else echo "not running"; exit 3; fi ;;
  url) echo "postgresql://$PGUSER_NAME:$PGPASS@127.0.0.1:$PORT/$DB" ;;
  env) echo "export POSTGRES_HOST=127.0.0.1 POSTGRES_PORT=$PORT POSTGRES_USER=$PGUSER_NAME" \
            "POSTGRES_PASSWORD=$PGPASS POSTGRES_DBNAME=$DB" ;;
  *) echo "usage: $0 {start|stop|restart|status|url|env}" >&2; exit 2 ;;
esac
