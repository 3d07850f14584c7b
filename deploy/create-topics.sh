#!/bin/sh
# Creates the topics deploy/kafka-ext-proc.yaml names, once, before the
# processor starts (docker-compose.yml service kafka-topics): requests never
# create topics, and the broker has auto-creation off.
#
# Topics read by http-kafka fetch routes are compacted: a fetch route serves
# the current record per key. One partition, as `kafka-ext-proc dev` creates
# them, so merged answers come in write order; one replica, as there is one
# broker. deploy/compose_test.go checks this list against the configuration.
set -eu
: "${BOOTSTRAP:?set BOOTSTRAP to the broker address, e.g. kafka:19092}"

create() {
  topic=$1
  shift
  /opt/kafka/bin/kafka-topics.sh --bootstrap-server "$BOOTSTRAP" --create --if-not-exists \
    --partitions 1 --replication-factor 1 --topic "$topic" "$@"
}

create items-snapshots --config cleanup.policy=compact
create orders-requests
create orders-responses
create echo-requests
create echo-responses
create fanout
