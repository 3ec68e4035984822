"""The KafkaCluster custom resource: its API coordinates and the operator's identity."""

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
