"""A consume-transform-produce process for the exactly-once tests (Kafka's EOS pattern with
librdkafka): reads `source` in a group with read_committed, copies each record to the same
partition of `sink`, and commits its input offsets in the same transaction
(send_offsets_to_transaction). Any error ends the process with exit code 3: the test starts
it again, and the new instance's init_transactions fences and aborts what the old one left.

    python -m e2e.eos_processor BOOTSTRAP SOURCE SINK GROUP TRANSACTIONAL_ID [PAUSE_S]

Prints one JSON line per committed transaction: {"committed": <records>}.
"""

from __future__ import annotations

import json
import sys
import time

BATCH = 10  # records per transaction at most
TIMEOUT_S = 60.0
ERROR_EXIT = 3


def run(bootstrap: str, source: str, sink: str, group: str, transactional_id: str,
        pause_s: float) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group,
        # Static membership: a restarted instance takes the dead one's place at once.
        "group.instance.id": f"{transactional_id}-member", "session.timeout.ms": 10000,
        "isolation.level": "read_committed", "enable.auto.commit": False,
        "auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 30000, "linger.ms": 5})
    producer.init_transactions(TIMEOUT_S)
    consumer.subscribe([source])
    while True:
        messages = consumer.consume(BATCH, 0.5)
        for message in messages:
            if message.error() is not None:
                raise RuntimeError(f"consume: {message.error()}")
        if not messages:
            continue
        producer.begin_transaction()
        next_offsets: dict[int, int] = {}
        for message in messages:
            producer.produce(sink, message.value(), message.key(),
                             partition=message.partition())
            next_offsets[message.partition()] = message.offset() + 1
        producer.send_offsets_to_transaction(
            [TopicPartition(source, partition, offset)
             for partition, offset in next_offsets.items()],
            consumer.consumer_group_metadata(), TIMEOUT_S)
        producer.commit_transaction(TIMEOUT_S)
        print(json.dumps({"committed": len(messages)}), flush=True)
        time.sleep(pause_s)


def main() -> None:
    bootstrap, source, sink, group, transactional_id = sys.argv[1:6]
    pause_s = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0
    try:
        run(bootstrap, source, sink, group, transactional_id, pause_s)
    except Exception as exc:  # any failure: the supervisor restarts the process
        print(f"eos processor: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        sys.exit(ERROR_EXIT)


if __name__ == "__main__":
    main()
