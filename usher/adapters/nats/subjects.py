"""The NATS subject and stream layout, as the adapters use it (defined in the pure core).

What it does: re-exports ``usher.core.protocol.subjects`` (names of every subject and stream, safe
tokens, and ``owner_problem``: who may put which entry on which subject), so that the fold
every reader uses and the services that publish share one definition.
What it must never do: define a subject of its own.
"""

from usher.core.protocol.subjects import Subjects, installation_of, owner_problem, token, untoken

__all__ = ["Subjects", "installation_of", "owner_problem", "token", "untoken"]
