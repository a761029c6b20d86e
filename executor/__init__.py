"""Real replay of traces on the local device (GPU when present, CPU otherwise)."""
