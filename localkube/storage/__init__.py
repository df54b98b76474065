"""Local storage: PVs backed by sparse files (Filesystem: ext4 on a loop device, mounted; Block: a loop device)."""

from .hostvolumes import host_capabilities_missing
from .provisioner import PROVISIONER, Provisioner
from .quantity import parse_quantity

__all__ = ["PROVISIONER", "Provisioner", "host_capabilities_missing", "parse_quantity"]
