"""Asyncio socket server: connections, framing, back-pressure."""
