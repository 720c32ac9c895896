"""Figures and claims of paper 000 (ldminv: LD-Minv and D-SVD)."""
