"""eyas's reference engine (a small server speaking the part of SGLang's HTTP API eyas uses) and the
in-process greedy and speculative decoding it serves with."""
