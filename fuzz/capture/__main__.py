"""Regenerate fuzz/corpus/ from real client traffic:

    python -m fuzz.capture        (make fuzz-corpus)

Starts one Moldau broker with a PLAINTEXT and a SASL_PLAINTEXT listener, each behind a
recording proxy that the broker advertises, runs the client steps of workloads.py through
the proxies and writes the seeds (fuzz/capture/seeds.py) over fuzz/corpus/. Needs Java and
Kafka's jars (make kafka-deps); takes a few minutes.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from e2e.conftest import Broker
from e2e.support import free_port
from fuzz.capture.proxy import TO_BROKER, RecordingProxy
from fuzz.capture.seeds import build_seeds
from fuzz.capture.workloads import PLAIN_JAAS, STEPS, Addresses
from fuzz.corpus import corpus_dir, input_name
from moldau.protocol.messages import parse_header_prefix


def record(workdir: Path) -> list:
    plain_port, sasl_port = free_port(), free_port()
    proxies = [RecordingProxy(("127.0.0.1", plain_port)).start(),
               RecordingProxy(("127.0.0.1", sasl_port)).start()]
    broker = Broker(workdir / "broker", {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},"
                     f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxies[0].port},"
                                f"SASL_PLAINTEXT://127.0.0.1:{proxies[1].port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": "true",
    }, port=plain_port)
    addresses = Addresses(f"127.0.0.1:{proxies[0].port}", f"127.0.0.1:{proxies[1].port}")
    broker.start()
    try:
        for name, step in STEPS:
            started = time.monotonic()
            step(addresses)
            print(f"{name}: done in {time.monotonic() - started:.1f} s", flush=True)
    finally:
        for proxy in proxies:
            proxy.stop()
        broker.stop()
    return [frame for proxy in proxies for frame in proxy.frames]


def write(target: str, inputs: list[bytes]) -> None:
    directory = corpus_dir(target)
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    for data in inputs:
        (directory / input_name(data)).write_bytes(data)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m fuzz.capture", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fuzz-capture-") as scratch:
        frames = record(Path(scratch))
    requests = Counter(parse_header_prefix(f.data)[0] for f in frames
                       if f.direction == TO_BROKER and len(f.data) >= 8)
    seeds = build_seeds(frames)
    for target in ("frames", "batches", "sasl"):
        inputs = getattr(seeds, target)
        write(target, inputs)
        print(f"{target}: {len(set(inputs))} inputs, {sum(map(len, set(inputs)))} bytes "
              f"-> {corpus_dir(target)}")
    print(f"recorded {len(frames)} frames; requests by API key: {dict(sorted(requests.items()))}")


if __name__ == "__main__":
    main(sys.argv[1:])
