"""Partitions this broker hosts: leadership, appends, reads and the high watermark."""
