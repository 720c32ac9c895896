"""Figures and claims of paper 004 (hierarchical: backward feature correction, synthetic protocol)."""
