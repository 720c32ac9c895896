"""Figures and claims of paper 002 (deep_linear)."""
