"""An embedded Kubernetes API server for development and tests (see localkube/README.md)."""

from .server import APIServer, LogProvider
from .thread import ServerThread

__all__ = ["APIServer", "LogProvider", "ServerThread"]
