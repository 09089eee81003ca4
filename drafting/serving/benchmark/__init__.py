"""Measuring speed: the load client, one benchmark run, the config sweep with its paired rounds, statistics,
cost profile, report and release gate."""
