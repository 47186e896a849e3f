#!/usr/bin/env bash
# Bring up a local PostgreSQL for the storage tests and print the URL to use.
#
# On success prints exactly one line on stdout:
#   export ROOST_TEST_POSTGRES_URL=postgresql+asyncpg://roost:roost@127.0.0.1:<port>/roost_test
# so callers can `eval "$(bash .ci/postgres.sh)"`. Progress goes to stderr.
# On failure exits non-zero with a message on stderr; the storage tests then skip
# their PostgreSQL half instead of failing.
#
# Idempotent: installs PostgreSQL from Debian packages only if missing, creates a cluster
# only if none exists, starts it only if it is down, and (re)creates role and database only
# if absent. Needs root (or passwordless sudo) for apt-get and for acting as `postgres`.
set -euo pipefail

ROLE=roost
PASSWORD=roost
DATABASE=roost_test
WAIT_SECONDS=${ROOST_PG_WAIT_SECONDS:-30}

log() { printf 'postgres.sh: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  SUDO=(sudo -n)
else
  die "need root or passwordless sudo to install/start PostgreSQL"
fi

as_postgres() {
  # runuser keeps working in containers without a login shell for `postgres`.
  if command -v runuser >/dev/null 2>&1; then
    "${SUDO[@]}" runuser -u postgres -- "$@"
  else
    "${SUDO[@]}" su postgres -s /bin/sh -c "$(printf '%q ' "$@")"
  fi
}

# 1. Install the server if it is not there.
if ! command -v pg_lsclusters >/dev/null 2>&1 || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  log "installing PostgreSQL from Debian packages"
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" apt-get update -qq >&2 || die "apt-get update failed"
  "${SUDO[@]}" apt-get install -y -qq postgresql >&2 || die "apt-get install postgresql failed"
fi
command -v pg_lsclusters >/dev/null 2>&1 || die "pg_lsclusters not found after install (postgresql-common missing?)"

# 2. Pick a cluster (the first one listed), creating one if there is none.
read_cluster() { pg_lsclusters --no-header 2>/dev/null | awk 'NR==1 {print $1, $2, $3, $4}'; }
CLUSTER_LINE=$(read_cluster || true)
if [ -z "$CLUSTER_LINE" ]; then
  VERSION=$(ls /usr/lib/postgresql | sort -V | tail -n1)
  [ -n "$VERSION" ] || die "no PostgreSQL version under /usr/lib/postgresql"
  log "creating cluster $VERSION/main"
  "${SUDO[@]}" pg_createcluster "$VERSION" main >&2 || die "pg_createcluster $VERSION main failed"
  CLUSTER_LINE=$(read_cluster)
fi
read -r VERSION NAME PORT STATUS <<<"$CLUSTER_LINE"

# 3. Start it unless it is already running. /run is a fresh tmpfs in many containers, so the
# socket directory may be missing even though the cluster exists.
"${SUDO[@]}" install -d -o postgres -g postgres -m 2775 /var/run/postgresql
if [ "$STATUS" != "online" ]; then
  log "starting cluster $VERSION/$NAME on port $PORT"
  if ! "${SUDO[@]}" pg_ctlcluster "$VERSION" "$NAME" start >&2; then
    # A stale pid file after an unclean stop is the usual cause; show the log tail.
    LOGFILE=/var/log/postgresql/postgresql-$VERSION-$NAME.log
    [ -r "$LOGFILE" ] && tail -n 20 "$LOGFILE" >&2 || true
    die "pg_ctlcluster $VERSION $NAME start failed"
  fi
else
  log "cluster $VERSION/$NAME already running on port $PORT"
fi

# 4. Wait until it accepts connections.
deadline=$((SECONDS + WAIT_SECONDS))
until pg_isready -q -h 127.0.0.1 -p "$PORT"; do
  [ "$SECONDS" -lt "$deadline" ] || die "server did not accept connections on 127.0.0.1:$PORT within ${WAIT_SECONDS}s"
  sleep 0.5
done

# 5. Role with CREATEDB (tests create one database per test) and the base database.
psql_admin() { as_postgres psql -X -q -v ON_ERROR_STOP=1 -p "$PORT" -d postgres "$@"; }
psql_admin -c "DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$ROLE') THEN
    CREATE ROLE $ROLE LOGIN CREATEDB PASSWORD '$PASSWORD';
  ELSE
    ALTER ROLE $ROLE LOGIN CREATEDB PASSWORD '$PASSWORD';
  END IF;
END \$\$;" >&2 || die "could not create role $ROLE"
# The tests drop each database WITH (FORCE); an autovacuum worker connected to it can only be
# ended by a member of pg_signal_backend (else: "must be a member of the role whose process is
# being terminated or member of pg_signal_backend").
psql_admin -c "GRANT pg_signal_backend TO $ROLE;" >&2 || die "could not grant pg_signal_backend to $ROLE"
if [ "$(psql_admin -tAc "SELECT 1 FROM pg_database WHERE datname = '$DATABASE'")" != "1" ]; then
  as_postgres createdb -p "$PORT" -O "$ROLE" "$DATABASE" >&2 || die "could not create database $DATABASE"
fi

# 6. Room for two test workers' replica tests at once: three replicas of one test hold up to
# ~40 connections, and the default 100 (3 reserved) leaves no margin for two such tests plus
# the rest. Raised once (a restart), kept after.
MIN_CONNECTIONS=300
if [ "$(psql_admin -tAc "SHOW max_connections")" -lt "$MIN_CONNECTIONS" ]; then
  log "raising max_connections to $MIN_CONNECTIONS (restart)"
  psql_admin -c "ALTER SYSTEM SET max_connections = $MIN_CONNECTIONS;" >&2 || die "could not set max_connections"
  "${SUDO[@]}" pg_ctlcluster "$VERSION" "$NAME" restart >&2 || die "pg_ctlcluster $VERSION $NAME restart failed"
  deadline=$((SECONDS + WAIT_SECONDS))
  until pg_isready -q -h 127.0.0.1 -p "$PORT"; do
    [ "$SECONDS" -lt "$deadline" ] || die "server did not come back within ${WAIT_SECONDS}s after the restart"
    sleep 0.5
  done
fi

# 7. Prove the URL works over TCP with the password, exactly as the tests will connect.
PGPASSWORD=$PASSWORD psql -X -q -h 127.0.0.1 -p "$PORT" -U "$ROLE" -d "$DATABASE" -tAc 'SELECT 1' >/dev/null \
  || die "cannot log in as $ROLE to $DATABASE over 127.0.0.1:$PORT (check pg_hba.conf)"

log "ready"
echo "export ROOST_TEST_POSTGRES_URL=postgresql+asyncpg://$ROLE:$PASSWORD@127.0.0.1:$PORT/$DATABASE"
