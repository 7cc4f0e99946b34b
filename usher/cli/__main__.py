"""``python -m usher.cli``: the same command line as the ``usher`` console script."""

from usher.entry import main

main()
