"""Token-in/token-out inference: one call sends prompt ids and gets back sampled ids with logprobs.

Each name is imported from the module that defines it (farm.inference.backend, .errors, .generation,
.wire): the package re-exports nothing, so a concept has one import path."""
