"""Hydra configuration groups of hobbit (YAML package data; see docs/design.md, "Entry points")."""

from pathlib import Path

CONF_DIR = Path(__file__).parent
