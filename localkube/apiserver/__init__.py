"""An embedded Kubernetes API server for development and tests (see README.md next to this file)."""

from .server import APIServer, LogProvider
from .thread import ServerThread

__all__ = ["APIServer", "LogProvider", "ServerThread"]
