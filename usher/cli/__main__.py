"""``python -m usher.cli``: the same command line as the ``usher`` console script."""

from usher.cli import main

main()
