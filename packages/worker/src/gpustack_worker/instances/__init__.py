"""The Instance controller: Instances become Pods, Services and isolation policies."""
