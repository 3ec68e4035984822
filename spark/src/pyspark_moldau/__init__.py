"""Moldau's Spark source and sink: `format("moldau")`, in pure Python."""
