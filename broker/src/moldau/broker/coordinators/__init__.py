"""Coordinators: producer ids now; groups and transactions build on this room."""
