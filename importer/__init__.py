"""The data plane: sources, decompression, format inspection, conversion and targets.

Never imports Kubernetes code (see .importlinter).
"""
