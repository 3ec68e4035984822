"""Raft for the KRaft-style controller quorum: a pure state machine, its log and a simulator."""
