"""Network services: the verifier over HTTP and its clients."""

if __name__ != "forkgym.services":  # imported as a top-level `services` from a source checkout
    raise ImportError(
        "this folder is the sub-package forkgym.services; install forkgym "
        "(`pip install -e .`) and import forkgym.services instead of `services`"
    )
