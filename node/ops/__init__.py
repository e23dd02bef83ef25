"""Operations: metrics, time series, the garbage-collector policy, the audit archive."""
