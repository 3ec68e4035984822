"""The custom resources (KafkaCluster, Topic, KafkaUser): their API coordinates, labels and
annotations, and the operator's identity."""

from __future__ import annotations

GROUP = "moldau.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "KafkaCluster"
PLURAL = "kafkaclusters"
SHORT_NAME = "mkc"
# The field manager of every server-side apply, and the kopf peering name.
FIELD_MANAGER = "moldau-operator"
PEERING_NAME = "moldau"
BROKER_IMAGE_ENV = "MOLDAU_BROKER_IMAGE"
DEFAULT_BROKER_IMAGE = "localhost/moldau-broker:0.1.0"

# The Topic resource: a Kafka topic of the KafkaCluster its label names.
TOPIC_KIND = "Topic"
TOPIC_PLURAL = "topics"
TOPIC_SHORT_NAME = "mkt"
# The KafkaUser resource: credentials and ACLs of a user of the KafkaCluster its label names.
USER_KIND = "KafkaUser"
USER_PLURAL = "kafkausers"
USER_SHORT_NAME = "mku"
# As Strimzi's strimzi.io/cluster and strimzi.io/managed.
CLUSTER_LABEL = "moldau.io/cluster"
MANAGED_ANNOTATION = "moldau.io/managed"
# Holds a Topic until its Kafka topic is deleted (or the cluster is gone or unreachable), and
# a KafkaUser until its ACLs and credentials are (kopf has one finalizer per operator).
FINALIZER = "moldau.io/topic-operator"
