"""A launch: render the spec into argv and environment, check it against the host and SGLang's rules, then
start, watch and stop the server."""
