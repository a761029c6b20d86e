"""Eviction policies, one file each; ``sim.policies.registry`` maps names to them."""
