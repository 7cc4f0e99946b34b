"""``python -m services.dequeuer``: run the dequeuer of ``$USHER_ZONE`` with settings from the
environment or the embedded stack's ``stack.json``."""

import os

from services.common.runtime import run_service
from services.common.settings import load_settings
from services.dequeuer.service import main

if __name__ == "__main__":
    run_service("dequeuer", load_settings(zone=os.environ.get("USHER_ZONE", "default")), main)
