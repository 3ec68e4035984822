"""The marker channel to another broker, over a real socket to a stand-in broker that
answers WriteTxnMarkers slowly: many transactions' markers share one connection."""

from __future__ import annotations

import asyncio
import struct
import uuid
from types import SimpleNamespace

from moldau.broker.coordinators.transaction.markers import (
    MAX_IN_FLIGHT,
    Marker,
    MarkerChannel,
)
from moldau.broker.metadata.image import MetadataImage
from moldau.broker.metadata.records import PartitionRecord, TopicRecord
from moldau.errors import ErrorCode
from moldau.protocol.build import build
from moldau.protocol.messages import (
    decode_request,
    encode_response,
    parse_header,
    response_class,
)

THIS, LEADER = 1, 2
REPLY_DELAY_S = 0.2


class SlowLeader:
    """Answers every WriteTxnMarkers with NONE after a delay; counts connections."""

    def __init__(self) -> None:
        self.connections = 0
        self.markers: list[int] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                asyncio.get_running_loop().create_task(self._answer(frame, writer))
        except asyncio.IncompleteReadError:
            writer.close()

    async def _answer(self, frame: bytes, writer: asyncio.StreamWriter) -> None:
        header = parse_header(frame, flexible=True)
        body = decode_request(27, 1, frame, header.size)
        await asyncio.sleep(REPLY_DELAY_S)
        self.markers += [marker.producer_id for marker in body.markers]
        writer.write(encode_response(header.correlation_id, build(response_class(27, 1), {
            "markers": [{"producer_id": marker.producer_id, "topics": [
                {"name": topic.name, "partitions": [
                    {"partition_index": index, "error_code": ErrorCode.none}
                    for index in topic.partition_indexes]} for topic in marker.topics]}
                for marker in body.markers]})))


def test_concurrent_transactions_share_one_connection_to_a_leader():
    async def scenario():
        leader = SlowLeader()
        server = await asyncio.start_server(leader.serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        image = MetadataImage()
        topic_id = uuid.uuid4()
        image.apply(1, TopicRecord("data", topic_id))
        image.apply(2, PartitionRecord(topic_id, 0, (LEADER,), (LEADER,), LEADER,
                                       leader_epoch=0))
        replicas = SimpleNamespace(image=image,
                                   leader_endpoint=lambda _broker: ("127.0.0.1", port))
        channel = MarkerChannel(THIS, replicas, lambda *_: None)  # type: ignore[arg-type]
        count = MAX_IN_FLIGHT * 3
        done = await asyncio.gather(*(
            channel.write(Marker(producer_id, 0, 0, True, (("data", 0),)), lambda: True)
            for producer_id in range(count)))
        channel.close()
        server.close()
        assert done == [True] * count
        assert sorted(leader.markers) == list(range(count))  # each sent once, none retried
        assert leader.connections == 1
    asyncio.run(asyncio.wait_for(scenario(), 30))
