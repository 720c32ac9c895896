"""Figures and claims of paper 003 (linear_resnet)."""
