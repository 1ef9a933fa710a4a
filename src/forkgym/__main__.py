"""``python -m forkgym`` runs the command line."""

from forkgym.cli import main

main()
