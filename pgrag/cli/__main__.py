"""`python -m pgrag.cli` runs the `pgrag` command."""

from pgrag.cli import main

main()
