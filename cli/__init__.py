"""The `eyas` command line."""
