"""The cluster stand-in: the few Kubernetes endpoints the daemons use, served from a scenario."""
