"""The Moldau broker: network, log, metadata and request handlers."""
