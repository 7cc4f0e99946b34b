"""``python -m services.preemptor`` with settings from the environment or ``stack.json``."""

from services.common.runtime import run_service
from services.common.settings import load_settings
from services.preemptor.service import main

if __name__ == "__main__":
    run_service("preemptor", load_settings(), main)
