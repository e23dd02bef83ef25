"""tsched node: Raft, the LMDB log and the HTTP API."""
