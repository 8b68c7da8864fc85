"""Speaking the Kubernetes API from trio: configuration, an async client, and an informer."""
