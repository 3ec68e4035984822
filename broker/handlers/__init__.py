"""One handler per Kafka API, as Kafka's KafkaApis dispatches them.

Importing this package registers every handler in the API table.
"""

from moldau.broker.handlers import (  # noqa: F401
    api_versions,
    cluster,
    configs,
    fetch,
    metadata,
    offsets,
    produce,
    producer_ids,
    topics,
)
