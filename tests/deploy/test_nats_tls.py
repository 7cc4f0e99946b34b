"""TLS to NATS: USHER_NATS_TLS_{CA,CERT,KEY} reach the settings and the connection's SSLContext.

No TLS server is run: the settings are parsed from the environment, a missing file is an error
naming its variable, and the context built from real PEM files (made with `openssl`, skipped
without it) verifies the server and carries the client certificate.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from services.common.runtime import nats_tls_context
from services.common.settings import SettingsError, load_settings

OPENSSL = shutil.which("openssl")
VARIABLES = ("USHER_NATS_TLS_CA", "USHER_NATS_TLS_CERT", "USHER_NATS_TLS_KEY")


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    monkeypatch.setenv("USHER_NATS_URL", "tls://nats.example:4222")
    for variable in VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    return monkeypatch


@pytest.fixture
def pem(tmp_path: Path) -> dict[str, Path]:
    """A self-signed CA certificate and a client certificate + key, all PEM."""
    if OPENSSL is None:
        pytest.skip("openssl not installed")
    files = {"ca": tmp_path / "ca.crt", "cert": tmp_path / "tls.crt", "key": tmp_path / "tls.key"}
    ca_key = tmp_path / "ca.key"
    for key, cert, subject in ((ca_key, files["ca"], "/CN=usher-ca"),
                               (files["key"], files["cert"], "/CN=usher-ledger")):  # fmt: skip
        subprocess.run(
            [OPENSSL, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-days", "1", "-subj", subject, "-keyout", str(key), "-out", str(cert)],
            check=True, capture_output=True,
        )  # fmt: skip
    return files


def test_no_tls_variables_means_no_tls_context(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path)
    assert (settings.nats_tls_ca, settings.nats_tls_cert, settings.nats_tls_key) == (None,) * 3
    assert nats_tls_context(settings) is None


def test_the_tls_files_are_read_from_the_environment(
    env: pytest.MonkeyPatch, tmp_path: Path, pem: dict[str, Path]
) -> None:
    env.setenv("USHER_NATS_TLS_CA", str(pem["ca"]))
    env.setenv("USHER_NATS_TLS_CERT", str(pem["cert"]))
    env.setenv("USHER_NATS_TLS_KEY", str(pem["key"]))
    settings = load_settings(home=tmp_path)
    assert settings.nats_tls_ca == pem["ca"]
    assert settings.nats_tls_cert == pem["cert"]
    assert settings.nats_tls_key == pem["key"]
    context = nats_tls_context(settings)
    assert context is not None
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "usher-ca"),),)]


def test_a_ca_alone_verifies_the_server(
    env: pytest.MonkeyPatch, tmp_path: Path, pem: dict[str, Path]
) -> None:
    env.setenv("USHER_NATS_TLS_CA", str(pem["ca"]))
    settings = load_settings(home=tmp_path)
    assert settings.nats_tls_cert is None and settings.nats_tls_key is None
    context = nats_tls_context(settings)
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED


@pytest.mark.parametrize("variable", VARIABLES)
def test_a_missing_tls_file_names_its_variable(
    env: pytest.MonkeyPatch, tmp_path: Path, variable: str
) -> None:
    env.setenv(variable, str(tmp_path / "absent.pem"))
    with pytest.raises(SettingsError) as caught:
        load_settings(home=tmp_path)
    assert caught.value.name == variable
    assert str(tmp_path / "absent.pem") in caught.value.detail


def test_a_client_certificate_needs_its_key(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cert = tmp_path / "tls.crt"
    cert.write_text("not checked before the key is there")
    env.setenv("USHER_NATS_TLS_CERT", str(cert))
    with pytest.raises(SettingsError) as caught:
        load_settings(home=tmp_path)
    assert caught.value.name == "USHER_NATS_TLS_KEY"
