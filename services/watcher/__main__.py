"""``python -m services.watcher``: run the watcher until SIGTERM."""

from services.common.runtime import run_service
from services.common.settings import load_settings
from services.watcher.service import main

if __name__ == "__main__":
    run_service("watcher", load_settings(), main)
