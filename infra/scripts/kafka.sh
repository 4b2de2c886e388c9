#!/usr/bin/env bash
# Private single-node Kafka (KRaft, combined broker+controller) for tests and developers.
# No Docker and no Debian package exist for the broker: its jars come from Maven Central
# (infra/scripts/kafka/pom.xml). Own ports, so a developer's other broker is never hit.
#   infra/scripts/kafka.sh {start|stop|restart|status|env}
# Env: NOUMENA_INFRA_DIR (default <repo>/.infra), NOUMENA_KAFKA_PORT (default 59092; +1 = controller).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
INFRA="${NOUMENA_INFRA_DIR:-$HERE/../../.infra}"
INFRA="$(mkdir -p "$INFRA" && cd "$INFRA" && pwd)"
PORT="${NOUMENA_KAFKA_PORT:-59092}"
CPORT=$((PORT + 1))
DIR="$INFRA/kafka" LIBS="$INFRA/kafka/libs" DATA="$INFRA/kafka/data"
CONF="$DIR/server.properties" LOG="$DIR/kafka.log" PIDF="$DIR/kafka.pid"
POM="$HERE/kafka/pom.xml"

die() { echo "kafka.sh: $*" >&2; exit 1; }

# Jars are fetched once; the pom's hash is kept so that a version bump re-fetches.
ensure_libs() {
  local want; want="$(sha256sum "$POM" | cut -d' ' -f1)"
  [ "$(cat "$LIBS/.pom.sha256" 2>/dev/null)" = "$want" ] && return
  echo "kafka.sh: fetching broker jars with Maven into $LIBS" >&2
  rm -rf "$LIBS"
  mvn -B -f "$POM" org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
    -DoutputDirectory="$LIBS" -DincludeScope=runtime >"$DIR/maven.log" 2>&1 \
    || { tail -n 30 "$DIR/maven.log" >&2; die "maven failed (log: $DIR/maven.log)"; }
  echo "$want" >"$LIBS/.pom.sha256"
}

pid() { cat "$PIDF" 2>/dev/null || true; }
# A pid file alone can be stale (reboot, kill -9): also check the process is this broker.
is_running() { local p; p="$(pid)"; [ -n "$p" ] && grep -qaF "$CONF" "/proc/$p/cmdline" 2>/dev/null; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/${1:-$PORT}") 2>/dev/null; }

write_conf() {
  # Rewritten every start so NOUMENA_KAFKA_PORT changes apply; data (log.dirs) is kept.
  cat >"$CONF" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CPORT
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CPORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$DATA
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
EOF
}

start() {
  if is_running; then echo "kafka.sh: already running (pid $(pid)) on 127.0.0.1:$PORT"; return; fi
  # A foreign listener on either port would be joined or hit silently: refuse.
  local p; for p in "$PORT" "$CPORT"; do
    port_open "$p" && die "port $p is taken by another process; set NOUMENA_KAFKA_PORT"
  done
  ensure_libs
  write_conf
  # Keep the previous run's log (e.g. before a restart in a test), drop older ones.
  if [ -f "$LOG" ]; then mv -f "$LOG" "$LOG.1"; fi
  if [ ! -f "$DATA/meta.properties" ]; then
    # Cluster id: 16 random bytes, base64url, 22 chars. Alphanumerics only, so it never
    # starts with '-' (would be read as an option).
    local cid; cid="$(head -c 64 /dev/urandom | base64 -w0 | tr -dc 'A-Za-z0-9' | cut -c1-21)A"
    java -cp "$LIBS/*" kafka.tools.StorageTool format -t "$cid" -c "$CONF" >>"$LOG" 2>&1 \
      || { tail -n 30 "$LOG" >&2; die "storage format failed"; }
  fi
  # setsid+nohup: the broker survives the caller's terminal/process group ending.
  setsid nohup java -Xms256m -Xmx512m -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
    -Dorg.slf4j.simpleLogger.showDateTime=true -Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS \
    -cp "$LIBS/*" kafka.Kafka "$CONF" >>"$LOG" 2>&1 </dev/null 9>&- &
  echo $! >"$PIDF"
  # The client port opens only once the broker serves requests: a valid readiness check.
  local t0=$SECONDS
  until port_open; do
    is_running || { tail -n 40 "$LOG" >&2; die "broker exited during start-up"; }
    [ $((SECONDS - t0)) -ge 90 ] && { tail -n 40 "$LOG" >&2; stop >&2; die "not ready after 90 s"; }
    sleep 0.3
  done
  echo "kafka.sh: running (pid $(pid)) on 127.0.0.1:$PORT after $((SECONDS - t0)) s"
}

stop() {
  if ! is_running; then rm -f "$PIDF"; echo "kafka.sh: not running"; return; fi
  local p; p="$(pid)"
  kill "$p"
  # Graceful shutdown flushes logs; a single node usually stops in a few seconds.
  # is_running, not kill -0: a killed child of this same shell lingers as a zombie.
  for _ in $(seq 150); do is_running || break; sleep 0.2; done
  if is_running; then kill -9 "$p"; sleep 0.5; fi
  rm -f "$PIDF"
  echo "kafka.sh: stopped"
}

# Serialize start/stop (parallel test workers); the broker must not inherit fd 9 (9>&- above).
case "${1:-}" in start|stop|restart) mkdir -p "$DIR"; exec 9>"$DIR/.lock"; flock 9 ;; esac

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) if is_running; then echo "running (pid $(pid)) on 127.0.0.1:$PORT"; else echo "not running"; exit 3; fi ;;
  env) echo "export NOUMENA_KAFKA_BOOTSTRAP=127.0.0.1:$PORT" ;;
  *) echo "usage: $0 {start|stop|restart|status|env}" >&2; exit 2 ;;
esac
