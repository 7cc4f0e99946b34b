"""Tests of the command line and the client beside it: `usher up` and the commands people run,
the live view, kubectl views of the emulator, the demo. Helpers shared with other test folders
live in modules not named ``test_*``."""
