"""`python -m runner.cli ...` is `convgrid ...`."""

from runner.cli import console

console()
