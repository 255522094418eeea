"""``python -m trainsim``."""

from trainsim.cli import main

main()
