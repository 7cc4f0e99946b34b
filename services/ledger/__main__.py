"""``python -m services.ledger``: run the ledger service until SIGTERM."""

from services.common.runtime import run_service
from services.common.settings import load_settings
from services.ledger.service import main

if __name__ == "__main__":
    run_service("ledger", load_settings(), main)
