"""tsched client library, worker runtime and the tsctl CLI."""
