"""Several Raft groups in one cluster: layout, router, merge, claims across shards, supervisor."""
