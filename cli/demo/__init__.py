"""What `eyas demo` writes: the constructed target and its data (constructed), or a real target's data and
the pipeline specs of its CPU and GPU recipes (real). Built on the library; the library never imports them."""
