"""Helpers shared by the benchmark scripts: machine description, statistics, printing,
local clusters of real tsnode processes, and a small raw HTTP client for batching."""
