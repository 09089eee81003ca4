"""A stand-in for the `sglang` package in the serving tests: real SGLang needs a GPU (see launch_server)."""
