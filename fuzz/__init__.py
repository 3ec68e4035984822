"""Coverage-guided fuzzing of the broker's request decoding, record-batch validation and SASL
token parsing (atheris). See docs/chaos.md, "Protocol fuzzing"."""
