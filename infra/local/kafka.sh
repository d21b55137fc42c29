#!/usr/bin/env bash
# Single-node Apache Kafka 4.x (KRaft) for local runs and tests.
#   infra/local/kafka.sh start|stop|status|restart
# Jars come from Maven Central through infra/local/kafka/pom.xml (cached in kafka/target/lib);
# storage is formatted once under $SPILLWAY_STATE_DIR/kafka. Already running: reused.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
state="${SPILLWAY_STATE_DIR:-$root/.cache/state}/kafka"
port="${SPILLWAY_LOCAL_KAFKA_PORT:-9092}"
cport="${SPILLWAY_LOCAL_KAFKA_CONTROLLER_PORT:-9093}"
lib="$here/kafka/target/lib"
pidfile="$state/kafka.pid"
java="${JAVA_HOME:+$JAVA_HOME/bin/}java"

alive() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

fetch() {
  if [ ! -f "$lib/kafka_2.13-"*.jar ] 2>/dev/null || ! ls "$lib"/kafka_2.13-*.jar >/dev/null 2>&1; then
    echo "kafka: fetching jars from Maven Central (mvn dependency:copy-dependencies)" >&2
    (cd "$here/kafka" && mvn -q -B -Dstyle.color=never dependency:copy-dependencies -DoutputDirectory=target/lib -DincludeScope=runtime >&2)
  fi
}

start() {
  if alive; then echo "kafka: already running on 127.0.0.1:$port (pid $(cat "$pidfile"))"; return 0; fi
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then echo "kafka: something already listens on 127.0.0.1:$port; reusing it"; return 0; fi
  fetch
  mkdir -p "$state/data"
  cat > "$state/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$state/data
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
min.insync.replicas=1
default.replication.factor=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
log.retention.hours=24
PROPS
  if [ ! -f "$state/data/meta.properties" ]; then
    # Static quorum (controller.quorum.voters): format with a fresh cluster id, no --standalone.
    cid="$("$java" -cp "$lib/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)"
    "$java" -cp "$lib/*" -Dlog4j2.configurationFile="$here/kafka/log4j2.yaml" kafka.tools.StorageTool \
      format -t "$cid" -c "$state/server.properties" >"$state/format.log" 2>&1 \
      || { echo "kafka: storage format failed:" >&2; cat "$state/format.log" >&2; exit 1; }
  fi
  : > "$state/kafka.log"
  nohup "$java" -Xms256m -Xmx768m -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$here/kafka/log4j2.yaml" -cp "$lib/*" kafka.Kafka "$state/server.properties" \
    >>"$state/kafka.log" 2>&1 &
  echo $! > "$pidfile"
  for _ in $(seq 1 120); do
    if ! alive; then echo "kafka: exited during start; last log lines:" >&2; tail -20 "$state/kafka.log" >&2; exit 1; fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      if node "$here/kafka-ready.mjs" "127.0.0.1:$port" 2>/dev/null; then echo "kafka: ready on 127.0.0.1:$port"; return 0; fi
    fi
    sleep 0.5
  done
  echo "kafka: not ready after 60 s; see $state/kafka.log" >&2; exit 1
}

stop() {
  if alive; then
    kill "$(cat "$pidfile")" 2>/dev/null || true
    for _ in $(seq 1 60); do alive || break; sleep 0.5; done
    alive && kill -9 "$(cat "$pidfile")" 2>/dev/null || true
    echo "kafka: stopped"
  else echo "kafka: not running"; fi
  rm -f "$pidfile"
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) if alive; then echo "kafka: running (pid $(cat "$pidfile"))"; else echo "kafka: not running"; exit 1; fi ;;
  *) echo "usage: $0 start|stop|restart|status" >&2; exit 2 ;;
esac
