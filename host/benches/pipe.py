"""What a user without a mirror would write: a consume -> produce pipe on confluent-kafka
(its wheel bundles a current librdkafka), with the same producer guarantees as kmirror
(idempotent, acks=all, linger 5 ms). One process per topic, its partitions assigned from
the beginning; exits once it copied `expected` records per partition.

    pipe.py BOOTSTRAP_SRC BOOTSTRAP_DST TOPIC TARGET_TOPIC COUNT_P0,COUNT_P1,...

Prints `first=<epoch s> last=<epoch s> copied=<n>`.
"""

import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def main():
    src, dst, topic, target, counts = sys.argv[1:6]
    expected = [int(c) for c in counts.split(",")]
    consumer = Consumer({
        "bootstrap.servers": src,
        "group.id": "pipe-" + target,
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        "queued.max.messages.kbytes": 32768,
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(len(expected))])
    producer = Producer({
        "bootstrap.servers": dst,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "queue.buffering.max.messages": 100000,
        "queue.buffering.max.kbytes": 65536,
    })
    left = sum(expected)
    copied = 0
    first = None
    while left > 0:
        batch = consumer.consume(num_messages=1000, timeout=1.0)
        for m in batch:
            if m.error():
                continue
            if first is None:
                first = time.time()
            while True:
                try:
                    producer.produce(target, m.value(), m.key(), m.partition(), headers=m.headers())
                    break
                except BufferError:
                    producer.poll(0.005)
            copied += 1
            left -= 1
        producer.poll(0)
    producer.flush(60)
    # Its own peak RSS: a child's ru_maxrss carries the parent's peak over the exec.
    hwm = next(
        (l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM:")), "0"
    )
    print(f"first={first} last={time.time()} copied={copied} hwm_kb={hwm}", flush=True)


if __name__ == "__main__":
    try:
        main()
    except KafkaException as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
