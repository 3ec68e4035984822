"""The segmented partition log on disk."""
