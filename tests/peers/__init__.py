"""Peer tests: real peteos releases, in side virtual environments, write the ground truth."""
