"""``python -m services.webhook``: serve the mutating admission webhook until SIGTERM."""

from services.common.settings import load_webhook_settings
from services.webhook.service import run_webhook

if __name__ == "__main__":
    run_webhook(load_webhook_settings())
