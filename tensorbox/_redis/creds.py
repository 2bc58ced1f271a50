"""What a pickled store handle carries to reach its server, and how a worker that
unpickles it gets the credentials the pickle left out.

A pickle travels (to DataLoader workers, other ranks, logs, caches), so by default it
carries no password: the worker takes it from its environment, or from a credential
provider the pickle may carry (an object of the user's own, which fetches the secret
where it runs; redis-py's ``UsernamePasswordCredentialProvider`` holds the password
itself, so it is left out as a password is).
"""

from __future__ import annotations

import os
from typing import Any

from tensorbox._redis.wire import _Server

# The environment variables a worker takes the password from: ours, then redis-cli's.
PASSWORD_VARS = ("TENSORBOX_REDIS_PASSWORD", "REDISCLI_AUTH")
USERNAME_VAR = "TENSORBOX_REDIS_USERNAME"


def _holds_secret(provider: Any) -> bool:
    return type(provider).__name__ == "UsernamePasswordCredentialProvider"


def pickled_connection(server: _Server) -> dict[str, Any]:
    """The connection part of a handle's pickle: settings without the password (unless
    the handle was opened with ``pickle_credentials=True``), and whether one is needed."""
    connect = dict(server.connect)
    provider = server.provider
    needs = "password" if connect.get("password") is not None else None
    if provider is not None:
        needs = "provider"
    if not server.pickle_credentials:
        connect.pop("password", None)
        if _holds_secret(provider):
            # the user name is no secret: kept, so a password from the environment
            # signs in as the same ACL user
            if getattr(provider, "username", "") and not connect.get("username"):
                connect["username"] = provider.username
            provider = None
    return {"connect": connect, "provider": provider, "needs": needs}


class _NoCredentials:
    """The client of a handle unpickled without the credentials its server needs: every
    use raises the ``PermissionError`` naming what is missing. Raised at first use, not
    while unpickling, so that a DataLoader worker reports it as the worker's error (an
    error while unpickling kills the worker: "exited unexpectedly", the message lost)."""

    def __init__(self, message: str) -> None:
        self._message = message

    def __getattr__(self, name: str) -> Any:
        raise PermissionError(self._message)

    def close(self) -> None:
        pass  # nothing was opened


def worker_client(spec: dict[str, Any], where: str) -> tuple[Any, dict[str, Any], Any]:
    """A client from a pickled handle's connection part: ``(client, connect, provider)``.

    The password the pickle left out comes from ``TENSORBOX_REDIS_PASSWORD`` (or
    ``REDISCLI_AUTH``, redis-cli's), the user name from ``TENSORBOX_REDIS_USERNAME``
    where set; with neither, the client raises a ``PermissionError`` naming what is
    missing on first use."""
    from tensorbox._redis.wire import reconnect

    connect = dict(spec["connect"])
    provider = spec.get("provider")
    if spec.get("needs") and provider is None and connect.get("password") is None:
        password = next((os.environ[v] for v in PASSWORD_VARS if os.environ.get(v)), None)
        if password is None:
            return (
                _NoCredentials(
                    f"{where}: the server needs credentials, which the pickled handle does "
                    f"not carry (pickle_credentials=False): set {' or '.join(PASSWORD_VARS)} "
                    "in this process, open the store with a picklable credential_provider=, "
                    "or with pickle_credentials=True"
                ),
                connect,
                provider,
            )
        connect["password"] = password
        if os.environ.get(USERNAME_VAR):
            connect["username"] = os.environ[USERNAME_VAR]
    return reconnect(connect, provider), connect, provider
