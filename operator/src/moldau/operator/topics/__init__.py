"""Topic resources (moldau.io/v1alpha1, kind Topic), kept apart in two halves.

The Kafka side knows nothing of Kubernetes: the wanted topics of one cluster against what
the cluster has, turned into actions (plan.py, placement.py) and applied through one admin
client per cluster, many topics per request (kafka.py, reconciler.py), with submissions
from many resources gathered into batches (batcher.py, clients.py). The Kubernetes side
reads Topic objects into wanted topics and writes their status (resource.py); the kopf
handlers (moldau.operator.topic_handlers) join the two.
"""
