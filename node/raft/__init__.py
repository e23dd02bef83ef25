"""Raft: the replica, its LMDB journal, transport, snapshots and the proposer."""
