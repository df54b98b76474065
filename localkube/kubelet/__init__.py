"""The kubelet (and scheduler) of localkube: pods run as local processes in private mount namespaces."""

from .images import ImageMap, console_script_images
from .kubelet import NODE_NAME, Kubelet

__all__ = ["NODE_NAME", "ImageMap", "Kubelet", "console_script_images"]
