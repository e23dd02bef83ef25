"""The same workloads against other systems, for ratios measured in the same run."""
