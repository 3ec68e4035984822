"""Cluster metadata: the metadata log, its in-memory image and the controller."""
