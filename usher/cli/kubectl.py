"""``kubectl usher ...``: which Usher a kubeconfig context names (kubectl's plugin convention).

What it does: kubectl runs ``kubectl-usher`` with every argument after the plugin's name, as
typed (kubectl refuses flags before it), and the environment (``KUBECONFIG`` included). As
kueuectl does with kubectl's global flags, ``--kubeconfig FILE`` and ``--context NAME`` are
taken wherever they stand (before a ``--``). The kubeconfig is ``--kubeconfig``, else the
files of ``KUBECONFIG`` (merged as kubectl merges them: the first file to name an entry or a
current context wins), else ``~/.kube/config``; the context is ``--context``, else its
current context. The context's cluster server then names the installation:

1. the local stack of ``--home``/``$USHER_HOME`` when it runs with that very API server
   (its emulator's URL); then every address comes from its ``stack.json``;
2. otherwise a cluster: the Kubernetes API is that context of that kubeconfig, and Usher's
   NATS is the context's ``usher.io`` extension (``nats-url``, optional ``prefix``), else
   ``$USHER_NATS_URL``; a context with neither is refused, naming it and its server, once a
   command needs Usher (``--help`` and argument errors come first).

``environment_for`` returns the arguments and environment ``usher`` then runs with.
Without any kubeconfig, ``kubectl usher`` is ``usher`` (the local stack, as before).
What it must never do: import anything heavy (it runs before every plugin command), write a
kubeconfig, or print a secret.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import yaml

from usher.adapters.stack_file import read_stack_info, usher_home

EXTENSION = "usher.io"
"""The name of the context extension that says where a cluster's Usher listens."""
TAKEN = ("--kubeconfig", "--context")
"""kubectl's global flags the plugin takes out of the arguments."""
REFUSED = "USHER_KUBE_CONTEXT_REFUSED"
"""Why the chosen context names no Usher (``usher.client.target`` says it when asked for one)."""
CHOSEN = ("USHER_KUBECONFIG", "USHER_KUBE_CONTEXT", "USHER_NATS_URL", "USHER_PREFIX", REFUSED)
"""The variables the chosen installation sets (or clears), whatever the caller had."""


class PluginError(Exception):
    """A kubeconfig or context that names no Usher: one line and an exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@dataclass
class Kubeconfig:
    """The merged entries of one or more kubeconfig files, and which file named each context."""

    files: list[Path]
    contexts: dict[str, dict[str, Any]] = field(default_factory=dict)
    clusters: dict[str, dict[str, Any]] = field(default_factory=dict)
    context_file: dict[str, Path] = field(default_factory=dict)
    current: str = ""

    @classmethod
    def load(cls, files: list[Path]) -> Kubeconfig:
        merged = cls(files=[f for f in files if f.is_file()])
        for path in merged.files:
            try:
                config = yaml.safe_load(path.read_text()) or {}
            except (OSError, yaml.YAMLError) as exc:
                raise PluginError(f"kubeconfig {path} is unreadable: {exc}", 2) from exc
            if not isinstance(config, dict):
                raise PluginError(f"kubeconfig {path} is not a kubeconfig", 2)
            for entry in config.get("contexts") or []:
                if entry.get("name") not in merged.contexts:
                    merged.contexts[entry["name"]] = entry.get("context") or {}
                    merged.context_file[entry["name"]] = path
            for entry in config.get("clusters") or []:
                merged.clusters.setdefault(entry.get("name"), entry.get("cluster") or {})
            merged.current = merged.current or str(config.get("current-context") or "")
        return merged

    def server(self, context: str) -> str:
        cluster = self.clusters.get(str(self.contexts[context].get("cluster") or ""), {})
        return str(cluster.get("server") or "").rstrip("/")

    def extension(self, context: str) -> dict[str, Any]:
        """The context's ``usher.io`` extension (empty when it has none)."""
        for entry in self.contexts[context].get("extensions") or []:
            if isinstance(entry, dict) and entry.get("name") == EXTENSION:
                found = entry.get("extension")
                return found if isinstance(found, dict) else {}
        return {}


def take_flags(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """``argv`` without kubectl's ``--kubeconfig``/``--context`` (either spelling, anywhere
    before ``--``), and their values."""
    rest: list[str] = []
    taken: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest.extend(argv[i:])
            break
        name, eq, value = arg.partition("=")
        if name in TAKEN:
            if not eq:
                if i + 1 >= len(argv):
                    raise PluginError(f"{name}: needs a value", 2)
                i += 1
                value = argv[i]
            taken[name] = value
        else:
            rest.append(arg)
        i += 1
    return rest, taken


def _home_of(argv: list[str], environ: Mapping[str, str]) -> Path:
    """The ``--home`` an usher command was given, else ``$USHER_HOME``, else ``~/.usher``."""
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg.startswith("--home="):
            return Path(arg.removeprefix("--home=")).expanduser()
        if arg == "--home" and i + 1 < len(argv):
            return Path(argv[i + 1]).expanduser()
    home = environ.get("USHER_HOME")
    return Path(home).expanduser() if home else usher_home()


def _local_server(home: Path) -> str:
    """The API server of the local stack running in ``home`` (empty when none runs there)."""
    try:
        info = read_stack_info(home)
        local = Kubeconfig.load([Path(info.kubeconfig)])
        return local.server(local.current) if local.current in local.contexts else ""
    except (FileNotFoundError, msgspec.DecodeError, msgspec.ValidationError, PluginError):
        return ""


def kubeconfig_files(flag: str | None, environ: Mapping[str, str]) -> list[Path]:
    """kubectl's order: ``--kubeconfig``, else ``KUBECONFIG``'s files, else ~/.kube/config."""
    if flag:
        return [Path(flag).expanduser()]
    listed = [Path(p).expanduser() for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return listed or [Path(environ.get("HOME", "~")).expanduser() / ".kube" / "config"]


def environment_for(
    argv: list[str], environ: Mapping[str, str]
) -> tuple[list[str], dict[str, str]]:
    """The ``usher`` arguments and environment for ``kubectl usher ARGV`` (see the module)."""
    rest, taken = take_flags(argv)
    flag = taken.get("--kubeconfig")
    if flag and not Path(flag).expanduser().is_file():
        raise PluginError(f"--kubeconfig: {flag} does not exist", 2)
    config = Kubeconfig.load(kubeconfig_files(flag, environ))
    wanted = taken.get("--context") or config.current
    env = dict(environ)
    if not config.files or not wanted:
        if taken.get("--context"):
            raise PluginError("--context: no kubeconfig (--kubeconfig, $KUBECONFIG)", 2)
        return rest, env  # no context: the local stack, as `usher` finds it
    if wanted not in config.contexts:
        files = ", ".join(str(f) for f in config.files)
        raise PluginError(f'context "{wanted}" does not exist in {files}', 2)
    server = config.server(wanted)
    home = _home_of(rest, environ)
    for name in CHOSEN:
        env.pop(name, None)
    local = _local_server(home)
    if server and server == local:
        env["USHER_HOME"] = str(home)
        return rest, env
    extension = config.extension(wanted)
    nats = str(extension.get("nats-url") or environ.get("USHER_NATS_URL") or "")
    if not nats:  # said when a command needs Usher: --help and argument errors come first
        here = f"the local stack of {home} serves {local}" if local else f"none runs in {home}"
        env[REFUSED] = (
            f'context "{wanted}" (server {server or "none"}) is not a local stack ({here}) and '
            f"names no Usher NATS: add its {EXTENSION} extension with nats-url, or set "
            "USHER_NATS_URL"
        )
        return rest, env
    env["USHER_KUBECONFIG"] = str(config.context_file[wanted])
    env["USHER_KUBE_CONTEXT"] = wanted
    env["USHER_NATS_URL"] = nats
    if extension.get("prefix"):
        env["USHER_PREFIX"] = str(extension["prefix"])
    return rest, env
