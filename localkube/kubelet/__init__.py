"""The kubelet (and scheduler) of localkube: pods run as local processes in private mount namespaces.

What a pod gets: its containers' command/args (images are mapped to local programs, see images.py), env
(value, $(VAR), valueFrom secretKeyRef/configMapKeyRef/fieldRef, envFrom), volumes at their mountPaths
(persistentVolumeClaim, emptyDir, hostPath, secret, configMap; subPath, readOnly) and volumeDevices at their
devicePaths, workingDir, a private /dev/termination-log (or terminationMessagePath), fsGroup on volume
roots, init containers in order, restartPolicy with back-off, httpGet readiness probes, logs for
`kubectl logs`, SIGTERM then SIGKILL on deletion.

What it does not do: pods share the host's network (each has its own 127.x.y.z pod IP, which a program
binds when it wants its own ports: give it status.podIP through a fieldRef), processes run as root
(runAsUser/runAsGroup are not applied), resources and liveness/startup probes are ignored, and there is no
exec, attach or port-forward.
"""

from .images import ImageMap, console_script_images
from .kubelet import NODE_NAME, Kubelet

__all__ = ["NODE_NAME", "ImageMap", "Kubelet", "console_script_images"]
