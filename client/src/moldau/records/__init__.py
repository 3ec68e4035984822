"""The record batch format (magic v2) shared by the broker and the client."""
